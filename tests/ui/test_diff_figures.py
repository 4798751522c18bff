"""One value-difference implementation: the figures the Compare view shows (a selected leaf,
the whole-tree value table) are the library's `diff(values=True)` figures, and all of them
agree with NumPy in float64."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import inspector
from inspector.ui.session.state import InspectorState

RNG = np.random.default_rng(7)
A = {
    "small": RNG.standard_normal((5, 3)).astype(np.float32),
    "half": RNG.standard_normal(64).astype(np.float32),
    "big": RNG.standard_normal(1 << 20).astype(np.float32),  # the blocked kernel (2 blocks)
}
B = {
    "small": A["small"] + np.float32(0.25) * (np.arange(15).reshape(5, 3) % 2),
    "half": A["half"].astype(ml_dtypes.bfloat16),  # dtype differs, values still compare
    "big": A["big"] * np.float32(1.001),
}


def reference(path: str) -> tuple[float, float]:
    key = path[2:-2]
    x, y = A[key].astype(np.float64), B[key].astype(np.float64)
    return float(np.max(np.abs(x - y))), float(np.linalg.norm(x - y) / np.linalg.norm(x))


def test_the_page_shows_the_library_figures():
    library = {d.path: (d.max_abs, d.rel_l2)
               for d in inspector.diff(A, B, values=True) if d.kind == "value"}
    assert sorted(library) == ["['big']", "['half']", "['small']"]
    for path, (max_abs, rel_l2) in library.items():
        want = reference(path)
        assert max_abs == pytest.approx(want[0], rel=1e-6)
        assert rel_l2 == pytest.approx(want[1], rel=1e-5)

    state = InspectorState()
    state.add_tree("a", A)
    state.add_tree("b", B)
    state.compare.param.update(diff_a="a", diff_b="b")
    for path in library:  # a leaf selected in the diff tree
        state.tree_views["diff"].path = path
    assert state.compare.diff_values == library

    state.compare.param.trigger("diff_compare_values")  # the whole-tree value table
    table = {r["path"]: (r["max_abs"], r["rel_l2"]) for r in state.compare.diff_table
             if r["kind"] == "leaf"}
    assert table == library


def test_the_eager_check_measures_as_the_library_does():
    from inspector.ui.session.eager import max_abs_diff

    library = max(d.max_abs for d in inspector.diff(A, B, values=True) if d.kind == "value")
    assert max_abs_diff(A, B) == library == pytest.approx(
        max(reference(f"['{k}']")[0] for k in A), rel=1e-6)
    assert max_abs_diff({"w": np.array([1.0, np.nan])}, {"w": np.array([1.0, np.nan])}) == 0.0
    assert np.isnan(max_abs_diff({"w": np.array([1.0, np.nan])}, {"w": np.array([np.nan, 1.0])}))
    assert max_abs_diff({}, {}) == 0.0


def test_a_big_endian_leaf_compares_and_a_text_leaf_says_why_not():
    a = {"w": np.arange(6, dtype=np.float32), "s": np.array(["x", "y"])}
    b = {"w": (np.arange(6) * 1.5).astype(">f8"), "s": np.array(["x", "z"])}
    state = InspectorState()
    state.add_tree("a", a)
    state.add_tree("b", b)
    state.compare.param.update(diff_a="a", diff_b="b")
    state.tree_views["diff"].path = "['w']"
    x, y = a["w"].astype(np.float64), b["w"].astype(np.float64)
    max_abs, rel_l2 = state.compare.diff_values["['w']"]
    assert max_abs == pytest.approx(np.max(np.abs(x - y)), rel=1e-6)
    assert rel_l2 == pytest.approx(np.linalg.norm(x - y) / np.linalg.norm(x), rel=1e-6)
    state.tree_views["diff"].path = "['s']"
    assert state.compare.diff_values["['s']"] == (
        "['s']: a holds <U1 values, which have no difference to measure.")
