"""Takes assets/notebook.png: `inspector.show(...)` live in a JupyterLab notebook (the S1 example).

    .venv/bin/python assets/take_notebook_screenshot.py [--out assets/notebook.png]

Starts JupyterLab on a free port of 127.0.0.1 (no token, nothing fetched from the network) on a
temporary copy of examples/s1_model_averaging.ipynb, runs it in Debian's chromium with
Playwright (never a downloaded browser), moves a weight in the widget and takes the picture.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "s1_model_averaging.ipynb"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(root: Path, port: int):
    """Runs JupyterLab on `root` until the block ends; yields its base URL."""
    settings = root / ".lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={port}", "--no-browser",
         "--ServerApp.open_browser=False", f"--ServerApp.root_dir={root}",
         "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.allow_root=True",
         "--LabApp.news_url=None", "--LabApp.extension_manager=readonly",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         f"--LabApp.user_settings_dir={root / '.lab-settings'}",
         f"--LabApp.workspaces_dir={root / '.lab-workspaces'}"],
        cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"JupyterLab did not start ({proc.poll()})") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "assets" / "notebook.png"))
    parser.add_argument("--width", type=int, default=1500)
    parser.add_argument("--height", type=int, default=1580)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copy(NOTEBOOK, root / "s1_model_averaging.ipynb")
        with jupyterlab(root, free_port()) as url, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.set_default_timeout(60_000)
            page.goto(f"{url}/lab/tree/s1_model_averaging.ipynb")
            page.locator("#jp-main-statusbar").get_by_text("Idle").wait_for()
            page.locator(".jp-Notebook").click()
            page.keyboard.press("Escape")
            page.keyboard.press("Control+b")  # hide the file browser: the cell gets the width
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.locator('li[data-command="runmenu:run-all"]').click()
            page.get_by_role("treeitem").first.wait_for(timeout=120_000)
            page.locator(".timing-card").wait_for()
            weight = page.get_by_label("w2 · t3")  # a new weight: re-run from the compiled kernel
            weight.click()
            weight.press("Control+A")
            weight.type("4")
            weight.press("Enter")
            page.get_by_text("= [[33, 12], [25, 28]]").wait_for()
            page.wait_for_timeout(1500)
            cell = page.locator(".jp-CodeCell").last
            cell.scroll_into_view_if_needed()
            cell.evaluate("c => c.scrollIntoView({block: 'start'})")
            page.mouse.move(args.width - 1, args.height - 1)  # no tooltip in the picture
            page.wait_for_timeout(800)
            page.screenshot(path=args.out)
            browser.close()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
