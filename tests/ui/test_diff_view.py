"""The diff view: a model against an old checkpoint, driven through the state and the widgets."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import inspector
from inspector.ui.diff_view import DiffView
from inspector.ui.session.diff_index import compare
from inspector.ui.session.state import InspectorState

RNG = np.random.default_rng(0)
MODEL = {
    "dense": {"kernel": RNG.standard_normal((4, 3)).astype(np.float32),
              "bias": np.zeros(3, np.float32)},
    "norm": {"scale": np.ones(3, np.float32)},
    "blocks": [{"w": np.ones(2, np.float32)}, {"w": np.full(2, 2.0, np.float32)}],
}
# Written by an older version of the model: every kind of difference a restore trips on.
OLD = {
    "dense": {"kernel": RNG.standard_normal((3, 4)).astype(np.float32)},      # shape; bias missing
    "norm": {"scale": np.array([1.0, 1.5, 3.0], ml_dtypes.bfloat16),          # dtype
             "offset": np.zeros(3, np.float32)},                              # extra
    "blocks": {"0": {"w": np.ones(2, np.float32)}, "1": {"w": np.full(2, 2.0, np.float32)}},
}


@pytest.fixture
def state(tmp_path):
    """The model in memory and the old checkpoint opened from disk (lazy leaves)."""
    inspector.save(OLD, tmp_path / "old.safetensors")
    s = InspectorState(file_root=str(tmp_path))
    s.add_tree("model", MODEL)
    s.open.param.update(open_paths=[str(tmp_path / "old.safetensors")])
    s.open.param.trigger("open_files")
    s.compare.param.update(diff_a="model", diff_b="old.safetensors")
    return s


def test_summary_counts_every_kind_of_difference(state):
    d = state.compare.diff_result
    kinds = [(x.path, x.kind) for x in d.differences]
    assert kinds == [
        ("['blocks']", "type"), ("['blocks'][0]", "missing"), ("['blocks'][1]", "missing"),
        ("['blocks']['0']", "extra"), ("['blocks']['1']", "extra"),
        ("['dense']['bias']", "missing"), ("['dense']['kernel']", "shape"),
        ("['norm']['scale']", "dtype"), ("['norm']['offset']", "extra")]
    assert dict(d.counts) == {"missing": 3, "extra": 3, "shape": 1, "dtype": 1, "type": 1}
    assert d.matched == 0
    view = DiffView(state)
    html = view.summary.html.object
    assert "9 differences" in html and "0 of 5 leaves of a match" in html
    for text in ("3 missing", "3 extra", "1 shape", "1 dtype", "1 type"):
        assert text in html
    assert html.index("model") < html.index("old.safetensors")  # a's totals, then b's
    assert d.summary_lines() == [
        "9 differences: 3 missing, 3 extra, 1 shape, 1 dtype, 1 type; 0 leaves match.",
        "model: 5 leaves · 22 params · 88 B", "old.safetensors: 5 leaves · 22 params · 82 B"]
    assert not view.hint.visible


def test_each_differing_node_has_its_badge(state):
    view = DiffView(state)
    items = view.tree.shown()
    badges = {i: [b["label"] for b in item.get("buttons", [])] for i, item in items.items()}
    assert badges["['dense']['bias']"] == ["missing"]
    assert badges["['dense']['kernel']"] == ["shape"]
    assert badges["['norm']['scale']"] == ["dtype"]
    assert badges["['norm']['offset']"] == ["extra"]
    assert badges["['blocks']"] == ["type"]
    assert items["['dense']['kernel']"]["label"].endswith("float32[4,3]  ≠  b: float32[3,4]")
    assert "bfloat16[3]" in items["['norm']['scale']"]["label"]
    # the union of both trees, children of a before b's extras, dict keys sorted
    assert list(items).index("['norm']['offset']") < list(items).index("['norm']['scale']")
    colors = {b["label"]: b["color"] for item in items.values() for b in item.get("buttons", [])}
    assert colors == {"missing": "error", "extra": "warning", "shape": "secondary",
                      "dtype": "info", "type": "primary"}


def test_a_collapsed_parent_counts_the_differences_below_it(state):
    view = DiffView(state)
    diff = state.tree_views["diff"]
    assert "['dense']" in diff.expanded  # opened at first: the way to each difference
    diff.expanded = [i for i in diff.expanded if i != "['dense']"]
    dense = view.tree.shown()["['dense']"]
    assert [b["label"] for b in dense["buttons"]] == ["2 differences"]
    assert "['dense']['kernel']" not in view.tree.shown()
    view.tree.expand("['dense']")
    assert "buttons" not in view.tree.shown()["['dense']"]
    assert "['dense']['kernel']" in view.tree.shown()


def test_only_differences_hides_matching_nodes(tmp_path):
    a = {"same": {"x": np.ones(3), "y": np.zeros(2)}, "changed": {"w": np.ones(4)}}
    b = {"same": {"x": np.ones(3), "y": np.zeros(2)}, "changed": {"w": np.ones(5)}}
    s = InspectorState()
    s.add_tree("a", a)
    s.add_tree("b", b)
    s.compare.param.update(diff_a="a", diff_b="b")
    view = DiffView(s)
    assert "['same']" in view.tree.shown()
    assert s.compare.diff_result.matched == 2
    view.only.value = True
    assert s.compare.diff_only
    assert list(view.tree.shown()) == ["(root)", "['changed']", "['changed']['w']"]
    view.only.value = False
    assert "['same']" in view.tree.shown()


def test_selecting_a_leaf_reads_its_values_in_both_trees(state):
    view = DiffView(state)
    assert state.compare.diff_values == {}  # nothing read until a leaf is selected
    view.tree.select("['norm']['scale']")
    assert state.tree_views["diff"].path == "['norm']['scale']"
    a = MODEL["norm"]["scale"].astype(np.float64)
    b = OLD["norm"]["scale"].astype(np.float64)
    max_abs, rel = state.compare.diff_values["['norm']['scale']"]
    assert max_abs == pytest.approx(np.max(np.abs(a - b)))
    assert rel == pytest.approx(np.linalg.norm(a - b) / np.linalg.norm(a))
    assert f"max |a − b| = <b>{max_abs:.6g}</b>" in view.leaf.html.object
    assert "bfloat16[3]" in view.leaf.html.object and "dtypes differ" in view.leaf.html.object
    label = view.tree.shown()["['norm']['scale']"]["label"]
    assert f"max |Δ| {max_abs:.3g}" in label
    view.tree.select("['dense']['kernel']")  # shapes differ: nothing to read
    assert "['dense']['kernel']" not in state.compare.diff_values
    assert "shapes differ" in view.leaf.html.object


def test_only_the_selected_leaf_is_read(state, monkeypatch):
    reads = []
    original = inspector.LazyArray.read

    def counting(self):
        reads.append(self.source)
        return original(self)

    monkeypatch.setattr(inspector.LazyArray, "read", counting)
    compare(state.trees["model"], state.trees["old.safetensors"])  # structure only
    assert reads == []
    DiffView(state).tree.select("['norm']['scale']")
    assert [r.rsplit(":", 1)[1] for r in reads] == ["norm.scale"]


def test_choosing_and_swapping_the_trees(state):
    view = DiffView(state)
    assert view.a.value == "model" and view.b.value == "old.safetensors"
    view.swap.clicks += 1
    assert (state.compare.diff_a, state.compare.diff_b) == ("old.safetensors", "model")
    assert state.compare.diff_result.a.name == "old.safetensors"
    assert dict(state.compare.diff_result.counts)["missing"] == 3  # the extras are now missing
    view.a.value = None
    assert state.compare.diff_result is None and view.hint.visible
    assert view.summary.html.object == ""


def test_removing_a_compared_tree_clears_the_comparison(state):
    state.selected = "model"
    state.param.trigger("remove_tree")
    assert state.compare.diff_result is None


def test_many_leaves_are_grouped_in_ranges_and_badged():
    a = {f"k{i:04d}": np.zeros(1, np.float32) for i in range(250)}
    b = dict(a)
    b["k0150"] = np.zeros(1, np.float16)
    s = InspectorState()
    s.add_tree("a", a)
    s.add_tree("b", b)
    s.compare.param.update(diff_a="a", diff_b="b")
    view = DiffView(s)
    shown = view.tree.shown()
    assert "['k0150']" in shown and shown["['k0150']"]["buttons"][0]["label"] == "dtype"
    assert "[0:100]" in shown and "['k0050']" not in shown  # other ranges stay closed
    assert "1 difference" in shown["[100:200]"]["secondary"]


def test_identical_trees_say_so():
    s = InspectorState()
    s.add_tree("a", MODEL)
    s.add_tree("b", {k: v for k, v in MODEL.items()})
    s.compare.param.update(diff_a="a", diff_b="b")
    view = DiffView(s)
    assert "No differences" in view.summary.html.object
    assert "5 leaves match" in view.summary.html.object
    assert all("buttons" not in item for item in view.tree.shown().values())
    view.only.value = True
    assert list(view.tree.shown()) == ["(root)"]


def test_s5_example_is_one_click_from_its_differences():
    from inspector.ui.session.state import InspectorState

    s = InspectorState()
    s.example = "S5: model vs old checkpoint"
    s.param.trigger("load_example")
    assert (s.compare.diff_a, s.compare.diff_b) == ("model", "checkpoint")
    model, ckpt = s.trees["model"].tree, s.trees["checkpoint"].tree
    kinds = sorted(d.kind for d in inspector.diff(model, ckpt))
    assert kinds == ["dtype", "extra", "missing", "shape", "type"]


def test_opening_with_nothing_chosen_compares_the_first_two_trees():
    # Left empty, the served page's pickers showed no value yet sent their first option back
    # for both, so the summary compared t1 with t1.
    s = InspectorState()
    s.add_tree("first", {"w": np.zeros(3, np.float32)})
    s.add_tree("second", {"w": np.ones(4, np.float32)})
    view = DiffView(s)
    assert (view.a.value, view.b.value) == ("first", "second")
    assert s.compare.diff_result is not None and dict(s.compare.diff_result.counts)["shape"] == 1
    lone = InspectorState()
    lone.add_tree("only", {"w": np.zeros(3, np.float32)})
    assert DiffView(lone).a.value is None and lone.compare.diff_a == ""
