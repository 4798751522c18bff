"""Takes the README's pictures of the served app: the S1 example, a weighted-sum result, and the
stats of one selected leaf, in the light and the dark theme.

    .venv/bin/python assets/take_screenshot.py                  # assets/app.png, app-dark.png
    .venv/bin/python assets/take_screenshot.py --widths 900 1280 1680 1920 --themes light dark \
        --out-dir /tmp/shots                                    # every width and theme

Serves the real app (`panel serve inspector`) on a free port of 127.0.0.1 and drives Debian's
chromium with Playwright (never a downloaded browser). The dark pictures are taken with the
browser preferring a dark colour scheme, which the page follows.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
README_SHOTS = {("light", 1680): "app.png", ("dark", 1680): "app-dark.png"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served_app(port: int):
    """Runs `panel serve inspector` from the repo root until the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "panel", "serve", "inspector", "--address", "127.0.0.1",
         "--port", str(port), "--allow-websocket-origin", f"127.0.0.1:{port}", "--liveness"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/liveness", timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    proc.kill()
                    raise RuntimeError(proc.communicate()[0]) from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/inspector"
    finally:
        proc.terminate()
        proc.wait(10)


def shoot(browser, url: str, out: Path, width: int, height: int, theme: str) -> None:
    """One picture: run the weighted sum, select the leaf `[0][0]` of the input tree."""
    context = browser.new_context(viewport={"width": width, "height": height},
                                  color_scheme="dark" if theme == "dark" else "light")
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(url)
    page.get_by_role("treeitem").first.wait_for()
    page.get_by_role("button", name="Run the current operation.").click()
    page.locator(".timing-card").wait_for()
    page.get_by_role("treeitem", name=re.compile(r"^weighted_sum")).first.wait_for()
    page.locator('[role=treeitem][data-path="[0][0]"]').first.click()
    page.locator(".leaf-stats").first.wait_for()
    page.mouse.move(0, height - 1)  # no tooltip in the picture
    page.wait_for_timeout(1000)
    page.screenshot(path=str(out))
    context.close()
    print(f"wrote {out}")


def main() -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=str(ROOT / "assets"))
    parser.add_argument("--widths", type=int, nargs="+", default=[1680])
    parser.add_argument("--themes", nargs="+", choices=["light", "dark"],
                        default=["light", "dark"])
    parser.add_argument("--height", type=int, default=1050)
    args = parser.parse_args()
    out_dir = Path(args.out_dir)
    with served_app(free_port()) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for theme in args.themes:
            for width in args.widths:
                name = README_SHOTS.get((theme, width), f"app-{theme}-{width}.png")
                shoot(browser, url, out_dir / name, width, args.height, theme)
        browser.close()


if __name__ == "__main__":
    main()
