"""End-to-end: a checkpoint with a planted NaN scanned, "next NaN" finding it, and a timeline
of four checkpoints with its heatmap and frozen leaf, a cell of which is clicked, in chromium."""

from __future__ import annotations

import os

import numpy as np
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


# The screen position of a heatmap cell (row, step), from the figure's own scales: Bokeh's
# views are walked from the page's roots to the shown one whose ranges hold both factors.
_CELL = """([row, step]) => {
    const queue = [...Bokeh.index], seen = new Set();
    while (queue.length) {
        const v = queue.shift();
        if (seen.has(v)) continue;
        seen.add(v);
        const m = v.model;
        if (v.frame != null && m.x_range?.factors?.includes(step)
                && m.y_range?.factors?.includes(row)) {
            const box = v.canvas_view.el.getBoundingClientRect();
            if (box.width === 0) continue;  // a view of a tab not shown
            return [box.left + v.frame.x_scale.compute(m.x_range.synthetic(step)),
                    box.top + v.frame.y_scale.compute(m.y_range.synthetic(row))];
        }
        queue.push(...v.children());
    }
    return null;
}"""


def test_a_heatmap_cell_click_compares_its_two_steps(browser, launched):
    """A click on a heatmap cell (a leaf that moves, at step 3) opens the comparison of steps
    2 and 3 with that leaf selected and its figures shown, as NumPy computes them."""
    run = planted_run()
    moving = "['enc']['moving']"
    a, b = (run[k]["enc"]["moving"].astype(np.float64) for k in (1, 2))
    want = f"max |a − b| = {np.abs(b - a).max():.6g}"
    with session(browser, launched) as page:
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.get_by_role("treeitem").first.wait_for()
        open_tab(page, "Timeline")
        page.get_by_label("… or a folder of checkpoints").fill(".")
        page.locator("button", has_text="Build the timeline").click()
        page.locator(".frozen-leaves").wait_for(timeout=60_000)
        page.wait_for_function(f"() => ({_CELL})({[moving, '3']!r}) !== null")
        where, x, y = None, 0, 0
        while where != (x, y):  # until the heatmap's layout settles
            where = (x, y)
            page.wait_for_timeout(300)
            x, y = page.evaluate(_CELL, [moving, "3"])
        page.mouse.click(x, y)  # a real click, through Bokeh's TapTool
        page.locator(f'[role=treeitem][data-path="{moving}"][aria-selected=true]').wait_for(
            timeout=30_000)
        page.get_by_text("step 2 vs step 3").wait_for()  # the comparison's root
        value = page.locator(".diff-value")
        value.wait_for(timeout=30_000)
        assert want in value.inner_text()
        if SHOTS:
            page.screenshot(path=os.path.join(SHOTS, "timeline_pick.png"))
        # Back to the heatmap, and round the tabs: panel-material-ui re-mounts a tab's Bokeh
        # plots, whose layout used to throw and blank the page (`ui/plot_guard.py`)
        for name in ("Timeline", "Health", "Compare trees", "Timeline"):
            page.get_by_role("tab", name=name, exact=True).click()
            page.wait_for_timeout(500)
        page.locator(".frozen-leaves").wait_for()
        page.wait_for_function(f"() => ({_CELL})({[moving, '3']!r}) !== null")
        assert errors == []
