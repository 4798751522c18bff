"""Row partials to leaf figures, on the host in float64.

Each leaf is a run of whole rows `[start, stop)` of a partials table plus up to two piece rows;
rows combine as Chan et al.'s parallel variance does: sums of counts, of `n * mean` and of
`M2`, plus the spread of the row means, all reduced with `np.add.reduceat` (no running prefix
sums, whose cancellation would swamp a small leaf beside a big one).
"""

from __future__ import annotations

import numpy as np

# columns of a partials row (kernels.py)
N, SHIFT, SUM_D, SUM_DD, MIN, MAX, ZEROS, NAN, POSINF, NEGINF = range(10)


def leaf_figures(rows: np.ndarray, start: np.ndarray, stop: np.ndarray,
                 pieces: np.ndarray) -> dict[str, np.ndarray]:
    """Returns per-leaf arrays `n_finite, zeros, nan, posinf, neginf, min, max, mean, std, l2,
    max_abs` (float64; NaN where a leaf has no finite value).

    Args:
        rows: (R, 10) partials (kernels.py), any float dtype.
        start, stop: each leaf's run of whole rows (empty when equal).
        pieces: (L, 2) row indices of each leaf's extra rows, -1 for none.
    """
    rows = np.asarray(rows, np.float64)
    n = rows[:, N]
    with np.errstate(invalid="ignore", divide="ignore"):
        total = np.where(n > 0, n * rows[:, SHIFT] + rows[:, SUM_D], 0.0)
        m2 = np.where(n > 0, rows[:, SUM_DD] - rows[:, SUM_D] ** 2 / n, 0.0)
        spread = np.where(n > 0, total ** 2 / n, 0.0)
    sums = np.stack([n, total, np.maximum(m2, 0.0), spread, rows[:, ZEROS], rows[:, NAN],
                     rows[:, POSINF], rows[:, NEGINF]], axis=1)
    lows = np.where(n > 0, rows[:, MIN], np.inf)
    highs = np.where(n > 0, rows[:, MAX], -np.inf)
    acc = _runs(np.add, sums, start, stop, 0.0)
    lo = _runs(np.minimum, lows, start, stop, np.inf)
    hi = _runs(np.maximum, highs, start, stop, -np.inf)
    for k in range(pieces.shape[1] if pieces.size else 0):
        idx = pieces[:, k]
        has = idx >= 0
        acc[has] += sums[idx[has]]
        lo[has] = np.minimum(lo[has], lows[idx[has]])
        hi[has] = np.maximum(hi[has], highs[idx[has]])
    count, total, m2, spread = acc[:, 0], acc[:, 1], acc[:, 2], acc[:, 3]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / count, np.nan)
        # sum over rows of M2 plus the rows' means spread about the leaf's mean
        m2_leaf = np.maximum(m2 + spread - np.where(count > 0, total ** 2 / count, 0.0), 0.0)
        std = np.where(count > 0, np.sqrt(m2_leaf / count), np.nan)
        l2 = np.sqrt(m2_leaf + np.where(count > 0, total ** 2 / count, 0.0))
    empty = count == 0
    lo[empty], hi[empty] = np.nan, np.nan
    return {"n_finite": count, "zeros": acc[:, 4], "nan": acc[:, 5], "posinf": acc[:, 6],
            "neginf": acc[:, 7], "min": lo, "max": hi, "mean": mean, "std": std, "l2": l2,
            "max_abs": np.fmax(np.abs(lo), np.abs(hi)), "m2": m2_leaf, "sum": total}


def _runs(ufunc, values: np.ndarray, start: np.ndarray, stop: np.ndarray, empty: float):
    """`ufunc.reduce(values[start[i]:stop[i]])` for every i (`empty` where the run is empty)."""
    n_leaves = len(start)
    shape = (n_leaves,) + values.shape[1:]
    if not n_leaves:
        return np.zeros(shape)
    padded = np.concatenate([values, np.full((1,) + values.shape[1:], empty)])
    start, stop = np.asarray(start, np.int64), np.asarray(stop, np.int64)
    none = stop <= start
    # empty runs sit where the last run ended: the bounds rise, so reduceat's in-between
    # ranges stay short (a bound of 0 after a high one would reduce everything between)
    floor = np.maximum.accumulate(np.where(none, 0, stop))
    start = np.where(none, floor, start)
    stop = np.where(none, floor, stop)
    bounds = np.empty(2 * n_leaves, np.int64)
    bounds[0::2], bounds[1::2] = start, stop
    out = ufunc.reduceat(padded, bounds, axis=0)[0::2]
    out = np.array(out, np.float64)
    out[none] = empty
    return out
