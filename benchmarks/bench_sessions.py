"""Load: N concurrent browser sessions against one `panel serve inspector` process.

    .venv/bin/python benchmarks/bench_sessions.py [--sessions 20] [--timeout 60]

Serves the app with `panel serve inspector` on 127.0.0.1 (as `make serve` does, with its
`--unused-session-lifetime`), then drives Debian's chromium with Playwright, one context per
session: the sessions open the app one after another (first paint timed); then, all connected,
every session at once loads an example (even sessions S5, odd ones the 20k-leaf transformer),
runs S1's weighted sum, then changes a weight to a value no other session uses (the change
re-runs it), and checks that it
shows only its own trees and result; all stay open until the last is done and check again.
Every interaction is timed from the keypress or click to the answer drawn in the page.

Prints first paint, example load and run / weight-change latencies (median, p95, max), the
isolation verdicts and every error line of the server's log; exits 1 if a session saw another's
trees or result, an interaction timed out, the p95 of runs and weight changes is 2 s or more, or
the log has an error. Target (issue 11): 20 sessions, p95 < 2 s, no error.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from inspector import examples  # noqa: E402
from tests.serving import CHROMIUM, CHROMIUM_ARGS, free_port, stop, wait_for  # noqa: E402

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
        await page.get_by_role("combobox").first.click()
        await page.locator("li", has_text=LOADS[i % 2][0]).first.click()
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


async def drive(url: str, n: int, timeout_ms: int) -> dict:
    from playwright.async_api import async_playwright

    _T0[0] = time.perf_counter()
    out: dict = {"first_paint": [], "load": [], "interaction": [], "isolation": [],
                 "final": [], "failures": []}
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            opened = [await _open(browser, url, out, timeout_ms) for _ in range(n)]
            all_done = asyncio.Barrier(n)
            await asyncio.gather(*(_session(page, i, n, out, all_done)
                                   for i, (_, page) in enumerate(opened)))
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
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "server.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "panel", "serve", "inspector", "--address", "127.0.0.1",
                 "--port", str(port), "--allow-websocket-origin", f"127.0.0.1:{port}",
                 "--liveness", "--unused-session-lifetime", "120000"],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            try:
                wait_for(f"http://127.0.0.1:{port}/liveness", proc)
                start = time.perf_counter()
                out = asyncio.run(drive(f"http://127.0.0.1:{port}/inspector", args.sessions,
                                        int(args.timeout * 1000)))
                total = time.perf_counter() - start
            finally:
                stop(proc)
        errors = [line for line in log_path.read_text().splitlines()
                  if re.search(r"\b(ERROR|CRITICAL)\b|Traceback|Exception", line)]
    print(f"\n{args.sessions} sessions against one server, {total:.0f} s in all")
    for key in ("first_paint", "load", "interaction"):
        print(summary({"interaction": "run / weight", "load": "load example"}.get(key, key),
                      out[key]))
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
