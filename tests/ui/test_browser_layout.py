"""The page's layout in chromium: resizable columns, stacked columns in a narrow window, leaf
statistics inside their column, and a dark theme over every part of the page, app bar included.

Colours are measured as a person sees them: the median brightness of an element's screenshot
(its background dominates; text is a small share of the pixels).
"""

from __future__ import annotations

import contextlib
import io
import re
import time

import pytest
from PIL import Image
from playwright.sync_api import Error as PlaywrightError

from tests.serving import open_compare_tab

pytestmark = pytest.mark.browser

LONG_LEAF = "['layer1']['weights']"  # MLP params: float32[8,4], values like -0.0406312


def node(page, path: str):
    return page.locator(f'[role=treeitem][data-path="{path}"]').first


@contextlib.contextmanager
def opened(browser, url: str, width: int, height: int = 1050, scheme: str = "light"):
    context = browser.new_context(viewport={"width": width, "height": height},
                                  color_scheme=scheme)
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(url)
    page.get_by_role("treeitem").first.wait_for()
    try:
        yield page
    finally:
        context.close()


def select_long_leaf(page) -> None:
    """Shows the MLP params in the input tree and selects a float32[8,4] leaf."""
    page.get_by_text("params", exact=True).first.click()
    node(page, "['layer1']").wait_for()
    if node(page, LONG_LEAF).count() == 0:
        node(page, "['layer1']").locator(".wtree-toggle").click()
    node(page, LONG_LEAF).click()
    page.locator(".leaf-stats").first.wait_for()


def columns(page):
    """The three column panels of the Operations tab: input, operation, result."""
    return [page.locator(".split-panel").nth(i).bounding_box() for i in range(3)]


def settled_columns(page, side_by_side: bool) -> list[dict]:
    """The column boxes once the page has laid them out (side by side, or stacked): on a busy
    machine the first boxes can be those of a page still settling."""
    for _ in range(50):
        boxes = columns(page)
        pairs = zip(boxes[:-1], boxes[1:], strict=True)
        beside = all(a["x"] + a["width"] <= b["x"] for a, b in pairs)
        if beside == side_by_side:
            return boxes
        page.wait_for_timeout(200)
    raise AssertionError(f"the columns are not {'side by side' if side_by_side else 'stacked'}:"
                         f" {boxes}")


def steady(read, tries: int = 40):
    """`read()` once two reads 250 ms apart agree (a busy machine lays out late)."""
    last = read()
    for _ in range(tries):
        time.sleep(0.25)
        now = read()
        if now == last:
            return now
        last = now
    return last


def screenshot(element, tries: int = 5) -> bytes:
    """`element`'s screenshot. The result card's parts are updated again when a run's timed
    repeats land, a second after the run; an element replaced between Playwright finding it
    and taking the picture failed 2 of 3 runs on a busy machine ("Element is not attached to
    the DOM"), and the timing card's new table, not yet laid out, 1 of 3 here ("Node is
    either not visible"). The locator then finds the new element."""
    for _ in range(tries - 1):
        try:
            return element.screenshot()
        except PlaywrightError as error:
            if "not attached" not in str(error) and "not visible" not in str(error):
                raise
            time.sleep(0.25)
    return element.screenshot()


def brightness(element) -> float:
    """Median brightness (0 black .. 1 white) of what `element` shows on screen."""
    counts = Image.open(io.BytesIO(screenshot(element))).convert("L").histogram()
    half, seen = sum(counts) / 2, 0
    for level, count in enumerate(counts):
        seen += count
        if seen >= half:
            return level / 255
    raise AssertionError("an empty screenshot")


def brightnesses(parts: dict) -> dict[str, float]:
    """Each part's brightness, rounded; a part that cannot be pictured is named in the error."""
    shown = {}
    for name, element in parts.items():
        try:
            shown[name] = round(brightness(element), 2)
        except PlaywrightError as error:
            raise AssertionError(f"{name}: {error}") from error
    return shown


@pytest.mark.parametrize("width", [1280, 1680, 1920])
def test_leaf_stats_stay_inside_the_input_column(browser, served_url, width):
    with opened(browser, served_url, width) as page:
        select_long_leaf(page)
        values = page.locator(".leaf-stats .v")
        names = [values.nth(i).get_attribute("data-stat") for i in range(values.count())]
        assert names == ["array", "size", "min", "max", "mean", "std", "NaN", "Inf"]
        assert page.locator('.leaf-stats .v[data-stat="array"]').inner_text() == \
            "float32[8,4]"
        assert re.fullmatch(r"-?\d\.\d+(e-?\d+)?|-?0\.\d+",
                            page.locator('.leaf-stats .v[data-stat="min"]').inner_text())
        column = page.locator(".split-panel").first.bounding_box()
        assert column["x"] >= 0 and column["x"] + column["width"] <= width + 0.5
        for i in range(values.count()):
            box = values.nth(i).bounding_box()
            assert box is not None and box["width"] > 0, names[i]
            assert column["x"] <= box["x"], names[i]
            assert box["x"] + box["width"] <= column["x"] + column["width"], names[i]
        # nothing is wider than the window: no column, no stat runs off the page
        assert page.evaluate("document.documentElement.scrollWidth") <= width


def test_dragging_the_gutter_widens_the_input_tree(browser, served_url):
    with opened(browser, served_url, 1680) as page:
        tree = page.locator("[role=tree]").first
        # the operation and result cards join after the first paint; drag once they are in
        page.get_by_role("button", name="Run the current operation.").wait_for()
        settled_columns(page, side_by_side=True)
        before = steady(lambda: columns(page))  # the splitter sizes its panels after layout
        tree_before = tree.bounding_box()
        gutter = page.locator(".gutter-horizontal").first.bounding_box()
        x, y = gutter["x"] + gutter["width"] / 2, gutter["y"] + 40
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x + 100, y, steps=5)
        page.mouse.move(x + 200, y, steps=5)
        page.mouse.up()
        after = steady(lambda: columns(page))  # the drag's sizes land on the next frames
        tree_after = steady(tree.bounding_box)
        assert after[0]["width"] == pytest.approx(before[0]["width"] + 200, abs=12)
        assert after[1]["width"] == pytest.approx(before[1]["width"] - 200, abs=12)
        assert after[2]["width"] == pytest.approx(before[2]["width"], abs=2)
        assert tree_after["width"] == pytest.approx(tree_before["width"] + 200, abs=12)
        # the drag holds when the page changes: a run fills the result card
        page.get_by_role("button", name="Run the current operation.").click()
        page.locator(".timing-card").wait_for()
        assert steady(lambda: columns(page))[0]["width"] == pytest.approx(after[0]["width"],
                                                                          abs=2)


def test_dragging_the_compare_gutter_widens_the_selected_node_and_holds(browser, served_url):
    with opened(browser, served_url, 1680) as page:
        open_compare_tab(page)
        split = page.locator(".split").filter(has=page.get_by_text("Selected", exact=True))
        panels = split.locator(".split-panel")

        def boxes():
            return [panels.nth(i).bounding_box() for i in range(2)]

        before = steady(boxes)
        tree, details = before
        assert tree["x"] + tree["width"] <= details["x"]  # side by side, the tree the wider
        assert tree["width"] > 2 * details["width"]
        gutter = split.locator(".gutter-horizontal").first.bounding_box()
        x, y = gutter["x"] + gutter["width"] / 2, gutter["y"] + gutter["height"] / 2
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x - 150, y, steps=5)
        page.mouse.move(x - 300, y, steps=5)
        page.mouse.up()
        after = steady(boxes)
        assert after[0]["width"] == pytest.approx(before[0]["width"] - 300, abs=12)
        assert after[1]["width"] == pytest.approx(before[1]["width"] + 300, abs=12)
        # the drag holds when the page changes: a selected node fills the right column, the
        # value table joins below
        split.locator('[role=treeitem][data-path="[0]"]').first.click()
        panels.nth(1).get_by_text("[0]", exact=True).wait_for()  # the node, both sides
        page.get_by_text("Compare all values").click()
        page.locator(".tabulator").first.wait_for()
        held = steady(boxes)
        assert held[0]["width"] == pytest.approx(after[0]["width"], abs=2)
        assert held[1]["width"] == pytest.approx(after[1]["width"], abs=2)


def test_a_narrow_window_puts_the_result_below_the_input(browser, served_url):
    with opened(browser, served_url, 900) as page:
        page.get_by_role("button", name="Run the current operation.").click()
        page.locator(".timing-card").wait_for()
        input_, operation, result = settled_columns(page, side_by_side=False)
        assert operation["y"] >= input_["y"] + input_["height"] - 1
        assert result["y"] >= operation["y"] + operation["height"] - 1
        assert input_["width"] == pytest.approx(result["width"], abs=2)
        area = page.locator(".split").first.bounding_box()  # the main area, beside the sidebar
        assert input_["width"] == pytest.approx(area["width"], abs=2)
        assert page.locator(".gutter-horizontal").first.is_hidden()
        assert page.evaluate("document.documentElement.scrollWidth") <= 900


def _parts(page) -> dict:
    """Every kind of part the page shows, once a leaf is selected, an op has run, and a search
    shows the leaf table (in place of the input tree: the tree measured is the result's)."""
    select_long_leaf(page)
    panels = page.locator(".split-panel")
    histogram = panels.first.locator("canvas").first
    histogram.wait_for()
    page.get_by_role("button", name="Run the current operation.").click()
    page.locator(".timing-card").wait_for()
    search = panels.first.get_by_label("Search leaves by key path")
    search.fill("weights")
    table = panels.first.locator(".tabulator").first
    table.get_by_text(LONG_LEAF).first.wait_for()
    return {
        "tree": panels.nth(2).locator("[role=tree]").first,
        "leaf table": table,
        "histogram": histogram,
        "operation form": panels.nth(1),
        "timing": page.locator(".timing-card").first,
        "code": panels.nth(2).locator("textarea").first,
        "history table": panels.nth(2).locator(".run-history").last,
        "sidebar": page.get_by_text("Loaded trees", exact=True).locator(".."),
    }


def test_a_search_shows_the_leaf_table_in_place_of_the_tree(browser, served_url):
    with opened(browser, served_url, 1680) as page:
        page.get_by_text("params", exact=True).first.click()  # the MLP params
        node(page, "['layer1']").wait_for()
        panel = page.locator(".split-panel").first
        tree, table = panel.locator("[role=tree]").first, panel.locator(".tabulator").first
        search = panel.get_by_label("Search leaves by key path")
        search.fill("weights")
        table.get_by_text(LONG_LEAF).first.wait_for()
        tree.wait_for(state="hidden")  # it stayed under the table (a `display` rule of ours)
        search.fill("")
        tree.wait_for()
        table.wait_for(state="hidden")
        assert node(page, "['layer1']").is_visible()


def app_bar_colour(page) -> tuple[int, ...]:
    """The page's app bar background colour as computed by chromium, (r, g, b)."""
    text = page.locator("header.MuiAppBar-root").first.evaluate(
        "h => getComputedStyle(h).backgroundColor")
    return tuple(int(v) for v in re.findall(r"\d+", text)[:3])


def assert_dark_app_bar(page) -> None:
    """The app bar is dark grey (Material's dark paper), not a blue of the light palette."""
    bar = page.locator("header.MuiAppBar-root").first
    colour = steady(lambda: app_bar_colour(page))
    assert max(colour) < 64 and max(colour) - min(colour) < 16, colour
    assert brightness(bar) < 0.25  # as seen, with Material's elevation tint and the title


def test_dark_theme_follows_the_browser_and_covers_every_part(browser, served_url):
    with opened(browser, served_url, 1680, scheme="dark") as page:
        parts = _parts(page)
        page.mouse.move(0, 1049)
        shown = brightnesses(parts)
        assert all(b < 0.25 for b in shown.values()), shown
        assert_dark_app_bar(page)


def test_light_theme_by_default_and_the_toggle_turns_it_dark(browser, served_url):
    with opened(browser, served_url, 1680, scheme="light") as page:
        parts = _parts(page)
        page.mouse.move(0, 1049)
        shown = brightnesses(parts)
        assert all(b > 0.75 for b in shown.values()), shown
        assert app_bar_colour(page) == (0, 114, 181)  # the light page keeps its blue bar
        page.get_by_role("button", name="Toggle theme").click()
        deadline = time.monotonic() + 10  # each part re-themes on its own: 0.5 s was too
        while True:  # short once under a full CI run's load (the result tree still white)
            page.wait_for_timeout(250)
            shown = brightnesses(parts)
            if all(b < 0.25 for b in shown.values()) or time.monotonic() > deadline:
                break
        assert all(b < 0.25 for b in shown.values()), shown
        assert_dark_app_bar(page)
