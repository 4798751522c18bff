"""`diff(a, b, values=True)`: max |a-b|, relative L2, cosine and fraction changed per leaf,
against NumPy float64; one kernel per distinct shape; lazy leaves streamed."""

from functools import partial

import ml_dtypes
import numpy as np
import pytest

import inspector
from inspector.core.diff.values import leaf_value_stats
from inspector.core.lazy import LazyArray


def tree(seed, n=3):
    rng = np.random.default_rng(seed)
    return {f"layer{i}": {"w": rng.standard_normal((16, 8)).astype(np.float32),
                          "b": rng.standard_normal(8).astype(np.float32)} for i in range(n)}


def reference(x, y, rtol, atol):
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    d = x - y
    return (np.abs(d).max(), np.linalg.norm(d) / np.linalg.norm(x),
            x @ y / (np.linalg.norm(x) * np.linalg.norm(y)),
            np.mean(~np.isclose(y + d, y, rtol=rtol, atol=atol)))


@pytest.mark.parametrize("packed", [False, True], ids=["tree", "packed"])
def test_every_figure_against_numpy_float64(packed):
    a = tree(0)
    b = {k: dict(v) for k, v in a.items()}
    b["layer0"]["w"] = a["layer0"]["w"] + np.float32(1e-3) * np.arange(128, dtype=np.float32
                                                                         ).reshape(16, 8)
    b["layer2"]["b"] = -a["layer2"]["b"]
    b["layer1"]["w"] = a["layer1"]["w"].copy()
    b["layer1"]["w"][3, :2] += np.float32(0.5)
    args = (inspector.pack(a), inspector.pack(b)) if packed else (a, b)
    found = inspector.diff(*args, values=True, rtol=1e-4, atol=1e-3)
    assert [d.path for d in found] == ["['layer0']['w']", "['layer1']['w']", "['layer2']['b']"]
    for d in found:
        layer, leaf = (p.strip("[']") for p in d.path.split("]["))
        x, y = a[layer][leaf], b[layer][leaf]
        max_abs, rel, cos, frac = reference(x, y, 1e-4, 1e-3)
        assert d.kind == "value"
        assert d.max_abs == pytest.approx(max_abs, rel=1e-6)
        assert d.rel_l2 == pytest.approx(rel, rel=1e-5)
        assert d.cosine == pytest.approx(cos, abs=1e-6)
        assert d.frac_changed == pytest.approx(frac, abs=1e-9)
    assert found[1].frac_changed == pytest.approx(2 / 128)
    assert found[2].cosine == pytest.approx(-1.0)
    assert "cosine = " in str(found[0]) and "% changed" in str(found[0])


def test_half_precision_complex_and_nan_rules():
    h = np.array([1, 2, 3, 4], ml_dtypes.bfloat16)
    (d,) = inspector.diff({"h": h}, {"h": h * 2}, values=True)
    assert (d.max_abs, d.frac_changed) == (4.0, 1.0) and d.cosine == pytest.approx(1.0)
    c = np.array([1 + 1j, 2 - 1j], np.complex64)
    (d,) = inspector.diff({"c": c}, {"c": c * 1j}, values=True)
    x, y = c.astype(np.complex128), (c * 1j).astype(np.complex128)
    assert d.cosine == pytest.approx(np.real(np.vdot(x, y)) / np.linalg.norm(x) ** 2, abs=1e-6)
    assert d.max_abs == pytest.approx(np.abs(x - y).max(), rel=1e-6)
    nan = np.array([np.nan, 1.0, np.inf])
    assert inspector.diff(nan, nan.copy(), values=True) == []
    (d,) = inspector.diff(nan, np.array([1.0, np.nan, np.inf]), values=True)
    assert np.isnan(d.max_abs) and np.isnan(d.cosine) and d.frac_changed == pytest.approx(2 / 3)


def test_zero_leaves():
    s = leaf_value_stats([(np.zeros(3), np.zeros(3)), (np.zeros(3), np.ones(3)),
                          (np.zeros((0, 2)), np.zeros((0, 2)))])
    assert (s[0].cosine, s[0].rel_l2, s[0].frac_changed) == (1.0, 0.0, 0.0)
    assert (s[1].cosine, s[1].rel_l2, s[1].max_abs, s[1].frac_changed) == (0.0, np.inf, 1.0, 1.0)
    assert (s[2].max_abs, s[2].frac_changed, s[2].size) == (0.0, 0.0, 0)


def test_one_kernel_per_shape_and_new_tolerances_never_recompile():
    a, b = tree(1, n=30), tree(2, n=30)
    inspector.diff(a, b, values=True)
    before = inspector.compile_count()
    for i in range(5):
        found = inspector.diff(a, b, values=True, rtol=10.0 ** -i, atol=0.1 * i)
    assert inspector.compile_count() == before
    assert len(found) == 60


def test_lazy_leaves_are_read_once_and_progress_is_reported():
    a, b = tree(3, n=100), tree(4, n=100)
    reads = []

    def lazy(t, name):
        return {k: {n: LazyArray(v.shape, v.dtype,
                                 lambda v=v, p=(name, k, n): reads.append(p) or v)
                    for n, v in sub.items()} for k, sub in t.items()}

    seen = []
    found = inspector.diff(lazy(a, "a"), lazy(b, "b"), values=True,
                           progress=lambda done, total: seen.append((done, total)))
    assert len(found) == 200 and len(reads) == 400 and len(set(reads)) == 400
    assert seen == [(64, 200), (128, 200), (192, 200), (200, 200)]
    d = next(x for x in found if x.path == "['layer7']['w']")
    assert d.rel_l2 == pytest.approx(reference(a["layer7"]["w"], b["layer7"]["w"], 1e-5,
                                               1e-8)[1], rel=1e-5)


def test_subtree_figures_are_those_of_the_concatenated_leaves():
    from inspector.core.diff.values import subtree_value_stats

    a, b = tree(5, n=3), tree(6, n=3)
    b["layer1"]["b"] = a["layer1"]["b"].copy()  # one leaf unchanged
    keys = [(layer, leaf) for layer in sorted(a) for leaf in sorted(a[layer])]
    stats = leaf_value_stats([(a[k0][k1], b[k0][k1]) for k0, k1 in keys], rtol=0.1, atol=0.5)
    agg = subtree_value_stats(dict(zip(keys, stats, strict=True)))
    assert set(agg) == {(), *((k0,) for k0, _ in keys), *keys}
    for prefix in [(), ("layer1",)]:
        chosen = [k for k in keys if k[:len(prefix)] == prefix]
        x = np.concatenate([a[k0][k1].ravel() for k0, k1 in chosen]).astype(np.float64)
        y = np.concatenate([b[k0][k1].ravel() for k0, k1 in chosen]).astype(np.float64)
        max_abs, rel, cos, frac = reference(x, y, 0.1, 0.5)
        s = agg[prefix]
        assert s.size == x.size and s.max_abs == pytest.approx(max_abs, rel=1e-6)
        assert s.rel_l2 == pytest.approx(rel, rel=1e-5)
        assert s.cosine == pytest.approx(cos, abs=1e-6)
        assert s.frac_changed == pytest.approx(frac, abs=1e-9)


def test_matching_nans_and_infs_in_a_big_leaf_take_the_careful_path():
    from inspector.core.diff.values import leaf_value_stats

    rng = np.random.default_rng(3)
    a = rng.standard_normal(4096).astype(np.float32)
    b = a + np.float32(0.25) * (rng.random(4096) < 0.1).astype(np.float32)
    for x in (a, b):
        x[[5, 700]] = np.nan, np.inf  # the same in both: equal, not a change
    s = leaf_value_stats([(a, b)])[0]
    ok = np.isfinite(a)
    x, y = a[ok].astype(np.float64), b[ok].astype(np.float64)
    assert s.max_abs == pytest.approx(0.25) and s.size == 4096
    assert s.frac_changed == np.count_nonzero(np.abs(x - y) > 1e-8 + 1e-5 * np.abs(y)) / 4096
    assert s.rel_l2 == pytest.approx(np.linalg.norm(x - y) / np.linalg.norm(x), rel=1e-5)
    clean = leaf_value_stats([(np.where(ok, a, 0), np.where(ok, b, 0))])[0]  # the fast path
    assert (clean.max_abs, clean.frac_changed) == (s.max_abs, s.frac_changed)
    assert clean.rel_l2 == pytest.approx(s.rel_l2, rel=1e-5)
    assert clean.cosine == pytest.approx(x @ y / np.linalg.norm(x) / np.linalg.norm(y), abs=1e-6)


def test_checkpoint_leaves_aligned_or_not_against_numpy(tmp_path):
    """Two real safetensors files, tensors at 32 mod 64 in the file as well as at 0 (XLA
    uses the aligned ones in place, copies the others): the figures equal NumPy float64's."""
    import safetensors.numpy

    rng = np.random.default_rng(7)
    shapes = {"a": (3,), "b": (5, 8), "c": (64, 33), "d": (7,), "e": (128, 40)}
    trees = [{k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
             for _ in range(2)]
    trees[1]["c"][5:9] = trees[0]["c"][5:9]
    paths = []
    for i, t in enumerate(trees):
        paths.append(str(tmp_path / f"m{i}.safetensors"))
        safetensors.numpy.save_file(t, paths[-1])
    lazy = inspector.load(paths[0])
    offsets = {k: np.asarray(v).ctypes.data % 64 for k, v in lazy.items()}
    assert 0 in offsets.values() and any(offsets.values())  # both cases occur

    found = {d.path: d for d in inspector.diff(lazy, inspector.load(paths[1]), values=True)}
    assert len(found) == len(shapes)
    for k in shapes:
        want = reference(trees[0][k], trees[1][k], 1e-5, 1e-8)
        d = found[f"['{k}']"]
        assert (d.max_abs, d.rel_l2, d.cosine, d.frac_changed) == pytest.approx(want, rel=1e-5)


def test_a_leaf_that_fails_to_read_stops_the_diff_with_its_error():
    """A reader's LoadError reaches the caller, and no leaf after the failing one is read."""
    a, b = tree(5, n=100), tree(6, n=100)
    reads = []

    def lazy(t, name):
        def reader(v, p):
            if p == ("b", "layer40", "w"):  # pair 71 of 200 (keys in sorted order)
                raise inspector.LoadError("b.safetensors: truncated at ['layer40']['w']")
            reads.append(p)
            return v

        return {k: {n: LazyArray(v.shape, v.dtype, partial(reader, v, (name, k, n)))
                    for n, v in sub.items()} for k, sub in t.items()}

    with pytest.raises(inspector.LoadError, match=r"truncated at \['layer40'\]\['w'\]"):
        inspector.diff(lazy(a, "a"), lazy(b, "b"), values=True)
    assert len(reads) == 2 * 71 + 1  # pairs 0-70, and the first tree's leaf of pair 71
