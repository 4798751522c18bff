"""Fixtures for the UI tests: session states, and (marker `browser`) the served app in chromium."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]

def pytest_collection_modifyitems(config, items):
    # Browser tests last: Playwright's sync API keeps an asyncio loop running in the main
    # thread while the session-scoped browser lives, which later asyncio code would trip on.
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture
def state():
    """A session state with the default examples, running work synchronously."""
    from inspector.ui.state import InspectorState

    s = InspectorState()
    s.load_defaults()
    return s


# Browser ------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def served_url():
    """`panel serve inspector` from the repo root on a free port of 127.0.0.1."""
    port = _free_port()
    log = open(os.devnull, "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "panel", "serve", "inspector", "--address", "127.0.0.1",
         "--port", str(port), "--allow-websocket-origin", f"127.0.0.1:{port}", "--liveness"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/liveness", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"panel serve did not start (exit code {proc.poll()})")
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/inspector"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, served_url):
    """A fresh browser session on the app (its own InspectorState), defaults loaded."""
    context = browser.new_context(viewport={"width": 1680, "height": 1050})
    p = context.new_page()
    p.set_default_timeout(15_000)
    p.goto(served_url)
    p.get_by_role("treeitem").first.wait_for()
    yield p
    context.close()
