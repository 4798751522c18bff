"""The app's *Align a onto b* on two 100,000-leaf checkpoints, in chromium.

    PYTHONPATH=. python benchmarks/bench_align_ui.py [--layers 11111]

Writes `bench_align.trees` (a torch-layout and a Flax-layout LLM, 9 leaves per layer) as two
safetensors files with tiny leaves, opens both with the launcher as a user does
(`python -m inspector TORCH FLAX --no-show --port P`), opens the Compare tab and clicks Align;
prints the seconds from the click to the table's first row on the page (Playwright polling),
beside `inspector.align` of the same two files timed in this process; then re-pairs the first
row by hand and times the click to the repainted table (the override, the 100,002 rows
rebuilt, one page sent and painted: the table's own cost).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_align import trees  # noqa: E402
from bench_ui import CHROMIUM_ARGS, _free_port, _wait_live  # noqa: E402


def _write(folder: Path, layers: int) -> tuple[Path, Path]:
    import inspector

    torch, flax = trees(layers, hidden=4, inter=8)
    real = lambda x: np.zeros(x.shape, x.dtype)  # noqa: E731
    nested: dict = {}
    for key, leaf in torch.items():  # safetensors keys join nested keys with '.'
        node = nested
        *parents, last = key.split(".")
        for k in parents:
            node = node.setdefault(k, {})
        node[last] = real(leaf)
    inspector.save(nested, folder / "torch.safetensors")
    inspector.save(jax.tree.map(real, flax), folder / "flax.safetensors")
    return folder / "torch.safetensors", folder / "flax.safetensors"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=11_111)
    parser.add_argument("--screenshot", help="save the page with its align table (a PNG)")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    import inspector

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        a, b = _write(Path(tmp), args.layers)
        src, dst = inspector.load(a), inspector.load(b)
        start = time.perf_counter()
        alignment = inspector.align(src, dst)
        print(f"inspector.align of the two files here: {time.perf_counter() - start:.2f} s "
              f"({len(alignment.pairs):,} pairs, {len(alignment.ambiguous)} ambiguous)")
        port = _free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "inspector", str(a), str(b), "--no-show", "--port",
             str(port)], cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            url = f"http://127.0.0.1:{port}/inspector"
            _wait_live(url, timeout=300)
            page = browser.new_page(viewport={"width": 1680, "height": 1000})
            page.set_default_timeout(300_000)
            page.goto(url, timeout=300_000)
            # Two checkpoints of different structure: the launcher opens on their comparison
            page.locator(".diff-summary").wait_for()
            button = page.get_by_role("button", name="Align torch.safetensors onto "
                                                     "flax.safetensors")
            button.wait_for()
            start = time.perf_counter()
            button.click()
            page.locator(".align-view .tabulator-row").first.wait_for()
            seconds = time.perf_counter() - start
            print(f"app: click on Align to the table's first row painted: {seconds:.2f} s")
            print(page.get_by_text("target leaves paired").first.inner_text())
            if args.screenshot:
                page.screenshot(path=args.screenshot, full_page=True)
            # A row re-paired by hand: the alignment changes, its 100,002 rows are rebuilt and
            # the page shown again (no align in this one: the table's own cost)
            rows = page.locator(".align-view .tabulator-row")
            rows.first.click()
            picker = page.get_by_role("combobox", name="Source leaf (type to search the "
                                                       "unused ones)")
            picker.click()
            picker.fill("lm_head")  # the first row: ['params']['lm_head']['kernel']
            page.get_by_role("option", name="['lm_head']['weight']").click()
            start = time.perf_counter()
            page.get_by_role("button", name="Use this source").click()
            rows.first.get_by_text("set by hand").wait_for(timeout=120_000)
            print(f"app: click on 'Use this source' to the table repainted: "
                  f"{time.perf_counter() - start:.2f} s")
        finally:
            browser.close()
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    main()
