"""The timeline's numba pass (`step_loops.pair_sums`, through `host_step.host_steps`) against
NumPy float64: block and chunk boundaries, unchanged and one-element changes, signed zeros,
NaN/Inf (non-finite sums, then the careful kernel's figures), a leaf with a large mean."""

from __future__ import annotations

import subprocess
import sys

import jax
import numpy as np
import pytest

import inspector
from inspector.core.health import host_step


def reference(a: np.ndarray, b: np.ndarray) -> list[float]:
    """The 8 figures of `b` against `a` in float64 (finite leaves)."""
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    changed = np.count_nonzero(a.view(np.uint32) != b.view(np.uint32))
    return [y @ y, np.abs(y).max(), 0, (y - x) @ (y - x), x @ x, x @ y, changed, y @ y]


def pass_sums(a: np.ndarray, b: np.ndarray, lo: int, hi: int):
    """`pair_sums` called directly on `[lo, hi)`: `(sums, max |b|)`."""
    from inspector.core.health import step_loops

    sums, tops = np.zeros((1, step_loops.N_SUMS)), np.zeros(1, np.uint32)
    step_loops.pair_sums(a.view(np.uint32), b.view(np.uint32), lo, hi, sums, tops, 0)
    return sums[0], float(tops.view(np.float32)[0])


@pytest.mark.parametrize("n", [1, 1023, 1025, 70000])
def test_pass_matches_numpy_float64_across_block_and_chunk_boundaries(n, monkeypatch):
    monkeypatch.setattr(host_step, "CHUNK", 2048)  # 70000: 35 chunks, split between threads
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(np.float32)
    b = a + np.float32(1e-3) * rng.standard_normal(n).astype(np.float32)
    b[: n // 3] = a[: n // 3]  # a third unchanged
    c = (rng.standard_normal(n) * 5).astype(np.float32)  # a bigger step
    got = host_step.host_steps([a, b, c], [False, True, True])
    np.testing.assert_allclose(got[0], reference(a, a), rtol=1e-6)  # no step before
    for row, (x, y) in zip(got[1:], [(a, b), (b, c)], strict=True):
        want = reference(x, y)
        np.testing.assert_allclose(row[[0, 3, 4, 7]], [want[k] for k in (0, 3, 4, 7)],
                                   rtol=1e-6)
        # <a, b> from the sums of squares: its error is a fraction of |a| |b| (b - a and b
        # are near orthogonal here: a relative error of <a, b> says nothing)
        assert abs(row[5] - want[5]) <= 1e-7 * np.sqrt(want[0] * want[4])
        assert row[1] == want[1] and row[2] == 0 and row[6] == want[6]
    # a range that starts and ends inside blocks, called directly
    lo, hi = n // 5, n - n // 7
    sums, top = pass_sums(a, c, lo, hi)
    want = reference(a[lo:hi], c[lo:hi])
    np.testing.assert_allclose(sums, [want[0], want[3], want[6]], rtol=1e-6)
    assert top == want[1]


def test_identical_pair_one_element_changed_and_signed_zeros():
    rng = np.random.default_rng(3)
    a = rng.standard_normal(5000).astype(np.float32)
    a[[10, 20]] = 0.0
    same = a.copy()
    one = a.copy()
    one[4321] += 1
    zeros = a.copy()
    zeros[[10, 20]] = -0.0  # equal as floats, different bits
    got = host_step.host_steps([a, same, one, zeros], [False, True, True, True])
    a64 = a.astype(np.float64)
    assert got[1, 3] == 0 and got[1, 6] == 0 and got[1, 5] == pytest.approx(a64 @ a64, 1e-7)
    rel = np.sqrt(got[1, 3] / got[1, 4])
    assert rel == 0
    assert got[2, 6] == 1 and got[2, 3] == pytest.approx(1.0, rel=1e-6)  # (a + 1 - a)^2
    assert got[3, 6] == 3  # element 4321 back, and the two zeros' sign bits
    assert got[3, 3] == pytest.approx(1.0, rel=1e-6)
    assert got[3, 1] == np.abs(zeros).max()


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_in_b_gives_non_finite_sums_then_the_careful_figures(bad):
    rng = np.random.default_rng(4)
    a = rng.standard_normal(3000).astype(np.float32)
    b = a + np.float32(1e-2) * rng.standard_normal(3000).astype(np.float32)
    b[[7, 2500]] = bad
    fast = host_step.host_steps([a, b], [False, True])
    assert np.isfinite(fast[0]).all() and not np.isfinite(fast[1, [0, 1, 3]]).any()
    # the timeline then reduces the pair with the careful kernel: NaN/Inf counted, left out
    t = inspector.timeline([{"w": a}, {"w": b}])
    ok = np.isfinite(b)
    x, y = a[ok].astype(np.float64), b[ok].astype(np.float64)
    assert t.sums["nonfinite"][0, 1] == 2
    assert t.sums["sum_sq"][0, 1] == pytest.approx(y @ y, rel=1e-5)
    assert t.sums["diff_sq"][0, 1] == pytest.approx((y - x) @ (y - x), rel=1e-5)
    assert t.sums["dot"][0, 1] == pytest.approx(x @ y, rel=1e-5)
    assert t.table("max_abs").values[0, 1] == np.abs(b[ok]).max()
    assert t.table("changed").values[0, 1] == np.count_nonzero(a != b) / b.size


@pytest.mark.skipif(jax.devices()[0].platform != "cpu",
                    reason="the host pass runs for the CPU (timeline.py: on_host)")
def test_large_mean_keeps_rel_change_and_cosine():
    """Elements 1e4 + noise, each changed by 1e-3 of itself: the squares are ~1e8 (float32
    block sums lose ~1e-7 of them), yet |b - a| is summed from exact differences and
    1 - cos (~5e-7) comes from sums whose errors cancel."""
    rng = np.random.default_rng(5)
    n = 70000
    a = (1e4 + rng.standard_normal(n)).astype(np.float32)
    b = (a * (1 + 1e-3 * rng.standard_normal(n))).astype(np.float32)
    t = inspector.timeline([{"w": a}, {"w": b}])
    x, y = a.astype(np.float64), b.astype(np.float64)
    assert t.table("rel_change").values[0, 1] == pytest.approx(
        np.linalg.norm(y - x) / np.linalg.norm(x), rel=1e-6)
    want = 1 - x @ y / np.linalg.norm(x) / np.linalg.norm(y)
    assert 1 - t.table("cosine").values[0, 1] == pytest.approx(want, rel=1e-4)
    assert t.table("l2").values[0, 1] == pytest.approx(np.linalg.norm(y), rel=1e-7)


def test_import_inspector_does_not_import_numba():
    """numba (~0.35 s) is imported by the first CPU reduction, not by `import inspector`."""
    probe = "import inspector, sys; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
