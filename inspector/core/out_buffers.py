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
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core.lazy import LazyArray

_POOL = threading.local()  # per thread: an op plans and runs in the thread that asked

DONATE_BYTES = 1 << 20
"""Outputs of a leaf this large are written into a donated buffer on plain (unpacked) trees
too: fresh ones fault on first touch here well below XLA's 32 MiB (a plain stack of 5.5 MB
leaves ran at 3.5 GB/s). Measured on 1.4-5.5 MB leaves held on the device, a weighted sum of
two ran at 20 GB/s with 4 MiB here, 25 GB/s with 1 MiB and 256 KiB; smaller outputs run in
batches instead (see `plan._schedule`), where a kernel call would cost more than the faults."""


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
    _POOL.buffers = [b for b in buffers if isinstance(b, jax.Array) and not b.is_deleted()]
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
    pool = getattr(_POOL, "buffers", None) or []
    for i, buffer in enumerate(pool):
        if buffer.shape == shape and buffer.dtype == dtype and _placed(buffer, where) \
                and not buffer.is_deleted():
            return pool.pop(i)
    return _zeros(shape, dtype, where)()


def _placed(buffer: jax.Array, where) -> bool:
    if isinstance(where, jax.Device):
        return buffer.sharding.device_set == {where}
    return buffer.sharding.is_equivalent_to(where, buffer.ndim)


@functools.lru_cache(maxsize=256)
def _zeros(shape: tuple[int, ...], dtype: np.dtype, where):
    # One compiled fill per (shape, dtype, placement): eager `jnp.zeros` dispatches two
    # primitives (0.5-1 ms), most of a cached packed op's call on a 20,000-leaf tree.
    sharding = jax.sharding.SingleDeviceSharding(where) if isinstance(where, jax.Device) \
        else where
    return jax.jit(lambda: jnp.zeros(shape, dtype), out_shardings=sharding)
