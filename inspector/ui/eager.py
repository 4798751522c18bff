"""Un-jitted references: each op written as plain `jax.tree.map` calls, for the timing card.

This is what users write by hand; timing it beside the compiled run shows what compiling once
per structure (and packing leaves into one buffer) buys. Inputs are placed on the device
first, so only the op itself is timed, each call ended by `block_until_ready`.
"""

from __future__ import annotations

import functools
import operator
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import inspector


def _place(tree, device):
    if isinstance(tree, inspector.PackedTree):
        tree = tree.unpack()
    return jax.device_put(tree, inspector.resolve_device(device))


def eager_weighted_sum(trees, weights, device):
    """Returns a call computing `sum_k w_k * tree_k` with one eager op per leaf and term."""
    placed = [_place(t, device) for t in trees]

    def leaf(*xs):
        return functools.reduce(operator.add, (w * x for w, x in zip(weights, xs, strict=True)))

    return lambda: jax.tree.map(leaf, *placed)


def eager_index(tree, index_tree, device):
    """Returns a call indexing every leaf eagerly (`x[idx]`) with its subtree's index."""
    placed = _place(tree, device)

    def subtree(text, sub):
        if text is None:
            return sub
        idx = inspector.parse_index(text)
        return jax.tree.map(lambda x: x[idx], sub)

    return lambda: jax.tree.map(subtree, index_tree, placed, is_leaf=lambda x: x is None)


def eager_stack(trees, device):
    """Returns a call stacking the trees leaf by leaf with `jnp.stack`."""
    placed = [_place(t, device) for t in trees]
    return lambda: jax.tree.map(lambda *xs: jnp.stack(xs), *placed)


def eager_unstack(tree, device):
    """Returns a call splitting every leaf along axis 0 (`x[i]` per leaf and tree)."""
    placed = _place(tree, device)
    k = jax.tree.leaves(placed)[0].shape[0]
    return lambda: [jax.tree.map(lambda x, i=i: x[i], placed) for i in range(k)]


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
    """max |a - b| over the leaves of two trees of equal structure (0.0 for no leaves)."""
    if isinstance(result, inspector.PackedTree):
        result = result.unpack()
    a, b = jax.tree.leaves(result), jax.tree.leaves(reference)
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if x.size:
            d = np.abs(x.astype(np.float64) - y.astype(np.float64))
            worst = max(worst, float(np.nanmax(d)) if not np.all(np.isnan(d)) else 0.0)
    return worst
