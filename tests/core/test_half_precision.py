"""Half-precision leaves are computed in float32 and cast back once: exactly, not "close".

Each op's result on float16 / bfloat16 leaves must be the half-type rounding of a float32
computation of its formula. Per element, the exact (float64) value is widened by a few float32
ulps of its terms (float32's own roundings, fused multiply-adds included: XLA's CPU backend
fuses `w * x + total`, so 626 of 4096 float32 weighted sums differ from NumPy's unfused ones
in the last bit); the result must be a half value that interval rounds to: one value for all
but a few elements (checked), neighbours where the interval straddles a rounding boundary.
The inputs are chosen so the same formula run wholly in the half type (what an op that forgot
to widen computes) misses that set in many elements (checked): such an op fails, where a
tolerance of an ulp or two of the half type would let it pass.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import inspector

HALF = [np.float16, ml_dtypes.bfloat16]
SIZE = 4096
WEIGHTS = [0.31, 0.47, 0.22]
_ULPS = 4 * float(np.finfo(np.float32).eps)  # bounds float32's roundings in these formulas


def _inputs(dtype, n: int, seed: int = 11):
    rng = np.random.default_rng(seed)
    base = (3 * rng.standard_normal(SIZE)).astype(dtype)
    trees = [(base.astype(np.float32) + rng.standard_normal(SIZE)).astype(dtype)
             for _ in range(n)]
    return base, trees


def _f64(values):
    return [np.float64(np.float32(v)) for v in values]  # the float32 weights the kernels get


def _weighted(xs, weights, compute):
    """`w_0 x_0 + w_1 x_1 + ...` left to right, every product and sum rounded to `compute`."""
    ws = [compute(w) for w in weights]
    total = ws[0] * xs[0].astype(compute)
    for w, x in zip(ws[1:], xs[1:], strict=True):
        total = (total + w * x.astype(compute)).astype(compute)
    return total


def _linear(xs, weights, compute):
    divisor = compute(0)
    for w in weights:
        divisor = compute(divisor + compute(w))
    return (_weighted(xs, weights, compute) / divisor).astype(compute)


def _task_arithmetic(base, xs, weights, lam, compute):
    b = base.astype(compute)
    deltas = [(x.astype(compute) - b).astype(compute) for x in xs]
    return (b + compute(lam) * _weighted(deltas, weights, compute)).astype(compute)


def _rounded_once(exact, scale, dtype):
    """The half values a float32 computation of `exact` (its terms' size `scale`) may round
    to: those from `low` to `high`, one value except where the interval straddles a rounding
    boundary (rounding is monotone)."""
    low = (exact - _ULPS * scale).astype(np.float32).astype(dtype)
    high = (exact + _ULPS * scale).astype(np.float32).astype(dtype)
    return low, high


def _assert_float32_then_cast(got, allowed, half_only, dtype):
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype)
    low, high = allowed
    assert np.mean(low != high) < 0.01, "the float32 interval is too wide to tell anything"
    outside = lambda x: (x < low) | (x > high)  # noqa: E731
    assert np.mean(outside(half_only)) > 0.05, "the inputs do not tell the two apart"
    bad = np.flatnonzero(outside(got))
    assert bad.size == 0, (
        f"{bad.size} of {SIZE} elements are not the float32 result cast once, e.g. element "
        f"{bad[0]}: {got[bad[0]]}, not {low[bad[0]]}; {np.mean(got == half_only):.1%} equal "
        f"a computation in {np.dtype(dtype).name} alone")


@pytest.mark.parametrize("packed", [False, True], ids=["tree", "packed"])
@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
def test_weighted_sum(dtype, packed):
    _, xs = _inputs(dtype, 3)
    trees = [{"w": x} for x in xs]
    if packed:
        trees = [inspector.pack(t) for t in trees]
    out = inspector.weighted_sum(trees, WEIGHTS)
    out = out.unpack() if packed else out
    terms = [w * x.astype(np.float64) for w, x in zip(_f64(WEIGHTS), xs, strict=True)]
    allowed = _rounded_once(sum(terms), sum(np.abs(t) for t in terms), dtype)
    _assert_float32_then_cast(out["w"], allowed, _weighted(xs, WEIGHTS, dtype), dtype)


@pytest.mark.parametrize("packed", [False, True], ids=["tree", "packed"])
@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
def test_merge_linear(dtype, packed):
    _, xs = _inputs(dtype, 3)
    trees = [{"w": x} for x in xs]
    if packed:
        trees = [inspector.pack(t) for t in trees]
    out = inspector.merge("linear", trees, weights=WEIGHTS)
    out = out.unpack() if packed else out
    ws = _f64(WEIGHTS)
    terms = [w * x.astype(np.float64) for w, x in zip(ws, xs, strict=True)]
    allowed = _rounded_once(sum(terms) / sum(ws), sum(np.abs(t) for t in terms) / sum(ws), dtype)
    _assert_float32_then_cast(out["w"], allowed, _linear(xs, WEIGHTS, dtype), dtype)


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
def test_merge_task_arithmetic(dtype):
    base, xs = _inputs(dtype, 3, seed=12)
    weights, lam = [0.53, 0.91, -0.37], 0.73
    out = inspector.merge("task_arithmetic", [{"w": x} for x in xs], base={"w": base},
                          weights=weights, lam=lam)
    b = base.astype(np.float64)
    ws, (lam64,) = _f64(weights), _f64([lam])
    exact = b + lam64 * sum(w * (x - b) for w, x in zip(ws, xs, strict=True))
    scale = np.abs(b) + abs(lam64) * sum(abs(w) * np.abs(x - b)  # x - b: exact in float32
                                         for w, x in zip(ws, xs, strict=True))
    half = _task_arithmetic(base, xs, weights, lam, dtype)
    _assert_float32_then_cast(out["w"], _rounded_once(exact, scale, dtype), half, dtype)
