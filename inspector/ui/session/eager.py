"""Un-jitted references, timed beside the compiled run on request (each op's settings class
writes its own as plain `jax.tree.map` calls: what users write by hand).

Timing it beside the compiled run shows what compiling once per structure (and packing leaves
into one buffer) buys. Inputs are placed on the device first, so only the op itself is timed,
each call ended by `block_until_ready`.
"""

from __future__ import annotations

import statistics
import time

import jax
import numpy as np

import inspector


def place(tree, device):
    """`tree` (unpacked) on `device`, for an eager reference to work on."""
    if isinstance(tree, inspector.PackedTree):
        tree = tree.unpack()
    return jax.device_put(tree, inspector.resolve_device(device))


def time_eager(call, repeats: int = 3, warmup: int = 1) -> tuple[float, object]:
    """Returns `(median seconds, result)` of `call()` over `repeats` timed calls."""
    result = None
    for _ in range(warmup):
        result = jax.block_until_ready(call())
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        result = jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def max_abs_diff(result, reference) -> float:
    """max |a - b| over the leaves of two trees of equal structure (0.0 for no leaves), as
    `inspector.diff(values=True)` measures it (`leaf_value_stats`): NaN when NaNs sit in
    different places."""
    from inspector.core.diff.values import leaf_value_stats

    if isinstance(result, inspector.PackedTree):
        result = result.unpack()
    pairs = [(x, y) for x, y in zip(jax.tree.leaves(result), jax.tree.leaves(reference),
                                    strict=True) if np.size(x)]
    worst = [s.max_abs for s in leaf_value_stats(pairs)]
    return float("nan") if any(np.isnan(worst)) else max(worst, default=0.0)
