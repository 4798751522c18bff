"""Time to first paint of the tree, and time to expand a node, for big trees in chromium.

    .venv/bin/python benchmarks/bench_ui.py [--leaves 10000 100000] [--repeats 5]

Serves two pages per tree on 127.0.0.1 (`pn.serve` in a child process, so the server does not
share a GIL with the test driver): `app`, the whole app as `pytree-inspector CKPT` serves it (a
`pmui.Page` with the built-in examples and the checkpoint, selected: what users get, and the
figure the README quotes), and `tree`, the tree view alone in a plain column (for the expand
figures, and to show what the page around the tree costs); then drives Debian's chromium with
Playwright, a fresh browser context per repeat. Trees are transformer-like checkpoints
(`inspector.examples.transformer_checkpoint`, 16 leaves per layer).

- first paint: milliseconds from navigation start until the tree's root item is visible;
- expand: from the click on a node's arrow until its first child is in the page and a frame
  has been drawn (measured inside the page: no test-driver polling in the figure), for
  `['layers']` (its ranges), a range of 100 layers, and one layer (4 children).

Targets (issue 3): first paint <= 1.5 s at 100k leaves, expand <= 0.15 s. Floors measured
on the 2-core dev machine: a bare Panel page with one Markdown pane paints in about 1.0 s, a
`pmui.Tree` with one item in about 1.25 s, the same inside a `pmui.Page` in about 1.8 s; and
`pmui.Tree` redraws every item it holds on each change (about 1.3 ms per item, 120 ms to add
100 children to an otherwise empty tree without any server round trip).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]

# Clicks an item's arrow, resolves when `target` is in the item's shadow root and a frame passed.
EXPAND_JS = """([arrow, target]) => new Promise(resolve => {
  const root = arrow.getRootNode();
  const t0 = performance.now();
  const found = () => [...root.querySelectorAll('li[role=treeitem]')]
    .some(el => el.id.endsWith('-' + target));
  const obs = new MutationObserver(() => {
    if (found()) { obs.disconnect(); requestAnimationFrame(() => resolve(performance.now() - t0)); }
  });
  obs.observe(root, {subtree: true, childList: true});
  arrow.click();
})"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _apps(loaded):
    from inspector.ui.app import create_app
    from inspector.ui.session.state import InspectorState
    from inspector.ui.tree_view import TreeView

    def new_state():
        state = InspectorState(background=True)
        state.add(loaded, select=True)
        return state

    def tree_page():
        # No pmui.Page (its own load costs about 0.5 s here) and no wrapping layout.
        return TreeView(new_state())

    def app_page():
        # What `pytree-inspector ckpt` serves: the whole page, the built-in examples loaded
        # too, the checkpoint selected.
        return create_app(trees=[loaded], root="")

    return {"tree": tree_page, "app": app_page}


def _node(page, node_id: str):
    return page.locator(f'li[role=treeitem][id$="-{node_id}"]').first


def _expand(page, node_id: str, child_id: str) -> float:
    arrow = _node(page, node_id).locator(":scope > div > div").first.element_handle()
    return page.evaluate(EXPAND_JS, [arrow, child_id])


def measure(browser, url: str, n_layers: int, expand: bool) -> dict:
    """One fresh session: first paint, then three expansions (ms)."""
    context = browser.new_context(viewport={"width": 1600, "height": 1000})
    page = context.new_page()
    page.goto(url)
    _node(page, "(root)").wait_for(timeout=60_000)
    out = {"first_paint": page.evaluate("performance.now()")}
    if expand:
        width = max(4, len(str(n_layers - 1)))
        if _node(page, "['layers'][100:200]").count() == 0:
            out["expand_layers"] = _expand(page, "['layers']", "['layers'][100:200]")
        out["expand_range"] = _expand(page, "['layers'][100:200]",
                                      f"['layers']['layer_{105:0{width}d}']")
        layer = f"['layers']['layer_{105:0{width}d}']"
        out["expand_layer"] = _expand(page, layer, f"{layer}['attn']")
    context.close()
    return out


def serve(n_layers: int, port: int) -> None:
    """The child process: builds the tree once, then serves both pages until killed."""
    import panel as pn

    from inspector import examples
    from inspector.ui.session.loaded import prepare

    start = time.perf_counter()
    loaded = prepare("ckpt", examples.transformer_checkpoint(n_layers=n_layers), "bench")
    print(f"{loaded.n_leaves:,} leaves built, packed and indexed in "
          f"{time.perf_counter() - start:.2f} s (once per server)", flush=True)
    pn.serve(_apps(loaded), address="127.0.0.1", port=port, show=False,
             websocket_origin=[f"127.0.0.1:{port}"], liveness=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the raw figures here")
    parser.add_argument("--serve", type=int, metavar="N_LAYERS", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return

    from playwright.sync_api import sync_playwright

    results = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for leaves in args.leaves:
            n_layers = max(1, leaves // 16)
            port = _free_port()
            server = subprocess.Popen([sys.executable, __file__, "--serve", str(n_layers),
                                       "--port", str(port)], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True)
            try:
                print(server.stdout.readline().strip())
                _wait_live(port)
                for app in ("app", "tree"):
                    url = f"http://127.0.0.1:{port}/{app}"
                    measure(browser, url, n_layers, expand=False)  # warm the browser cache
                    runs = [measure(browser, url, n_layers, expand=app == "tree")
                            for _ in range(args.repeats)]
                    results[f"{16 * n_layers + 4} leaves, {app}"] = runs
                    _report(f"{16 * n_layers + 4:,} leaves, {app} page", runs)
            finally:
                server.terminate()
                server.wait(10)
        browser.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def _wait_live(port: int, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/liveness", timeout=1).close()
            return
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def _report(title: str, runs: list[dict]) -> None:
    print(title)
    for key in runs[0]:
        values = [r[key] for r in runs if key in r]
        print(f"  {key:13s} median {statistics.median(values):7.0f} ms   "
              f"(min {min(values):.0f} – max {max(values):.0f}, n={len(values)})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
