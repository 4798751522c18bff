"""Leaf figures combined into a subtree's: counts summed, norms combined, min/max over all,
mean and std from the leaves' (count, mean, M2) (Chan et al.'s parallel combine, float64)."""

from __future__ import annotations

import math

from inspector.core.health.leaf_stats import LeafStats


def combine(path: str, members) -> LeafStats:
    """Returns one `LeafStats` for `members` (LeafStats) taken as one vector."""
    dtypes = {s.dtype for s in members}
    finite = [(s.size - s.nonfinite, s) for s in members]
    n = sum(k for k, _ in finite)
    total = sum(k * s.mean for k, s in finite if k)
    mean = total / n if n else math.nan
    m2 = sum(k * s.std ** 2 + k * (s.mean - mean) ** 2 for k, s in finite if k)
    lows = [s.min for k, s in finite if k]
    highs = [s.max for k, s in finite if k]
    return LeafStats(
        path, dtypes.pop() if len(dtypes) == 1 else "mixed", None,
        sum(s.size for s in members), sum(s.nan for s in members),
        sum(s.posinf for s in members), sum(s.neginf for s in members),
        sum(s.zeros for s in members), min(lows, default=math.nan), max(highs, default=math.nan),
        mean, math.sqrt(m2 / n) if n else math.nan,
        math.sqrt(sum(s.l2 ** 2 for s in members)),
        max((s.max_abs for k, s in finite if k), default=math.nan))
