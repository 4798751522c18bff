"""The timeline's device kernel: one leaf at one step against the same leaf a step before.

Eight figures in one read of both leaves: `sum b^2`, `max |b|` and the NaN/Inf count of `b`
(finite elements only in the sums), then `sum (b - a)^2`, `sum a^2`, `<a, b>`, `sum b^2` over
elements finite in both, and how many elements differ bit for bit. Like the scan's kernel
(kernels.py), the fast path materialises each operand in cache-sized chunks and reduces it
alone (XLA's CPU backend runs fused multi-operand reductions several times slower); a leaf
with NaN/Inf makes a figure non-finite, and the leaf is reduced again by the careful path.
"""

from __future__ import annotations

from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np

_bar = jax.lax.optimization_barrier
CHUNK = 1 << 14  # elements per step: 1 << 16 measured 1.5x slower (operands leave the cache)
N_FIGURES = 8
SUM_SQ, MAX_ABS, NONFINITE, DIFF_SQ, PREV_SQ, DOT, CHANGED, NOW_SQ = range(N_FIGURES)


def _bits(x):
    if x.dtype == jnp.bool_:
        return x
    width = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[x.dtype.itemsize]
    return jax.lax.bitcast_convert_type(x, width)


def _fast(a, b, f):
    changed = jnp.sum(_bar((_bits(a) != _bits(b)).astype(f)))
    a, b = _bar((a.astype(f), b.astype(f)))
    d = _bar(b - a)
    sum_sq = jnp.sum(_bar(b * b))
    out = [sum_sq, jnp.max(_bar(jnp.abs(b))), jnp.zeros((), f),
           jnp.sum(_bar(d * d)), jnp.sum(_bar(a * a)), jnp.sum(_bar(a * b)), changed, sum_sq]
    return jnp.stack(out)


def _careful(a, b, f):
    changed = jnp.sum((_bits(a) != _bits(b)).astype(f))
    a, b = a.astype(f), b.astype(f)
    fb = jnp.isfinite(b)
    both = fb & jnp.isfinite(a)
    b0 = jnp.where(fb, b, 0)
    a1, b1 = jnp.where(both, a, 0), jnp.where(both, b, 0)
    d = b1 - a1
    return jnp.stack([jnp.sum(b0 * b0), jnp.max(jnp.abs(b0)), jnp.sum((~fb).astype(f)),
                      jnp.sum(d * d), jnp.sum(a1 * a1), jnp.sum(a1 * b1), changed,
                      jnp.sum(b1 * b1)])


def _combine(x, y):
    return jnp.stack([x[0] + y[0], jnp.maximum(x[1], y[1]), *(x[2:] + y[2:])])


@lru_cache(maxsize=128)
def careful_kernel(size: int, dtype: str, work: str):
    """Returns the jitted careful `f(a, b) -> 8 figures` (NaN/Inf counted, left out of the
    sums): called only when the fast kernel's figures are not finite."""
    f = np.dtype(work)
    return jax.jit(lambda a, b: _careful(a.reshape(-1), b.reshape(-1), f))


@lru_cache(maxsize=128)
def step_kernel(size: int, dtype: str, work: str):
    """Returns the jitted fast `f(a, b) -> 8 figures` for two leaves of `size` elements of
    `dtype` (one compile per distinct size and dtype); figures that come out non-finite mean
    NaN/Inf in a leaf: then `careful_kernel` tells them apart (a `cond` in the loop doubled
    its time)."""
    f = np.dtype(work)
    n_chunks = size // CHUNK

    def kernel(a, b):
        a, b = a.reshape(-1), b.reshape(-1)
        acc = jnp.zeros(N_FIGURES, f)
        if n_chunks:
            def step(i, acc):
                start = (i * CHUNK,)
                return _combine(acc, _fast(jax.lax.dynamic_slice(a, start, (CHUNK,)),
                                           jax.lax.dynamic_slice(b, start, (CHUNK,)), f))

            acc = jax.lax.fori_loop(0, n_chunks, step, acc)
        if size > n_chunks * CHUNK:
            acc = _combine(acc, _fast(a[n_chunks * CHUNK:], b[n_chunks * CHUNK:], f))
        return acc

    return jax.jit(kernel)
