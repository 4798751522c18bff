"""The Compare tab's whole-tree value diff: rows per leaf and subtree against NumPy float64,
most changed first, shown in a sortable table (state and view, no browser)."""

import numpy as np
import pytest

from inspector.ui.diff_view import DiffValuesView
from inspector.ui.session.state import InspectorState


def trees():
    rng = np.random.default_rng(0)
    a = {f"layer{i}": {"w": rng.standard_normal((8, 4)).astype(np.float32),
                       "b": rng.standard_normal(4).astype(np.float32)} for i in range(3)}
    b = {k: {n: v.copy() for n, v in sub.items()} for k, sub in a.items()}
    b["layer1"]["w"] += np.float32(0.5)  # the fine-tune changed layer1's weights most
    b["layer2"]["b"][0] += np.float32(0.01)
    return a, b


def comparing(a, b) -> InspectorState:
    """A session comparing `a` (named "pre") with `b` ("ft")."""
    s = InspectorState()
    s.add_tree("pre", a)
    s.add_tree("ft", b)
    s.compare.param.update(diff_a="pre", diff_b="ft")
    return s


def test_compare_all_values_gives_leaves_and_subtrees_most_changed_first():
    a, b = trees()
    s = comparing(a, b)
    view = DiffValuesView(s)
    assert not view.button.disabled and not view.table.visible
    s.compare.param.trigger("diff_compare_values")
    rows = {r["path"]: r for r in s.compare.diff_table}
    top = [r["path"] for r in s.compare.diff_table[:3]]
    assert top == ["['layer1']['w']", "['layer1']", "(root)"]
    x, y = a["layer1"]["w"].astype(np.float64), b["layer1"]["w"].astype(np.float64)
    r = rows["['layer1']['w']"]
    assert r["kind"] == "leaf" and r["size"] == 32 and r["changed"] == 1.0
    assert r["max_abs"] == pytest.approx(0.5, rel=1e-6)
    assert r["rel_l2"] == pytest.approx(np.linalg.norm(x - y) / np.linalg.norm(x), rel=1e-5)
    assert r["cosine"] == pytest.approx(x.ravel() @ y.ravel() / np.linalg.norm(x)
                                        / np.linalg.norm(y), abs=1e-6)
    whole_a = np.concatenate([a[k][n].ravel() for k in a for n in a[k]]).astype(np.float64)
    whole_b = np.concatenate([b[k][n].ravel() for k in b for n in b[k]]).astype(np.float64)
    root = rows["(root)"]
    assert root["kind"] == "subtree" and root["size"] == whole_a.size
    assert root["rel_l2"] == pytest.approx(np.linalg.norm(whole_a - whole_b)
                                           / np.linalg.norm(whole_a), rel=1e-5)
    assert root["changed"] == pytest.approx((32 + 1) / whole_a.size)
    assert rows["['layer0']"]["rel_l2"] == 0.0 and rows["['layer2']['b']"]["changed"] == 0.25
    assert view.table.visible and list(view.table.value["path"])[:1] == ["['layer1']['w']"]
    shown = view.table.value.set_index("path")["rel_l2"]  # its bar's legend: 4 digits
    assert shown["['layer1']['w']"] == float(f"{r['rel_l2']:.4g}") != r["rel_l2"]
    s.compare.diff_b = "pre"  # a new comparison clears the table
    assert s.compare.diff_table == [] and not view.table.visible


def test_selecting_a_leaf_gives_histograms_of_a_b_and_delta():
    from inspector.ui.diff_view import DiffLeafView

    a, b = trees()
    s = comparing(a, b)
    view = DiffLeafView(s)
    s.tree_views["diff"].path = "['layer1']['w']"
    h = s.compare.diff_histograms["['layer1']['w']"]
    x, y = a["layer1"]["w"].astype(np.float64).ravel(), b["layer1"]["w"].astype(np.float64)
    lo, hi = min(x.min(), y.min()), max(x.max(), y.max())
    np.testing.assert_array_equal(h["a"][0], np.histogram(x, bins=30, range=(lo, hi))[0])
    np.testing.assert_array_equal(h["b"][0], np.histogram(y.ravel(), bins=30, range=(lo, hi))[0])
    assert h["delta"][0].sum() == 32 and h["delta"][1][0] == pytest.approx(0.5, abs=1e-6)
    assert view._plots.visible and len(view._plots) == 2
    assert list(view._sources["a"].data["top"]) == list(h["a"][0])


def test_tree_rows_carry_the_heat_of_their_relative_l2_change():
    from inspector.ui.diff_view import DiffTreeView
    from inspector.ui.session.value_heat import UNCHANGED, heat_color

    a, b = trees()
    s = comparing(a, b)
    view = DiffTreeView(s)
    assert not any("heat" in item for item in view.shown().values())  # not compared yet
    s.compare.param.trigger("diff_compare_values")
    view.expand("['layer1']")
    shown = view.shown()
    x, y = a["layer1"]["w"].astype(np.float64), b["layer1"]["w"].astype(np.float64)
    rel = np.linalg.norm(x - y) / np.linalg.norm(x)
    assert shown["['layer1']['w']"]["heat"]["color"] == heat_color(rel)
    assert shown["['layer1']['w']"]["heat"]["title"].startswith(f"rel L2 {rel:.3g} · max |a−b| 0.5")
    # a subtree is coloured as its leaves taken as one vector (norm-weighted)
    whole = np.concatenate([a["layer1"]["b"], a["layer1"]["w"].ravel()]).astype(np.float64)
    moved = np.concatenate([b["layer1"]["b"], b["layer1"]["w"].ravel()]).astype(np.float64)
    sub = np.linalg.norm(whole - moved) / np.linalg.norm(whole)
    assert shown["['layer1']"]["heat"]["color"] == heat_color(sub) != heat_color(rel)
    assert shown["['layer0']"]["heat"]["color"] == UNCHANGED
    assert shown["['layer1']['b']"]["heat"]["color"] == UNCHANGED
    assert shown["(root)"]["heat"]["title"].startswith("rel L2")  # the root row too
    s.compare.diff_b = "pre"
    assert not any("heat" in item for item in view.shown().values())


def test_heat_scale_is_logarithmic_from_pale_to_dark_red():
    from inspector.ui.session.value_heat import NAN_COLOR, heat_color

    def red(c):
        return int(c[1:3], 16), int(c[3:5], 16), int(c[5:7], 16)

    steps = [red(heat_color(10.0 ** e)) for e in range(-6, 1)]
    assert all(sum(u) > sum(v) for u, v in zip(steps, steps[1:], strict=False))  # darker
    assert heat_color(1e-9) == heat_color(1e-6) and heat_color(50.0) == heat_color(1.0)
    assert heat_color(float("inf")) == "#7f0000" and heat_color(float("nan")) == NAN_COLOR


def test_value_diff_reports_its_progress_in_leaves_and_bytes():
    from inspector.core.diff.values import value_table

    rng = np.random.default_rng(1)
    a = {f"l{i:02d}": rng.standard_normal(10 + i).astype(np.float32) for i in range(70)}
    b = {k: v + np.float32(1) for k, v in a.items()}
    seen = []
    rows = value_table(a, b, progress=lambda *p: seen.append(p))
    total = 2 * sum(v.nbytes for v in a.values())
    first = 2 * sum(a[f"l{i:02d}"].nbytes for i in range(64))
    assert seen == [(64, 70, first, total), (70, 70, total, total)]
    assert len(rows) == 71

    s = comparing(a, b)
    view = DiffValuesView(s)
    shown = []
    s.param.watch(lambda e: shown.append((e.new, s.status)), "progress")
    s.compare.param.trigger("diff_compare_values")
    assert shown[-2] == (100.0, f"Comparing values: 70 / 70 leaves, {total / 1024:.1f} KiB / "
                                f"{total / 1024:.1f} KiB read")
    assert shown[-1][0] is None and not view.progress.visible  # done: the bar goes
