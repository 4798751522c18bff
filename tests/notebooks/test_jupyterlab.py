"""End-to-end: the S1 notebook in a real JupyterLab, run in headless chromium, the widget used."""

from __future__ import annotations

import re
import time

import pytest

from tests.serving import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.browser


def test_the_widget_runs_live_in_jupyterlab(jupyterlab):
    from playwright.sync_api import sync_playwright

    start = time.perf_counter()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1600, "height": 1000})
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=jupyterlab)
        page = context.new_page()
        page.set_default_timeout(30_000)
        external: list[str] = []
        page.on("request", lambda r: external.append(r.url) if not r.url.startswith(
            (jupyterlab, "ws://127.0.0.1", "blob:", "data:")) else None)
        try:
            page.goto(f"{jupyterlab}/lab/tree/s1.ipynb")
            page.locator("#jp-main-statusbar").get_by_text("Idle").wait_for(timeout=60_000)
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.locator('li[data-command="runmenu:run-all"]').click()

            # The input tree, and the S1 result that the notebook ran before showing it.
            page.get_by_role("treeitem", name=re.compile(r"^t1")).first.wait_for(timeout=90_000)
            page.get_by_role("treeitem", name=re.compile(r"^weighted_sum\(t1, t2, t3\)")).first \
                .wait_for()
            # The windowed tree draws each node as its own row: the result's first leaf.
            page.locator("[role=treeitem]", has_text="= [[26, 11], [21, 24]]").first.wait_for()
            assert "compile" in page.locator(".timing-card").inner_text()

            # A new weight re-runs the compiled sum inside the output.
            weight = page.get_by_label("w2 · t3")
            weight.click()
            weight.press("Control+A")
            weight.type("4")
            weight.press("Enter")
            page.get_by_text("= [[33, 12], [25, 28]]").wait_for()
            assert "cached, no compile" in page.locator(".timing-card").inner_text()
            # The status line clears, and no view shows escaped HTML (the page used to send a
            # pane's earlier text back: inspector.ui.notebook, "Echoes").
            page.get_by_text("Running weighted_sum").wait_for(state="detached")
            assert page.get_by_text(re.compile("&lt;|&amp;")).count() == 0

            # Copy as code: the call that gives this result, with the notebook's names.
            page.get_by_role("button", name="Copy the last run as Python code").click()
            copied = page.evaluate("navigator.clipboard.readText()")
            assert "result = inspector.weighted_sum([t1, t2, t3], [1, 2, 4])" in copied
        finally:
            context.close()
            browser.close()
    assert external == []
    assert time.perf_counter() - start < 60
