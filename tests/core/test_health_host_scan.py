"""The CPU scan of float32 buffers by one numba pass (`host_scan.py`, `scan_loops.py`) against
NumPy float64: counts exact, min/max exact, mean/std/l2 within 1e-6 relative (mean: of
max(|mean|, std)), with NaN/Inf/zeros planted at chunk boundaries and in the tail that does
not fill a chunk."""

from __future__ import annotations

import numpy as np
import pytest

import inspector
from inspector.core.health import host_scan
from inspector.core.health import scan as scan_module
from tests.core.test_health_scan import assert_figures

SMALL = 1 << 12  # a chunk of 4,096 elements: many boundaries in small leaves


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(host_scan, "CHUNK", SMALL)


def faulty_tree(rng, chunk: int) -> dict:
    """Leaves across chunk boundaries, with faults on and beside the boundaries."""
    big = rng.standard_normal(2 * chunk + 777).astype(np.float32)  # tail: 777 elements
    big[[chunk - 1, chunk, 2 * chunk]] = [np.nan, np.inf, -np.inf]  # around both boundaries
    big[-1] = np.nan  # last element of the tail
    big[chunk + 1:chunk + 40] = 0
    far = (1000 + rng.standard_normal(3 * chunk + 5)).astype(np.float32)  # mean >> std
    small = [(rng.standard_normal(int(n)) * 2 + 5).astype(np.float32)
             for n in rng.integers(1, 300, 80)]
    small[3][0] = np.nan  # first element of a leaf
    small[40][-1] = -np.inf  # last element of a leaf
    small[41][:] = 0
    return {"head": rng.standard_normal(chunk - 3).astype(np.float32),  # ends 3 before a chunk
            "big": big, "far": far, "small": small,
            "const": np.full(chunk + 9, 2.5, np.float32), "empty": np.zeros(0, np.float32),
            "nan": np.full(5, np.nan, np.float32), "tiny": np.float32(-7.0)}


def leaves(tree) -> dict:
    import jax
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(p): np.asarray(x) for p, x in flat}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_host_scan_matches_numpy_float64_at_chunk_boundaries(small_chunks, dtype):
    import jax
    import ml_dtypes

    tree = faulty_tree(np.random.default_rng(0), SMALL)
    if dtype != "float32":  # 16-bit floats: widened to float32 a chunk at a time
        tree = jax.tree.map(lambda x: np.asarray(x).astype(
            ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16), tree)
    packed = inspector.pack(tree)
    assert set(packed.buffers) == {dtype}
    s = inspector.scan(packed)
    for stats in s.leaves:
        assert_figures(stats, leaves(tree)[stats.path])
    assert s.leaf("['big']").nan == 2 and s.leaf("['big']").posinf == 1
    assert s.leaf("['big']").zeros == 39
    assert s.leaf("['small'][41]").zeros == s.leaf("['small'][41]").size
    paths = [x.path for x in s.nonfinite()]
    assert paths == ["['big']", "['nan']", "['small'][3]", "['small'][40]"]


def test_host_scan_agrees_with_the_device_kernel(small_chunks, monkeypatch):
    tree = faulty_tree(np.random.default_rng(1), SMALL)
    packed = inspector.pack(tree)
    host = inspector.scan(packed)
    monkeypatch.setattr(scan_module, "_on_host", lambda *a: False)
    device = inspector.scan(packed)
    for a, b in zip(host.leaves, device.leaves, strict=True):
        assert (a.nan, a.posinf, a.neginf, a.zeros, a.size) == \
            (b.nan, b.posinf, b.neginf, b.zeros, b.size), a.path
        for k in ("min", "max", "max_abs"):
            assert getattr(a, k) == pytest.approx(getattr(b, k), rel=0, nan_ok=True), (a.path, k)


def test_host_scan_of_a_leaf_over_several_full_chunks():
    """The real chunk size: a leaf of 2.5 chunks (a segment a chunk), far
    from zero in its second half (summed again about its mean), NaN on a boundary."""
    chunk = host_scan.CHUNK
    rng = np.random.default_rng(2)
    x = rng.standard_normal(5 * chunk // 2).astype(np.float32)
    y = (300 + rng.standard_normal(chunk + 1234)).astype(np.float32)
    y[chunk] = np.nan
    tree = {"x": x, "y": y, "z": np.zeros(chunk, np.float32)}
    s = inspector.scan(inspector.pack(tree))
    for stats in s.leaves:
        assert_figures(stats, tree[stats.path[2]])


@pytest.mark.parametrize("size", [3, SMALL])  # a piece of a chunk, a whole chunk
def test_squares_that_overflow_float32_are_summed_in_float64(small_chunks, size):
    x = np.resize(np.array([3e38, -3e38, 3e38, 1.0], np.float32), size)
    tree = {"huge": x, "ones": np.ones(3, np.float32)}
    s = inspector.scan(inspector.pack(tree))
    assert_figures(s.leaf("['huge']"), x)
    assert_figures(s.leaf("['ones']"), tree["ones"])


def test_segments_cut_at_leaves_and_chunks(small_chunks):
    points, start, stop = host_scan.segments(np.array([0, 10, 10, 5000]),
                                             np.array([10, 0, 4990, 5]), 5005)
    assert points.tolist() == [0, 10, SMALL, 5000, 5005]
    assert start.tolist() == [0, 1, 1, 3] and stop.tolist() == [1, 1, 3, 4]


def test_plain_trees_use_exact_host_buffers(small_chunks):
    """A plain tree is gathered into host buffers of its own length on the CPU (no padding
    to a power of two to reduce)."""
    tree = faulty_tree(np.random.default_rng(3), SMALL)
    s = inspector.scan(tree)
    for stats in s.leaves:
        assert_figures(stats, leaves(tree)[stats.path])


def test_many_small_random_leaves_of_every_sign(small_chunks):
    """Many small random leaves (the integer min/max of `decode_min_max`): all negative, all
    positive, mixed, -0.0 and +0.0 together, NaN of either sign, -Inf, +Inf."""
    rng = np.random.default_rng(3)
    small = []
    for i, n in enumerate(rng.integers(1, 70, 600)):
        x = rng.standard_normal(int(n)).astype(np.float32) * np.float32(10.0 ** (i % 7 - 3))
        small.append(-np.abs(x) if i % 3 == 0 else np.abs(x) if i % 3 == 1 else x)
    small[5][:] = -0.0
    small[6][:] = 0.0
    small[6][0] = -0.0
    small[9][-1] = -0.0
    small[10][0] = np.float32(-np.nan) if np.signbit(np.float32(-np.nan)) else \
        -np.abs(np.float32(np.nan))
    small[11][-1] = np.nan
    small[12][0] = -np.inf
    small[13][-1] = np.inf
    small[15] = np.array([-np.inf, np.inf] * 3, np.float32)
    s = inspector.scan(inspector.pack({"small": small}))
    ref = leaves({"small": small})
    for stats in s.leaves:
        assert_figures(stats, ref[stats.path])
    assert s.leaf("['small'][5]").zeros == s.leaf("['small'][5]").size
    assert s.leaf("['small'][0]").max < 0 < s.leaf("['small'][1]").min
    assert [x.path for x in s.nonfinite()] == [f"['small'][{i}]" for i in (10, 11, 12, 13, 15)]


def test_large_leaves_inside_a_chunk_of_several():
    """The real chunk size, one chunk holding small leaves and leaves of 1/16 of a chunk and
    more (over several blocks of the pass): one with NaN and -Inf, one far from zero (summed
    again about its mean), one with +0.0 and -0.0 among random values, one constant; figures
    against NumPy float64."""
    big = host_scan.CHUNK // 16
    rng = np.random.default_rng(4)
    bad = rng.standard_normal(big + 5).astype(np.float32)
    bad[[7, big]] = [np.nan, -np.inf]
    signed = rng.standard_normal(big + 1000).astype(np.float32)
    signed[[3, 500, -1]] = [0.0, -0.0, -0.0]
    tree = {"a": rng.standard_normal(100).astype(np.float32), "bad": bad,
            "b": rng.standard_normal(7).astype(np.float32),
            "far": (1000 + rng.standard_normal(2 * big + 3)).astype(np.float32),
            "signed": signed, "const": np.full(big, -1.5, np.float32),
            "c": np.zeros(3, np.float32)}
    packed = inspector.pack(tree)
    assert packed.nbytes < 4 * host_scan.CHUNK  # all in the first chunk
    s = inspector.scan(packed)
    for stats in s.leaves:
        assert_figures(stats, tree[stats.path[2:-2]])
    assert s.leaf("['signed']").zeros == 3 and s.leaf("['bad']").nan == 1
    assert [x.path for x in s.nonfinite()] == ["['bad']"]


def test_zeros_are_counted_in_every_block_that_holds_one():
    """The pass counts zeros only in a block whose least |x| bits are 0: zeros (+0.0 and
    -0.0) at a block's first and last element, in one block of many, in every block, and
    none; against NumPy's counts, with min and max (the least |x| bits stand for the uint32
    minimum: one-signed leaves, a leaf of zeros only)."""
    from inspector.core.health import scan_loops

    block = scan_loops.BLOCK
    rng = np.random.default_rng(8)
    leaves_ = {}
    for name, n in (("edges", 5 * block), ("one", 7 * block + 3), ("all", 3 * block + 1),
                    ("none", 4 * block), ("positive", 2 * block + 5),
                    ("negative", 2 * block + 7), ("zeros_only", block + 1)):
        leaves_[name] = rng.standard_normal(n).astype(np.float32)
    edges = leaves_["edges"]
    edges[[0, block - 1, block, 2 * block - 1, 4 * block]] = [0.0, -0.0, 0.0, -0.0, 0.0]
    leaves_["one"][3 * block + 17] = -0.0
    leaves_["all"][::block // 2] = 0.0
    leaves_["none"][leaves_["none"] == 0] = 1.0
    leaves_["positive"] = np.abs(leaves_["positive"]) + 0.5
    leaves_["positive"][block + 2] = 0.0  # the least |x| is a zero: min 0.0
    leaves_["negative"] = -np.abs(leaves_["negative"]) - 0.5
    leaves_["zeros_only"][:] = -0.0
    s = inspector.scan(inspector.pack(leaves_))
    for name, x in leaves_.items():
        stats = s.leaf(f"['{name}']")
        assert stats.zeros == int((x == 0).sum()), name
        assert (stats.min, stats.max) == (float(x.min()), float(x.max())), name
    assert s.leaf("['none']").zeros == 0 and s.leaf("['all']").zeros == 7
    assert s.leaf("['negative']").max < 0 and s.leaf("['positive']").min == 0.0
