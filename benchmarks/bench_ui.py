"""First paint, expand time and page memory of the full app on a 100k-leaf checkpoint.

    .venv/bin/python benchmarks/bench_ui.py [--leaves 10000 100000] [--repeats 5]

For each size, writes a transformer-like checkpoint (`inspector.examples.transformer_checkpoint`,
16 leaves per layer) as a safetensors file, opens it with the launcher exactly as a user does
(`python -m inspector CKPT --no-show --port P`: the whole `pmui.Page`, the built-in examples
loaded, the checkpoint selected) and drives Debian's chromium with Playwright, a fresh browser
context per repeat:

- first_paint: ms from navigation start until the tree has drawn its first rows and a frame
  has passed (the tree's `inspector:tree-rows` User Timing mark, timed in the page);
- first_paint_polled: the same moment as Playwright sees it (the root row found by polling,
  then `performance.now()` read back: later by the polling interval and by whatever work
  the page's main thread is doing when asked, e.g. drawing the cards that follow);
- expand_*: from the click on a row's arrow (or the ArrowRight keypress on the focused row)
  until the first child row is in the DOM and a frame has been drawn, measured inside the page:
  `['layers']` (one folded row of its identical layers), the fold (its ranges: the first open
  compares the layers' structures), a range of 100 layers (100 children; by click and by key),
  and one layer (4 children);
- heap_mb: the page's JS heap after those steps (Chrome's `Performance.getMetrics`).

Targets (issue 12): first paint <= 1.5 s at 100k leaves, expanding 100 children <= 150 ms
median, page memory <= 300 MB. Rows are `[role=treeitem][data-path=KEYPATH]`.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]

# Clicks an element (or presses ArrowRight on it); resolves when a row with data-path `target`
# is in the same shadow root and a frame has passed.
EXPAND_JS = """([el, target, key]) => new Promise(resolve => {
  const root = el.getRootNode();
  const found = () => root.querySelector(`[role=treeitem][data-path="${CSS.escape(target)}"]`);
  const t0 = performance.now();
  const obs = new MutationObserver(() => {
    if (found()) { obs.disconnect(); requestAnimationFrame(() => resolve(performance.now() - t0)); }
  });
  obs.observe(root, {subtree: true, childList: true});
  setTimeout(() => { obs.disconnect(); resolve(NaN); }, 60000);  // never hang: NaN = missed
  if (key) el.dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowRight", bubbles: true}));
  else el.click();
})"""


# When the first tree drew its first rows, a frame later: the tree's own User Timing mark.
FIRST_ROWS_JS = """() => {
  const marks = performance.getEntriesByName("inspector:tree-rows")
  return marks.length ? marks[0].startTime : null
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _row(page, path: str):
    return page.locator(f'[role=treeitem][data-path="{path}"]').first


def _expand(page, path: str, child: str) -> float:
    arrow = _row(page, path).locator(".wtree-toggle").element_handle()
    return page.evaluate(EXPAND_JS, [arrow, child, False])


def _expand_by_key(page, path: str, child: str) -> float:
    row = _row(page, path)
    row.click()  # focuses the row (and selects it)
    tree = row.element_handle().evaluate_handle("el => el.closest('[role=tree]')")
    return page.evaluate(EXPAND_JS, [tree, child, True])


def measure(browser, url: str, n_layers: int, expand: bool) -> dict:
    """One fresh session: first paint, then the expansions (ms) and the page's heap (MB)."""
    context = browser.new_context(viewport={"width": 1680, "height": 1000})
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    page.goto(url, wait_until="commit", timeout=120_000)  # first paint is timed in the page
    _row(page, "").wait_for(timeout=120_000)  # the root row: data-path "" (its keystr)
    polled = page.evaluate("performance.now()")
    mark = page.wait_for_function(FIRST_ROWS_JS, timeout=120_000).json_value()
    out = {"first_paint": mark, "first_paint_polled": polled}
    if expand:
        width = max(4, len(str(n_layers - 1)))
        layer = f"['layers']['layer_{105:0{width}d}']"
        fold = f"['layers'][0\u2026{n_layers - 1}]"  # the layers, folded into one row
        out["expand_layers"] = _expand(page, "['layers']", fold)
        out["expand_fold"] = _expand(page, fold, "['layers'][100:200]")
        out["expand_100_click"] = _expand(page, "['layers'][100:200]", layer)
        out["expand_layer"] = _expand(page, layer, f"{layer}['attn']")
        # Another range (in view), never opened: its children come from the server as by click.
        out["expand_100_key"] = _expand_by_key(page, "['layers'][0:100]",
                                               f"['layers']['layer_{5:0{width}d}']")
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    out["heap_mb"] = metrics["JSHeapUsedSize"] / 2**20
    context.close()
    return out


def _checkpoint(n_layers: int, folder: Path) -> Path:
    import inspector
    from inspector import examples

    path = folder / f"transformer_{n_layers}.safetensors"
    inspector.save(examples.transformer_checkpoint(n_layers=n_layers), path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the raw figures here")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    results = {}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for leaves in args.leaves:
            n_layers = max(1, leaves // 16)
            ckpt = _checkpoint(n_layers, Path(tmp))
            port = _free_port()
            server = subprocess.Popen(
                [sys.executable, "-m", "inspector", str(ckpt), "--no-show", "--port", str(port)],
                cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            try:
                print(server.stdout.readline().strip())
                url = f"http://127.0.0.1:{port}/inspector"
                _wait_live(url)
                measure(browser, url, n_layers, expand=False)  # warm the browser cache
                runs = [measure(browser, url, n_layers, expand=True)
                        for _ in range(args.repeats)]
                title = f"{16 * n_layers:,} leaves ({ckpt.name}), full app page"
                results[title] = runs
                _report(title, runs)
            finally:
                server.terminate()
                server.wait(10)
        browser.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def _wait_live(url: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=30).close()
            return
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def _report(title: str, runs: list[dict]) -> None:
    print(title)
    for key in runs[0]:
        values = [r[key] for r in runs if key in r and r[key] == r[key]]  # NaN: timed out
        unit = "MB" if key.endswith("_mb") else "ms"
        print(f"  {key:17s} median {statistics.median(values):7.0f} {unit}   "
              f"(min {min(values):.0f} – max {max(values):.0f}, n={len(values)})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
