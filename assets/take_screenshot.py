"""Takes assets/app.png: the served app with the S1 example and a weighted-sum result.

    .venv/bin/python assets/take_screenshot.py [--out assets/app.png] [--width 1680 --height 1050]

Serves the real app (`panel serve inspector`) on a free port of 127.0.0.1 and drives Debian's
chromium with Playwright (never a downloaded browser).
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


def main() -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "assets" / "app.png"))
    parser.add_argument("--width", type=int, default=1680)
    parser.add_argument("--height", type=int, default=1050)
    args = parser.parse_args()
    with served_app(free_port()) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        page.goto(url)
        page.get_by_role("treeitem").first.wait_for(timeout=30_000)
        page.get_by_role("button", name="Run the current operation.").click()
        page.locator(".timing-card").wait_for(timeout=30_000)
        page.get_by_role("treeitem", name=re.compile(r"^weighted_sum")).first.wait_for()
        page.mouse.move(0, args.height - 1)  # no tooltip in the picture
        page.wait_for_timeout(800)
        page.screenshot(path=args.out)
        browser.close()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
