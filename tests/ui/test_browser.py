"""End-to-end: the real `panel serve inspector` in headless chromium, clicked through."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.serving import open_tab

pytestmark = pytest.mark.browser


def node(page, node_id: str):
    """The tree row whose key path is `node_id` (the ARIA tree contract: `data-path`)."""
    return page.locator(f'[role=treeitem][data-path="{node_id}"]').first


def toggle(page, node_id: str) -> None:
    """Clicks a tree item's expand arrow."""
    node(page, node_id).locator(".wtree-toggle").click()


def selected(page, node_id: str):
    """The tree row of `node_id` once it is the selected one (`aria-selected=true`)."""
    return page.locator(f'[role=treeitem][data-path="{node_id}"][aria-selected=true]').first


def run(page) -> None:
    page.get_by_role("button", name="Run the current operation.").click()


def test_page_loads_with_the_examples_and_no_external_request(browser, served_url):
    context = browser.new_context()
    page = context.new_page()
    urls: list[str] = []
    page.on("request", lambda r: urls.append(r.url))
    page.goto(served_url)
    page.get_by_role("treeitem", name=re.compile(r"^t1")).first.wait_for(timeout=15_000)
    page.wait_for_load_state("networkidle")
    external = [u for u in urls if not u.startswith(("http://127.0.0.1", "ws://127.0.0.1",
                                                     "blob:", "data:"))]
    assert external == []
    assert page.title() == "pytree inspector"
    assert "[0]\u2003int32[2,2]\u200316 B" in node(page, "[0][0]").inner_text()
    context.close()


def test_loading_an_example_and_expanding_nodes(page):
    # the examples' field by what it shows: the sidebar's fields join after the first paint,
    # in no fixed order, so the first combobox may be another (the device)
    page.get_by_role("combobox").filter(has_text="S1: weighted sum").click()
    page.locator("li", has_text="Transformer: 20k-leaf checkpoint").first.click()
    page.get_by_role("button", name="Load the trees of `example`.").click()
    toggle(page, "['layers']")
    fold = node(page, "['layers'][0\u20261249]")  # 1,250 layers of one structure: one row
    fold.wait_for()
    assert "\u00d71,250" in fold.inner_text() and "dict of 4" in fold.inner_text()
    toggle(page, "['layers'][0\u20261249]")
    rng = node(page, "['layers'][100:200]")
    rng.wait_for()
    assert "[100–199]" in rng.inner_text() and "1,600 leaves" in rng.inner_text()
    assert node(page, "['layers']['layer_0105']").count() == 0  # not sent before expanding
    toggle(page, "['layers'][100:200]")
    node(page, "['layers']['layer_0105']").wait_for()
    toggle(page, "['layers']['layer_0105']")
    attn = node(page, "['layers']['layer_0105']['attn']")
    attn.wait_for()
    assert "dict of 4" in attn.inner_text()


def test_weighted_sum_result_and_timing(page):
    run(page)
    card = page.locator(".timing-card")
    card.wait_for()
    result = page.get_by_role("treeitem", name=re.compile(r"^weighted_sum\(t1, t2, t3\)"))
    result.first.wait_for()
    tree = page.locator("[role=tree]", has=result)  # the result's tree: its rows are flat
    assert "= [[26, 11], [21, 24]]" in tree.inner_text()
    assert "= [33, 18]" in tree.inner_text()
    # The result shows after one execution; its timed repeats follow (served: after a second
    # without a newer run) and the card then shows their median.
    expect(card).to_contain_text("run (median of 5)", timeout=60_000)
    text = card.inner_text()
    assert "compile" in text and "GB/s" in text
    assert "cpu:0" in text


def test_changing_a_weight_reruns_from_the_cache(page):
    run(page)
    page.locator(".timing-card").wait_for()
    weight = page.get_by_label("w2 · t3")
    weight.click()
    page.keyboard.press("Control+A")
    page.keyboard.type("4")
    weight.press("Enter")
    result = page.get_by_role("treeitem", name=re.compile(r"^weighted_sum\(t1, t2, t3\)"))
    page.get_by_text("= [[33, 12], [25, 28]]").wait_for()
    assert "cached, no compile" in page.locator(".timing-card").inner_text()
    assert result.count() == 1


def test_stacking_mismatched_trees_shows_the_paths(page):
    open_tab(page, "Stack")
    names = page.get_by_role("combobox").filter(has_text="mlp_0")
    box = names.bounding_box()  # the arrow: the middle of the field is covered by chips
    names.click(position={"x": box["width"] - 12, "y": box["height"] / 2})
    page.locator("li", has_text=re.compile(r"^t1$")).first.click()
    title = page.get_by_text("Operation", exact=True).bounding_box()
    page.mouse.click(title["x"] + 5, title["y"] + 5)  # on the menu's backdrop: closes it
    preview = page.locator(".form-error")
    preview.wait_for()  # the form says it before running
    assert "[0][0]: (3, 2) in tree 0, (2, 2) in tree 4" in preview.inner_text()
    run(page)
    page.get_by_role("alert").filter(has_text="The operation failed").wait_for()
    text = page.locator(".run-error").inner_text()
    assert "Cannot stack 5 trees" in text
    assert "[0][0]: (3, 2) in tree 0, (2, 2) in tree 4" in text
    assert "[1][1]: (4,) in tree 0, (2,) in tree 4" in text


def test_two_sessions_do_not_see_each_others_trees(browser, served_url, page):
    run(page)
    page.locator(".timing-card").wait_for()
    keep = "Add the result as a loaded tree (so operations chain)."
    page.get_by_role("button", name=keep).click()
    page.get_by_text("weighted_sum_1", exact=True).first.wait_for()
    other = browser.new_context()
    second = other.new_page()
    second.goto(served_url)
    second.get_by_role("treeitem").first.wait_for(timeout=15_000)
    second.get_by_text("grads", exact=True).first.wait_for()
    assert second.get_by_text("weighted_sum_1", exact=True).count() == 0
    assert page.get_by_text("weighted_sum_1", exact=True).count() >= 1
    other.close()


def test_the_tree_follows_the_aria_tree_pattern_by_keyboard_and_click(page):
    root, first = node(page, ""), node(page, "[0]")
    assert root.get_attribute("aria-level") == "1"
    assert root.get_attribute("aria-expanded") == "true"
    assert first.get_attribute("aria-level") == "2"
    assert node(page, "[0][0]").get_attribute("aria-expanded") is None  # a leaf
    first.locator(".wtree-label").click()  # focuses the tree on this row and selects it
    selected(page, "[0]").wait_for()
    page.keyboard.press("ArrowLeft")  # an open node collapses
    node(page, "[0][0]").wait_for(state="detached")
    assert node(page, "[0]").get_attribute("aria-expanded") == "false"
    page.keyboard.press("ArrowRight")  # a closed node expands
    node(page, "[0][0]").wait_for()
    page.keyboard.press("ArrowRight")  # an open node: on to its first child
    # Keys act on the row in focus: wait for the move before the next key (no race).
    page.locator('[role=treeitem].focused[data-path="[0][0]"]').first.wait_for()
    page.keyboard.press("Enter")  # selects it: its leaf stats show
    page.get_by_text("std").first.wait_for()
    selected(page, "[0][0]").wait_for()
    page.keyboard.press("ArrowDown")
    page.locator('[role=treeitem].focused[data-path="[0][1]"]').first.wait_for()
    page.keyboard.press("Enter")
    selected(page, "[0][1]").wait_for()
    page.keyboard.press("ArrowLeft")  # a leaf: up to its parent
    page.keyboard.press("ArrowUp")  # and up to the root
    page.keyboard.press("Enter")
    selected(page, "").wait_for()
    toggle(page, "[0]")  # a click on the arrow toggles
    node(page, "[0][0]").wait_for(state="detached")


def test_the_list_of_trees_is_a_listbox_by_click_and_keyboard(page):
    trees = page.get_by_role("listbox", name="Loaded trees")
    options = trees.get_by_role("option")

    def selected_is(name: str) -> None:
        expect(trees.get_by_role("option", selected=True)).to_have_accessible_name(
            re.compile(rf"^{name} "))

    expect(options).to_have_count(10)  # the examples: t1 t2 t3 s2 mlp_0..3 params grads
    selected_is("t1")
    trees.get_by_role("option", name=re.compile(r"^s2")).click()  # a click selects
    # the input tree's header names the selected tree
    page.get_by_text(re.compile(r"^s2 · 5 leaves")).first.wait_for()
    selected_is("s2")
    page.keyboard.press("ArrowDown")  # the next tree, in focus but not yet selected
    page.locator(".ilist-item.focused", has_text="mlp_0").wait_for()
    selected_is("s2")
    page.keyboard.press("Enter")
    selected_is("mlp_0")
    page.get_by_text(re.compile(r"^mlp_0 · 4 leaves")).first.wait_for()
