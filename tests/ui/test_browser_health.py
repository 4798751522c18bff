"""End-to-end: a checkpoint with a planted NaN scanned, "next NaN" finding it, and a timeline
of four checkpoints with its heatmap and frozen leaf, in chromium."""

from __future__ import annotations

import os

import pytest

import inspector
from tests.core.health_runs import FROZEN, NAN_LEAF, planted_run
from tests.serving import launched_app, open_tab, session

pytestmark = pytest.mark.browser
SHOTS = os.environ.get("INSPECTOR_SCREENSHOTS", "")  # a folder: save screenshots there


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Four numbered checkpoints; the launcher opens step 4 (it holds a NaN) first."""
    folder = tmp_path_factory.mktemp("run")
    for step, tree in enumerate(planted_run()[:4], start=1):
        inspector.save(tree, folder / f"ckpt_{step}.safetensors")
    with launched_app(folder, "ckpt_4.safetensors", "ckpt_1.safetensors") as url:
        yield url


def test_next_nan_and_the_timeline(browser, launched):
    with session(browser, launched) as page:
        page.get_by_role("treeitem").first.wait_for()
        open_tab(page, "Health")
        page.locator("button", has_text="Scan the tree").click(timeout=60_000)
        page.locator(".health-summary").wait_for(timeout=60_000)
        assert "1 hold non-finite values (1 NaN, 0 +Inf, 0 −Inf)" in \
            page.locator(".health-summary").inner_text()
        page.locator("button", has_text="Next NaN").click()
        row = page.locator(f'[role=treeitem][data-path="{NAN_LEAF}"][aria-selected=true]')
        row.wait_for()
        assert row.locator(".wtree-heat").count() == 1
        if SHOTS:
            page.screenshot(path=os.path.join(SHOTS, "health.png"))
        page.get_by_role("tab", name="Timeline", exact=True).click()
        page.get_by_label("… or a folder of checkpoints").fill(".")
        page.locator("button", has_text="Build the timeline").click()
        frozen = page.locator(".frozen-leaves")
        frozen.wait_for(timeout=60_000)
        assert FROZEN in frozen.inner_text()
        assert page.locator(".bk-Canvas, canvas").count() >= 1  # the Bokeh heatmap
        assert f"{NAN_LEAF}: step 3" in page.locator(".first-nonfinite").inner_text()
        if SHOTS:
            page.screenshot(path=os.path.join(SHOTS, "timeline.png"))
