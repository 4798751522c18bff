"""Leaf figures combined into a subtree's: counts summed, norms combined, min/max over all,
mean and std from the leaves' (count, mean, M2) (Chan et al.'s parallel combine, float64)."""

from __future__ import annotations

import math

import numpy as np

from inspector.core.health.leaf_stats import LeafStats

_COUNTS = ("size", "nan", "posinf", "neginf", "zeros")
_VALUES = ("min", "max", "mean", "std", "l2", "max_abs")


def columns(leaves) -> dict[str, np.ndarray]:
    """The leaves' figures as one array per field (built once per scan)."""
    if not leaves:
        return {k: np.zeros(0) for k in (*_COUNTS, *_VALUES, "dtype")}
    fields = list(zip(*leaves, strict=True))
    out = {k: np.asarray(fields[LeafStats._fields.index(k)], np.int64) for k in _COUNTS}
    out.update({k: np.asarray(fields[LeafStats._fields.index(k)], np.float64) for k in _VALUES})
    out["dtype"] = np.asarray(fields[LeafStats._fields.index("dtype")], object)
    return out


def combine(path: str, cols: dict[str, np.ndarray], start: int, stop: int) -> LeafStats:
    """Returns one `LeafStats` for leaves `[start, stop)` of `cols` taken as one vector."""
    c = {k: v[start:stop] for k, v in cols.items()}
    dtypes = set(c["dtype"].tolist())
    k = c["size"] - c["nan"] - c["posinf"] - c["neginf"]
    has = k > 0
    n = int(k.sum())
    mean = float((k[has] * c["mean"][has]).sum()) / n if n else math.nan
    m2 = float((k[has] * (c["std"][has] ** 2 + (c["mean"][has] - mean) ** 2)).sum())
    return LeafStats(
        path, dtypes.pop() if len(dtypes) == 1 else "mixed", None,
        *(int(c[name].sum()) for name in _COUNTS),
        float(c["min"][has].min()) if n else math.nan,
        float(c["max"][has].max()) if n else math.nan,
        mean, math.sqrt(m2 / n) if n else math.nan, math.sqrt(float((c["l2"] ** 2).sum())),
        float(c["max_abs"][has].max()) if n else math.nan)
