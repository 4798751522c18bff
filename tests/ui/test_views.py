"""The views, driven through their widgets' params as the browser would (no browser)."""

from __future__ import annotations

import doctest
import re

import numpy as np
import panel as pn
from panel.util import edit_readonly

from inspector.ui.app import TITLE, create_app
from inspector.ui.history_view import HistoryView
from inspector.ui.lazy_tree import find as _find
from inspector.ui.operation_panel import OperationPanel
from inspector.ui.result_view import ErrorView
from inspector.ui.session import leaf_numbers
from inspector.ui.sidebar import TreeListView
from inspector.ui.timing_card import TimingCard
from inspector.ui.tree_view import TreeView

FOLD = "['layers'][0\u2026299]"  # the 300 identical layers of `_load_transformer`, folded


def _load_transformer(state, n_layers=300):
    from inspector import examples

    state.add_tree("big", examples.transformer_checkpoint(n_layers=n_layers), "test",
                   select=True)
    state.tree_views["input"].expanded = ["(root)"]  # only the top level open


def test_tree_view_sends_children_only_when_a_node_is_expanded(state):
    _load_transformer(state)
    view = TreeView(state)
    shown = view.shown_ids()
    assert "['layers']" in shown and "['layers'][0:100]" not in shown
    view.expand("['layers']")
    assert "['layers']" in state.tree_views["input"].expanded
    shown = view.shown_ids()
    assert FOLD in shown and "['layers'][0:100]" not in shown  # 300 layers: one folded row
    view.expand(FOLD)
    shown = view.shown_ids()
    assert ["['layers'][0:100]", "['layers'][100:200]", "['layers'][200:300]"] == [
        i for i in shown if i.startswith("['layers'][") and ":" in i and not i.endswith(" …")]
    assert "['layers'][0:100] …" in shown  # a placeholder child: the arrow shows, no data sent
    assert "['layers']['layer_0150']" not in shown
    view.expand("['layers'][100:200]")
    assert "['layers']['layer_0150']" in view.shown_ids()
    # the widget's expanded paths point at the expanded items
    for path in view.tree.expanded:
        item = view.tree.items[path[0]]
        for k in path[1:]:
            item = item["items"][k]
        assert item["id"] in state.tree_views["input"].expanded


def test_collapsing_drops_children_and_reexpanding_restores_nested_state(state):
    _load_transformer(state)
    view = TreeView(state)
    view.expand("['layers']")
    view.expand(FOLD)
    view.expand("['layers'][0:100]")
    layers = _find(view.tree.items, "['layers']")
    view.tree.expanded = [p for p in view.tree.expanded if p != layers]
    assert "['layers'][0:100]" not in view.shown_ids()
    # remembered under the collapsed node
    assert "['layers'][0:100]" in state.tree_views["input"].expanded
    view.expand("['layers']")
    assert "['layers']['layer_0000']" in view.shown_ids()


def test_selecting_a_leaf_shows_its_stats(state):
    state.selected = "mlp_1"
    view = TreeView(state)
    view.tree.active = [_find(view.tree.items, "[0][0]")]
    assert state.tree_views["input"].path == "[0][0]"
    x = state.trees["mlp_1"].tree.unpack()[0][0]
    html = view.stats.stats_html
    assert f"{float(x.min()):.6g}" in html and f"{float(x.max()):.6g}" in html
    assert f"{float(x.astype(np.float64).std()):.6g}" in html
    assert view.stats.histogram_shown


def test_search_filters_leaves_and_reveals_the_picked_one(state):
    _load_transformer(state)
    view = TreeView(state)
    assert not view.table.active and view.table.frame is None  # no query: no table built
    view.table._search.value_input = "layer_0123.*fc1.*kernel"
    assert view.table.active and view.table.results.visible and not view.tree.visible
    assert state.tree_views["input"].search == "layer_0123.*fc1.*kernel"
    assert len(view.table.frame) == 0  # substring search by default
    state.search_regex = True
    assert view.table.frame["path"].tolist() == ["['layers']['layer_0123']['mlp']['fc1']['kernel']"]
    view.table._table.selection = [0]
    assert state.tree_views["input"].path == "['layers']['layer_0123']['mlp']['fc1']['kernel']"
    # its ranges and parents were expanded
    assert state.tree_views["input"].path in view.shown_ids()
    view.table._search.value_input = "("
    assert view.table._search.error_state


def test_stats_of_nan_and_inf():
    s = leaf_numbers.leaf_stats(np.array([1.0, np.nan, 3.0, np.inf, -np.inf], np.float32))
    assert (s["min"], s["max"], s["mean"], s["nan"], s["inf"]) == (1.0, 3.0, 2.0, 1, 2)
    assert leaf_numbers.leaf_stats(np.array([], np.float32))["min"] is None
    assert doctest.testmod(leaf_numbers).failed == 0


def test_moving_a_slider_reruns_and_the_card_says_cached(state):
    import inspector

    inspector.clear_cache()  # kernels are cached per process: start cold
    panel = OperationPanel(state)
    card = TimingCard(state)
    state.param.trigger("run")
    assert re.search(r"\(\d+ XLA compilations?\)", card.text)
    panel.weighted_sum.inputs[2].value = "4"  # typed as an integer: int32 trees stay int32
    assert state.ops["weighted_sum"].weights == [1, 2, 4]
    assert panel.weighted_sum.sliders[2].value == 4.0
    assert "compile: cached, no compile" in card.text
    assert len(state.history) == 2


def test_weight_number_input_and_presets_update_each_other(state):
    panel = OperationPanel(state)
    panel.weighted_sum.inputs[0].value = "0.5"
    assert state.ops["weighted_sum"].weights[0] == 0.5
    assert panel.weighted_sum.sliders[0].value == 0.5
    state.ops["weighted_sum"].param.trigger("uniform")
    assert [round(float(w.value), 6) for w in panel.weighted_sum.inputs] == [0.333333] * 3
    panel.weighted_sum.names.value = ["t1", "t2"]
    assert state.ops["weighted_sum"].trees == ["t1", "t2"] and len(panel.weighted_sum.inputs) == 2


def test_a_typed_weight_applies_on_enter_every_time(state):
    panel = OperationPanel(state)
    field = panel.weighted_sum.inputs[0]
    assert "t1" in field.label  # the field's accessible name holds its tree's name
    state.param.trigger("run")
    runs = len(state.history)
    for typed, expected in [("0.1", 0.1), ("0.7", 0.7), ("0.1", 0.1), ("0.1", 0.1)]:
        field.value_input = typed  # select-all + typing replaces the text; Enter applies it
        field.param.trigger("enter_pressed")
        assert state.ops["weighted_sum"].weights[0] == expected
        assert field.value_input == typed  # never rewritten while it says the same number
        runs += 1
        assert len(state.history) == runs  # each Enter re-ran the sum, the same weight too
        assert state.run_status.startswith("weighted_sum finished in ")
    for typed in ("0.3", "0.3"):  # the browser sends `value` and `enter_pressed`: one run
        field.param.update(value_input=typed, value=typed)
        field.param.trigger("enter_pressed")
        runs += 1
        assert len(state.history) == runs and state.ops["weighted_sum"].weights[0] == 0.3
    field.value_input = "1e"
    field.param.trigger("enter_pressed")
    assert state.form_error == "w0: '1e' is not a number."
    assert state.ops["weighted_sum"].weights[0] == 0.3


def test_index_form_parses_as_you_type(state):
    panel = OperationPanel(state)
    panel.tabs.active = 1
    assert state.op == "index"
    panel.index.tree.value = "s2"
    assert state.selected == "s2"
    assert list(panel.index.fields) == ["[0]", "[1]", "[3]"]
    panel.index.fields["[1]"].value_input = "1:("
    assert panel.index.fields["[1]"].error_state
    assert "Cannot parse index '1:('" in panel.index.field_error("[1]")
    assert "^" in panel.index._errors["[1]"].object
    panel.index.fields["[1]"].value_input = "1:3"
    assert not panel.index.fields["[1]"].error_state
    assert "[1] [1:3]: float32[5] → float32[2]" in panel.preview.object


def test_stack_form_reorders(state):
    panel = OperationPanel(state)
    panel.tabs.active = 2
    panel.stack.move(0, 1)
    assert state.ops["stack"].trees == ["mlp_1", "mlp_0", "mlp_2", "mlp_3"]
    assert panel.stack.names.value == state.ops["stack"].trees
    panel.stack.names.value = ["mlp_0", "t1"]
    assert "Cannot stack 2 trees" in panel.form_error.object and panel.form_error.visible


def test_error_view_shows_the_whole_message(state):
    view = ErrorView(state)
    assert not view.alert.visible
    state.ops["stack"].trees = ["mlp_0", "t1"]
    state.op = "stack"
    state.param.trigger("run")
    assert view.alert.visible
    assert "[1][1]: (4,) in tree 0, (2,) in tree 1" in view._text.object
    assert "<pre" in view._text.object


def test_history_table_and_chart_follow_the_runs(state):
    view = HistoryView(state)
    # laid out from the start (its first point must not re-lay the page out), saying so
    assert view._figure.visible and view._empty.visible
    assert (view._figure.y_range.start, view._figure.y_range.end) == (0.1, 1000.0)
    state.param.trigger("run")
    state.ops["weighted_sum"].weights = [1, 1, 1]
    runs = re.findall(r"<tr><td>(\d+)</td><td class=\"text\">weighted_sum</td>", view.table.object)
    assert runs == ["2", "1"]  # newest first
    assert view._source.data["run"] == [1, 2]
    assert view._figure.visible and not view._empty.visible
    lo = min(h.min_ms for h in state.history)
    hi = max(h.max_ms for h in state.history)
    y, x = view._figure.y_range, view._figure.x_range
    assert y.start == max(lo, 1e-6) / 2 and y.end == max(hi, 1e-6) * 2  # every point shows
    assert x.start < 1 and x.end > 2


def test_tree_list_selects(state):
    view = TreeListView(state)
    assert view.list.items[3]["label"] == "s2"
    assert "5 leaves" in view.list.items[3]["secondary"]
    assert view.list.active == 0 and state.selected == "t1"
    view.list.active = 3  # a click on the fourth item
    assert state.selected == "s2"
    state.selected = "mlp_0"
    assert view.list.active == [i["label"] for i in view.list.items].index("mlp_0")


def test_create_app_builds_a_page_per_call():
    a, b = create_app(background=False), create_app(background=False)
    assert a.title == TITLE
    assert a.inspector.state is not b.inspector.state
    assert a.inspector.state.selected == "t1"


def test_a_page_does_not_follow_the_busy_flag_every_session_shares():
    # pn.state.busy flips on every callback of every session; a Page bound to it was re-sent
    # to every open page each time (20 sessions: half of the server's time).
    page = create_app(background=False)
    try:
        with edit_readonly(pn.state):
            pn.state.busy = True
        assert page.busy is False and page.busy_indicator is None
    finally:
        with edit_readonly(pn.state):
            pn.state.busy = False


def test_a_page_neither_follows_the_process_wide_busy_flag_nor_outlives_its_session():
    """Each session's Page watched `pn.state.busy` (flipped by every callback of every
    session) even after the app stopped following it: the watchers piled up on `pn.state`
    and kept every page ever built alive."""
    import gc
    import weakref

    def busy_watchers():
        return len(pn.state._param__private.watchers.get("busy", {}).get("value", []))

    before = busy_watchers()
    pages = [create_app(background=False, defaults=False, root="") for _ in range(3)]
    assert busy_watchers() == before
    ref = weakref.ref(pages[0])
    del pages
    gc.collect()
    assert ref() is None


def test_opening_a_range_closes_the_ranges_beside_it(state):
    _load_transformer(state)
    view = TreeView(state)
    view.expand("['layers']")
    view.expand(FOLD)
    view.expand("['layers'][0:100]")
    view.expand("['layers'][200:300]")
    shown = view.shown_ids()
    assert "['layers']['layer_0250']" in shown and "['layers']['layer_0050']" not in shown
    assert "['layers'][0:100]" in shown  # still listed, just closed


def test_notebook_widget_preselects_same_structured_trees():
    from inspector import examples
    from inspector.ui.notebook import Inspector

    t1, t2, t3 = examples.s1_trees()
    widget = Inspector(t1=t1, t2=t2, t3=t3, other=examples.s2_tree())
    s = widget.state
    assert s.selected == "t1" and s.ops["weighted_sum"].trees == ["t1", "t2", "t3"]
    assert s.ops["stack"].trees == ["t1", "t2", "t3"]
    s.ops["weighted_sum"].weights = [1, 2, 3]
    s.param.trigger("run")
    assert np.asarray(s.result.result.unpack()[0][0]).tolist() == [[26, 11], [21, 24]]
    assert widget.__panel__() is not None


def test_app_for_the_command_line_lists_its_trees_and_a_file_picker(tmp_path):
    from inspector import examples
    from inspector.ui.session.loaded import prepare

    loaded = prepare("model.npz", examples.mlp_params(), "command line")
    page = create_app(background=False, defaults=False, trees=[loaded], root=tmp_path)
    app = page.inspector
    assert list(app.state.trees) == ["model.npz"] and app.state.selected == "model.npz"
    assert app.files.picker is not None and app.state.file_root == str(tmp_path)
