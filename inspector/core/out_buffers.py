"""Output buffers: an op's result written into a buffer the caller gives up, not a fresh one.

A weight change in the app computes a result as large as the one it replaces. Allocating it
afresh holds both at once (twice the output in memory), and XLA's fresh buffers over 32 MiB
fault on first touch (an elementwise op then runs at a third of the memory bandwidth). Inside
`donating(buffers)`, a packed op that needs an output buffer takes one of `buffers` of the
same shape, dtype and placement instead (`output_buffer`), and donates it to its kernel: the
new result lands in the old one's memory. The caller must not use the given buffers again.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core import caches
from inspector.core.lazy import LazyArray

_POOL = threading.local()  # per thread: an op plans and runs in the thread that asked

DONATE_BYTES = 1 << 16
"""Outputs of a leaf this large are written into a donated buffer on plain (unpacked) trees
too: fresh ones fault on first touch here well below XLA's 32 MiB (a plain stack of 5.5 MB
leaves ran at 3.5 GB/s; a batch of sixteen fresh 0.28 MB outputs at 8 GB/s). Donated calls
batch like the others, so the bar is low: on a 1e7-parameter transformer-like tree (leaves of
0.07-1.1 MB, two models), the weighted sum ran at 0.82-0.87 of the reference copy with 64 KiB,
0.77-0.83 with 256 KiB and 0.56-0.62 with 1 MiB (interleaved runs of
`benchmarks/bench_ops.py`'s case, 2026-11-25). Smaller outputs (biases, norms) are fresh."""


@contextmanager
def donating(buffers: Iterable[jax.Array]) -> Iterator[None]:
    """Within the block, ops in this thread may write their outputs into `buffers`.

    >>> import numpy as np
    >>> from inspector import pack, weighted_sum
    >>> a = pack({"w": np.ones(4, np.float32)})
    >>> old = weighted_sum([a, a], [1.0, 1.0])
    >>> with donating(old.buffers.values()):
    ...     new = weighted_sum([a, a], [2.0, 1.0])
    >>> new.unpack()["w"].tolist(), old.buffers["float32"].is_deleted()
    ([3.0, 3.0, 3.0, 3.0], True)
    """
    previous = getattr(_POOL, "buffers", None)
    pool: dict[tuple, list[jax.Array]] = {}  # by (shape, dtype): a tree's leaves, found at once
    for b in buffers:
        if isinstance(b, jax.Array) and not b.is_deleted():
            pool.setdefault((b.shape, np.dtype(b.dtype)), []).append(b)
    _POOL.buffers = pool
    try:
        yield
    finally:
        _POOL.buffers = previous


def worth_donating(nbytes: int, inputs) -> bool:
    """Whether a plain leaf's output of `nbytes` goes into a donated buffer: a large output of
    arrays already in memory (lazy checkpoint leaves stream, output by output: a buffer made
    for each in advance would hold the whole result at once)."""
    return nbytes >= DONATE_BYTES and not any(isinstance(x, LazyArray) for x in inputs)


def output_buffer(shape: tuple[int, ...], dtype, where) -> jax.Array:
    """Returns a buffer for an output of `shape` and `dtype` on `where` (a device or a
    sharding) to donate to a kernel: a matching one given to `donating`, else zeros."""
    shape, dtype = tuple(shape), np.dtype(dtype)
    buffer = pooled(shape, dtype, where)
    if buffer is not None:
        return buffer
    if isinstance(where, jax.Device) and math.prod(shape) * dtype.itemsize < FILL_BYTES:
        return jax.device_put(np.zeros(shape, dtype), where)  # a copy: never NumPy's memory
    return _zeros(shape, dtype, where)()


def pooled(shape: tuple[int, ...], dtype, where) -> jax.Array | None:
    """A buffer of `shape` and `dtype` on `where` given to `donating` (taken from it), or
    None: no fill (a host call, which makes its own output, asks this)."""
    pool = (getattr(_POOL, "buffers", None) or {}).get((tuple(shape), np.dtype(dtype)), [])
    for i, buffer in enumerate(pool):
        if _placed(buffer, where) and not buffer.is_deleted():
            return pool.pop(i)
    return None


def _placed(buffer: jax.Array, where) -> bool:
    if isinstance(where, jax.Device):
        return buffer.sharding.device_set == {where}
    return buffer.sharding.is_equivalent_to(where, buffer.ndim)


FILL_BYTES = 1 << 22
"""Zeros for an output smaller than this are a copy of NumPy zeros: a compiled fill costs
~30 ms of compilation per shape here (most of a plain tree's first call, with a shape per
leaf); larger ones are filled where they live (no host copy, no host memory)."""


def warm_fill(shape: tuple[int, ...], dtype, where) -> None:
    """Compiles the fill `output_buffer` uses for a fresh output of `shape` and `dtype` on
    `where` (when it uses one), allocating nothing: a server warming a run it expects."""
    shape, dtype = tuple(shape), np.dtype(dtype)
    if not isinstance(where, jax.Device) or math.prod(shape) * dtype.itemsize >= FILL_BYTES:
        _zeros(shape, dtype, where)


@functools.lru_cache(maxsize=256)
def _zeros(shape: tuple[int, ...], dtype: np.dtype, where):
    # One fill per (shape, dtype, placement), compiled ahead of time (so `warm_fill` can
    # compile it without running it): eager `jnp.zeros` dispatches two primitives
    # (0.5-1 ms), most of a cached packed op's call on a 20,000-leaf tree.
    sharding = jax.sharding.SingleDeviceSharding(where) if isinstance(where, jax.Device) \
        else where
    return jax.jit(lambda: jnp.zeros(shape, dtype), out_shardings=sharding).lower().compile()


caches.register_function("output fills", _zeros)
