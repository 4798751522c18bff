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
    rows = np.asarray(rows)
    n = rows[:, N].astype(np.float64)
    has = n > 0
    safe = np.where(has, n, 1.0)
    sum_d = rows[:, SUM_D].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        total = np.where(has, n * rows[:, SHIFT] + sum_d, 0.0)
        m2_rows = np.where(has, np.maximum(rows[:, SUM_DD] - sum_d ** 2 / safe, 0.0), 0.0)
        columns = [n, total, m2_rows, np.where(has, total ** 2 / safe, 0.0),
                   rows[:, ZEROS].astype(np.float64)]
    # NaN/Inf counts are summed only where some row has them (most scans: none)
    columns += [rows[:, k].astype(np.float64) if rows[:, k].any() else None
                for k in (NAN, POSINF, NEGINF)]
    bounds, none = _bounds(start, stop)
    lows = np.where(has, rows[:, MIN], np.inf)
    highs = np.where(has, rows[:, MAX], -np.inf)
    lo = _run(np.minimum, lows, bounds, none, np.inf)
    hi = _run(np.maximum, highs, bounds, none, -np.inf)
    acc = [_run(np.add, c, bounds, none, 0.0) if c is not None else np.zeros(len(start))
           for c in columns]
    for k in range(pieces.shape[1] if pieces.size else 0):
        # each leaf's piece rows added column by column (a gather of the few piece rows, not
        # a stacked copy of every row)
        who = np.flatnonzero(pieces[:, k] >= 0)
        idx = pieces[who, k]
        for a_col, c in zip(acc, columns, strict=True):
            if c is not None:
                a_col[who] += c[idx]
        lo[who] = np.minimum(lo[who], lows[idx])
        hi[who] = np.maximum(hi[who], highs[idx])
    acc = np.stack(acc, axis=1)
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


def _bounds(start: np.ndarray, stop: np.ndarray):
    """`(bounds, none)` for `_run`: the runs' `[start, stop)` interleaved for `reduceat`
    (a stop at the last row points at `_run`'s padding row), and which runs are empty."""
    start, stop = np.asarray(start, np.int64), np.asarray(stop, np.int64)
    none = stop <= start
    # empty runs sit where the last run ended: the bounds rise, so reduceat's in-between
    # ranges stay short (a bound of 0 after a high one would reduce everything between)
    floor = np.maximum.accumulate(np.where(none, 0, stop)) if len(stop) else stop
    bounds = np.empty(2 * len(start), np.int64)
    bounds[0::2] = np.where(none, floor, start)
    bounds[1::2] = np.where(none, floor, stop)
    return bounds, none


def _run(ufunc, values: np.ndarray, bounds: np.ndarray, none: np.ndarray, empty: float):
    """`ufunc.reduce(values[start[i]:stop[i]])` for every run i of `_bounds` (`empty` where
    the run is empty), one contiguous column at a time (faster than a strided 2-D reduceat)."""
    if not len(none):
        return np.zeros(0)
    padded = np.concatenate([values, [empty]])
    out = ufunc.reduceat(padded, bounds)[0::2].astype(np.float64)
    out[none] = empty
    return out
