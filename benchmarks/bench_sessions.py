"""Load: N concurrent sessions against one `panel serve inspector` process.

    .venv/bin/python benchmarks/bench_sessions.py [--sessions 20] [--pages 2] [--timeout 60]

Serves the app with `panel serve inspector` on 127.0.0.1 (as `make serve` does, with its
`--unused-session-lifetime`; one page fetched first, so the server has imported the app).
`--pages` sessions are Debian chromium pages driven by Playwright (opened one after another,
first paint timed); the others are Bokeh websocket clients (`tests/ui/bokeh_client.py`: the
messages a page sends, no browser, so the figures measure the server rather than twenty
renderers on the same cores), opened at once ("client ready": connected, onload work done,
the Run button in the document). Then every session at once loads an example (even sessions
S5, odd ones the 20k-leaf transformer), runs S1's weighted sum, changes a weight to a value no
other session uses (the change re-runs it), and checks that it shows only its own trees and
result; all stay open until the last is done and check again. A page's interaction is timed
from the click or keypress to the answer drawn; a client's, to the answer in its document.

Prints first paint, client ready, example load and run / weight-change latencies (median, p95,
max), the isolation verdicts and every error line of the server's log; exits 1 if a session
saw another's trees or result, an interaction timed out, the p95 of runs and weight changes is
2 s or more, or the log has an error. Target (issue 11): 20 sessions, p95 < 2 s, no error.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from inspector import examples  # noqa: E402
from tests.serving import CHROMIUM, CHROMIUM_ARGS, error_lines, served_app  # noqa: E402
from tests.ui.bokeh_client import BokehClient  # noqa: E402

# Even sessions load S5, odd ones the 20k-leaf transformer: each must see its own, not the other.
LOADS = [("S5: model vs old checkpoint", "checkpoint"),
         ("Transformer: 20k-leaf checkpoint", "transformer")]
_S1 = [np.asarray(t[0][0], np.int64) for t in examples.load("S1: weighted sum").values()]
_T0 = [time.perf_counter()]


def expected_leaf(w: int) -> str:
    """The text the result tree shows for S1's leaf [0][0] with weights [1, 2, w] (NumPy)."""
    t1, t2, t3 = _S1
    return "= " + str((1 * t1 + 2 * t2 + w * t3).tolist())


def progress(text: str) -> None:
    print(f"[{time.perf_counter() - _T0[0]:6.1f} s] {text}", flush=True)


async def _timed(action, answer) -> float:
    start = time.perf_counter()
    await action()
    await answer.wait_for()
    return time.perf_counter() - start


async def _open(browser, url: str, out: dict, timeout_ms: int):
    context = await browser.new_context(viewport={"width": 1680, "height": 1050})
    page = await context.new_page()
    page.set_default_timeout(timeout_ms)
    start = time.perf_counter()
    await page.goto(url, wait_until="commit")
    await page.get_by_role("treeitem").first.wait_for()
    out["first_paint"].append(time.perf_counter() - start)
    progress(f"session {len(out['first_paint']) - 1} painted in {out['first_paint'][-1]:.1f} s")
    return context, page


async def _session(page, i: int, n: int, out: dict, all_done: asyncio.Barrier) -> None:
    tree_name, other = LOADS[i % 2][1], LOADS[(i + 1) % 2][1]
    try:
        await page.get_by_role("combobox").filter(has_text="S1: weighted sum").first.click()
        await page.locator("li", has_text=LOADS[i % 2][0]).first.click()
        # The page sends a select's new value after redrawing it, a click at once: wait for the
        # server's answer (the example's description) before pressing Load, as a person would.
        await page.get_by_text(examples.EXAMPLES[LOADS[i % 2][0]].description[:40]).first \
            .wait_for()
        button = page.get_by_role("button", name="Load the trees of `example`.")
        out["load"].append(await _timed(button.click,
                                        page.get_by_text(tree_name, exact=True).first))
        run = page.get_by_role("button", name="Run the current operation.")
        out["interaction"].append(await _timed(run.click, page.get_by_text(expected_leaf(3))
                                               .first))  # S1's own weights, [1, 2, 3]
        weight = page.get_by_label("w2 · t3")
        for w in (10 + i,):  # a weight no other session uses
            await weight.click()
            await page.keyboard.press("Control+A")
            await page.keyboard.type(str(w))
            out["interaction"].append(await _timed(lambda: weight.press("Enter"),
                                                   page.get_by_text(expected_leaf(w)).first))
        out["isolation"].append((
            i, await page.get_by_text(tree_name, exact=True).count() > 0,
            await page.get_by_text(other, exact=True).count(),
            await page.get_by_text(expected_leaf(10 + (i + 1) % n)).count()))
        progress(f"session {i} done")
    except Exception as e:  # a timeout: recorded, the others go on
        out["failures"].append(f"session {i}: {type(e).__name__}: {str(e).splitlines()[0]}")
    await all_done.wait()  # every session stays open until all are done
    out["final"].append((i, await page.get_by_text(other, exact=True).count(),
                         await page.get_by_text(expected_leaf(10 + i)).count()))


def _trees(client: BokehClient) -> list[str]:
    return [item.get("label") for m in client.find("ItemList1")
            for item in (client.attr(m, "items") or [])]


async def _client(url: str, i: int, n: int, out: dict, timeout: float, started: asyncio.Barrier,
                  all_done: asyncio.Barrier) -> None:
    """A session driven by a Bokeh websocket client (no browser): the same changes a page
    sends, each timed until its answer is in the session's document."""
    client = BokehClient(url)
    tree_name, other = LOADS[i % 2][1], LOADS[(i + 1) % 2][1]

    def one(kind, label):
        ids = client.find(kind, label=label)
        return ids[0] if ids else None

    async def timed(key, action, answer):
        start = time.perf_counter()
        await action()
        await client.wait(answer, timeout)
        out[key].append(time.perf_counter() - start)

    try:
        start = time.perf_counter()
        await client.connect(timeout)
        await client.ready()  # as a drawn page: the page's onload work runs
        await client.wait(lambda c: one("Button1", "Run") and one("EnterInput1", "w2 · t3"),
                          timeout)
        out["ready"].append(time.perf_counter() - start)
    except Exception as e:
        out["failures"].append(f"client {i} (opening): {type(e).__name__}: {e}")
    await started.wait()
    try:
        await client.set(one("Select1", "Built-in examples"), "value", LOADS[i % 2][0])
        await timed("load", lambda: client.set(one("Button1", "Load example"), "value", True),
                    lambda c: tree_name in _trees(c))
        await timed("interaction", lambda: client.set(one("Button1", "Run"), "value", True),
                    lambda c: expected_leaf(3) in c.texts())
        await timed("interaction", lambda: client.set(one("EnterInput1", "w2 · t3"), "value",
                                                      str(10 + i)),
                    lambda c: expected_leaf(10 + i) in c.texts())
        out["isolation"].append((i, tree_name in _trees(client), int(other in _trees(client)),
                                 int(expected_leaf(10 + (i + 1) % n) in client.texts())))
        progress(f"client session {i} done")
    except Exception as e:
        out["failures"].append(f"client {i}: {type(e).__name__}: {str(e).splitlines()[0]}")
    await all_done.wait()
    out["final"].append((i, int(other in _trees(client)),
                         int(expected_leaf(10 + i) in client.texts())))
    await client.close()


async def drive(url: str, n: int, timeout_ms: int, pages: int) -> dict:
    from playwright.async_api import async_playwright

    _T0[0] = time.perf_counter()
    out: dict = {"first_paint": [], "ready": [], "load": [], "interaction": [],
                 "isolation": [], "final": [], "failures": []}
    pages = min(pages, n)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            opened = [await _open(browser, url, out, timeout_ms) for _ in range(pages)]
            all_done = asyncio.Barrier(n)
            started = asyncio.Barrier(n - pages + 1)
            clients = [asyncio.ensure_future(_client(url, i, n, out, timeout_ms / 1000,
                                                     started, all_done))
                       for i in range(pages, n)]
            await started.wait()  # every client session opened: all act at once
            progress(f"{n - pages} client sessions opened")
            await asyncio.gather(*(_session(page, i, n, out, all_done)
                                   for i, (_, page) in enumerate(opened)), *clients)
            for context, _ in opened:
                await context.close()
        finally:
            await browser.close()
    return out


def summary(name: str, values: list[float]) -> str:
    if not values:
        return f"{name:>14}: none"
    return (f"{name:>14}: median {statistics.median(values):5.2f} s, p95 "
            f"{np.percentile(values, 95):5.2f} s, max {max(values):5.2f} s (n={len(values)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=60, help="seconds per interaction")
    parser.add_argument("--pages", type=int, default=2, help="sessions that are chromium "
                        "pages; the others are Bokeh websocket clients (tests/ui/bokeh_client)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "server.log"
        with served_app(log_path, seconds=60) as url:  # a first page built: the app imported
            start = time.perf_counter()
            out = asyncio.run(drive(url, args.sessions, int(args.timeout * 1000), args.pages))
            total = time.perf_counter() - start
        errors = error_lines(log_path)
    print(f"\n{args.sessions} sessions against one server, {total:.0f} s in all")
    for key in ("first_paint", "ready", "load", "interaction"):
        print(summary({"interaction": "run / weight", "load": "load example",
                       "ready": "client ready"}.get(key, key), out[key]))
    bad = [f"session {i}: own tree shown {own}, other's tree {other}x, another's result "
           f"{theirs}x" for i, own, other, theirs in out["isolation"]
           if not own or other or theirs]
    bad += [f"session {i} at the end: other's tree {other}x, own result {own}x"
            for i, other, own in out["final"] if other or not own]
    print(f"isolation: {len(out['isolation'])} sessions checked, {len(bad)} problems")
    for line in bad + out["failures"]:
        print("  " + line)
    print(f"server log: {len(errors)} error lines")
    for line in errors[:20]:
        print("  " + line)
    p95 = np.percentile(out["interaction"], 95) if out["interaction"] else float("inf")
    ok = not bad and not out["failures"] and not errors and p95 < 2.0
    print("verdict:", "ok" if ok else "FAILED (target: no isolation problem, no timeout, "
          "run / weight p95 < 2 s, no server error)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
