"""Fixtures for the UI tests: session states, and (marker `browser`) the served app in chromium."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serving import (
    CHROMIUM,
    CHROMIUM_ARGS,
    free_port,
    require_chromium,
    stop,
    wait_for,
)
from tests.serving import session as browser_session

ROOT = Path(__file__).resolve().parents[2]

def pytest_collection_modifyitems(config, items):
    # Browser tests last: Playwright's sync API keeps an asyncio loop running in the main
    # thread while the session-scoped browser lives, which later asyncio code would trip on.
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture
def state():
    """A session state with the default examples, running work synchronously."""
    from inspector.ui.session.state import InspectorState

    s = InspectorState()
    s.load_defaults()
    return s


@pytest.fixture
def session(tmp_path):
    """A session whose file picker may open `tmp_path`, with one tree (`kept`) already loaded."""
    import numpy as np

    from inspector.ui.session.state import InspectorState

    s = InspectorState(file_root=str(tmp_path))
    s.add_tree("kept", {"w": np.ones(2, np.float32)})
    return s


# Browser ------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def served_url():
    """`panel serve inspector` from the repo root on a free port of 127.0.0.1."""
    port = free_port()
    log = open(os.devnull, "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "panel", "serve", "inspector", "--address", "127.0.0.1",
         "--port", str(port), "--allow-websocket-origin", f"127.0.0.1:{port}", "--liveness"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(f"http://127.0.0.1:{port}/liveness", proc)
        yield f"http://127.0.0.1:{port}/inspector"
    finally:
        stop(proc)
        log.close()


@pytest.fixture(scope="session")
def browser():
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, served_url):
    """A fresh browser session on the app (its own InspectorState), defaults loaded."""
    with browser_session(browser, served_url) as p:
        p.get_by_role("treeitem").first.wait_for()
        yield p
