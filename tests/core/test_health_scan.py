"""`inspector.scan`: every figure against NumPy float64, on plain, packed and lazy trees."""

from __future__ import annotations

import math

import jax
import ml_dtypes
import numpy as np
import pytest

import inspector
from inspector.core.health.leaf_stats import LeafStats


def in_form(tree, form: str):
    """`tree` as given ("plain"), packed, or with every leaf a LazyArray read on demand."""
    if form == "packed":
        return inspector.pack(tree)
    if form == "lazy":
        return jax.tree.map(lambda x: inspector.LazyArray(
            np.shape(x), np.asarray(x).dtype, lambda x=x: np.asarray(x)), tree)
    return tree


def reference(x) -> dict:
    """The figures of one leaf, by NumPy in float64 (moments over the finite elements); a
    float64 leaf is scanned in float32 unless JAX has x64 on, so it is rounded first."""
    x = np.asarray(x)
    if x.dtype == np.float64 and not jax.config.jax_enable_x64:
        x = x.astype(np.float32)
    wide = x.astype(np.float64).ravel()
    finite = wide[np.isfinite(wide)]
    out = {"nan": int(np.isnan(wide).sum()), "posinf": int((wide == np.inf).sum()),
           "neginf": int((wide == -np.inf).sum()), "zeros": int((wide == 0).sum()),
           "size": wide.size}
    if finite.size:
        out.update(min=finite.min(), max=finite.max(), mean=finite.mean(), std=finite.std(),
                   l2=math.sqrt((finite ** 2).sum()), max_abs=np.abs(finite).max())
    else:
        out.update(min=math.nan, max=math.nan, mean=math.nan, std=math.nan, l2=0.0,
                   max_abs=math.nan)
    return out


def assert_figures(stats: LeafStats, x, rtol=1e-6) -> None:
    ref = reference(x)
    for k in ("nan", "posinf", "neginf", "zeros", "size"):
        assert getattr(stats, k) == ref[k], (stats.path, k)
    for k in ("min", "max", "max_abs"):  # exact: a value of the leaf
        assert getattr(stats, k) == pytest.approx(ref[k], rel=0, abs=0, nan_ok=True), k
    for k in ("mean", "std", "l2"):
        scale = max(abs(ref["mean"]), ref["std"]) if k == "mean" else abs(ref[k])
        got = getattr(stats, k)
        if math.isnan(ref[k]):
            assert math.isnan(got), (stats.path, k)
        else:
            assert abs(got - ref[k]) <= rtol * scale + 1e-12, (stats.path, k, got, ref[k])


def mixed_tree():
    rng = np.random.default_rng(0)
    faults = rng.standard_normal(5000).astype(np.float32)
    faults[[3, 900, 4999]] = [np.nan, np.inf, -np.inf]
    faults[10:40] = 0
    return {
        "offset": (1000 + rng.standard_normal((300, 70))).astype(np.float32),  # mean >> std
        "faults": faults,
        "ints": rng.integers(-50, 50, (33, 3)).astype(np.int32),
        "flags": rng.random(77) < 0.3,
        "half": rng.standard_normal(1025).astype(np.float16),
        "bf16": rng.standard_normal((40, 41)).astype(ml_dtypes.bfloat16),
        "wide": rng.standard_normal(2000) * 1e5,  # float64
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.float32(-2.5),
        "all_nan": np.full(4, np.nan, np.float32),
        "blocks": [rng.standard_normal(n).astype(np.float32) for n in (1, 63, 64, 65, 1024,
                                                                        3000, 70_001)],
    }


def plain_leaves(tree) -> dict:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(p): x for p, x in flat}


@pytest.mark.parametrize("form", ["plain", "packed", "lazy"])
def test_every_figure_matches_numpy_float64(form):
    tree = mixed_tree()
    leaves = plain_leaves(tree)
    s = inspector.scan(in_form(tree, form))
    assert [x.path for x in s.leaves] == list(leaves)  # describe (flattening) order
    for stats in s.leaves:
        assert_figures(stats, leaves[stats.path])
    assert s.leaf("['faults']").nonfinite == 3
    assert [x.path for x in s.nonfinite()] == ["['all_nan']", "['faults']"]


def test_packed_leaves_straddling_rows_match_numpy():
    rng = np.random.default_rng(3)
    sizes = rng.integers(0, 3000, 300)
    tree = [(rng.standard_normal(n) * 3 + 2).astype(np.float32) for n in sizes]
    tree[5][7] = np.nan
    s = inspector.scan(inspector.pack(tree))
    for stats, x in zip(s.leaves, tree, strict=True):
        assert_figures(stats, x)


def test_subtree_aggregates_like_one_vector():
    tree = mixed_tree()
    s = inspector.scan(tree)
    together = np.concatenate([np.asarray(x, np.float64).ravel() for x in tree["blocks"]])
    t = s.subtree("['blocks']")
    assert_figures(t._replace(dtype="float32"), together)
    assert t.dtype == "float32" and t.shape is None
    root = s.subtree("")
    assert root.size == sum(x.size for x in s.leaves)
    assert root.nan == sum(x.nan for x in s.leaves) and root.dtype == "mixed"
    with pytest.raises(KeyError, match="nowhere"):
        s.subtree("['nowhere']")


def test_strings_and_complex_are_skipped_and_listed():
    s = inspector.scan({"name": "bert", "z": np.ones(3, np.complex64), "w": np.ones(2)})
    assert [x.path for x in s.leaves] == ["['w']"]
    assert s.skipped == ("['name']", "['z']")


def test_lazy_leaves_are_read_once_with_progress():
    reads = []
    tree = {f"l{i}": inspector.LazyArray((1000,), "float32",
                                         lambda i=i: reads.append(i) or np.full(1000, i, "f4"))
            for i in range(600)}
    told = []
    s = inspector.scan(tree, progress=lambda done, total: told.append((done, total)))
    assert sorted(reads) == list(range(600))
    assert told[-1] == (600, 600)
    assert s.leaf("['l7']").mean == 7.0


def test_many_small_packed_leaves_compile_once():
    rng = np.random.default_rng(1)
    tree = {f"b{i:06d}": rng.standard_normal(int(n)).astype(np.float32)
            for i, n in enumerate(rng.integers(1, 40, 100_000))}
    packed = inspector.pack(tree)
    before = inspector.compile_count()
    s = inspector.scan(packed)
    first = inspector.compile_count() - before
    assert first <= 4  # the kernel and its small transfers, not one per leaf
    other = inspector.pack({k: v + 1 for k, v in tree.items()})
    before = inspector.compile_count()
    inspector.scan(other)
    assert inspector.compile_count() == before  # same layout: nothing compiled
    k = "['b012345']"
    assert_figures(s.leaf(k), tree["b012345"])


def test_leaf_table_builds_the_same_leaf_stats_on_demand():
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 300, 2000)  # rows of 32 elements: most leaves straddle them
    tree = [(rng.standard_normal(n) + 5).astype(np.float32) for n in sizes]
    tree[17][3], tree[1999][0] = np.inf, np.nan
    s = inspector.scan(inspector.pack(tree))
    one_by_one = [s.leaves[i] for i in range(len(tree))]  # built one at a time
    assert one_by_one == list(s.leaves) and s.leaves[-1] == one_by_one[-1]
    assert s.leaves[3:5] == one_by_one[3:5] and len(s.leaves) == len(tree)
    for stats, x in zip(one_by_one, tree, strict=True):
        assert type(stats) is LeafStats
        # float32 sums of a short piece at mean 5: std within 1.5e-6 with rows of 32 and
        # 2.1e-6 with rows of 64 (measured; the 1e-6 of the other tests holds at mean ~2)
        assert_figures(stats, x, rtol=5e-6)
    assert [x.path for x in s.nonfinite()] == ["[17]", "[1999]"]
    assert s.leaf("[1999]").nan == 1 and s.leaf("[17]").posinf == 1
    with pytest.raises(IndexError):
        s.leaves[len(tree)]
