"""Output buffers reused along a streamed op (issue 26: streamed outputs at the floor).

A streamed op (`weighted_sum(..., out=)`) computes one output leaf per call and hands it to
the writer. Each kernel allocating its output afresh faults 300 MB of new memory in, page by
page, for a 300 MB file. Instead, a streamed plan's call takes an `OutputSlot` as its donated
first argument; `SlotPool` puts a device buffer of that shape in it at run time, and the result
(in that buffer's memory, donated) is handed out as a NumPy view. When the view (and whatever
was made from it: the writer's bytes) is gone, the result goes back to the pool, and the next
call of that shape writes into the same memory.

If a view is still alive when its buffer is given again (a reader kept the array), JAX does not
donate a buffer NumPy still references: that call gets a fresh output, as before.
"""

from __future__ import annotations

import math
import mmap
import threading
import weakref

import jax
import numpy as np

from inspector.core.lazy import LazyArray
from inspector.core.out_buffers import output_buffer


class OutputSlot(LazyArray):
    """Stands for a donated output buffer of `shape` and `dtype` in a streamed call's args.

    Run outside a stream (a plan executed whole), it reads as zeros, like `output_buffer`.
    """

    __slots__ = ()

    def __init__(self, shape: tuple[int, ...], dtype):
        super().__init__(shape, dtype, lambda: np.zeros(shape, dtype), source="output buffer")


def _untouched(shape: tuple[int, ...], dtype: np.dtype, device) -> jax.Array:
    """A first buffer of a shape on the CPU: an anonymous mapping never touched, used by JAX as
    it is. XLA writes that call's output afresh (it does not reuse memory it does not own);
    the output is what comes back to the pool. No fill is compiled (`output_buffer` compiles
    one per shape, 30 ms each in a fresh process) and no page is faulted in."""
    nbytes = max(1, math.prod(shape) * dtype.itemsize)
    host = np.frombuffer(mmap.mmap(-1, nbytes), np.uint8)[: math.prod(shape) * dtype.itemsize]
    return jax.device_put(host.view(dtype).reshape(shape), device, may_alias=True)


class SlotPool:
    """Device buffers for a stream's `OutputSlot`s: at most `KEEP` kept per shape and dtype.

    >>> pool = SlotPool(jax.devices("cpu")[0])
    >>> buffer = pool.take(OutputSlot((2,), np.float32))
    >>> view = pool.lend(buffer + 1)
    >>> del view
    >>> len(pool._free[((2,), np.dtype("float32"))])
    1
    """

    KEEP = 4

    def __init__(self, device):
        self.device = device
        self._free: dict[tuple, list[jax.Array]] = {}
        self._lock = threading.Lock()
        self.made = 0  # buffers made (tests: no growth along a stream)

    def take(self, slot: OutputSlot) -> jax.Array:
        """A buffer for `slot`: one given back earlier, else a new one."""
        key = (slot.shape, slot.dtype)
        with self._lock:
            free = self._free.get(key)
            while free:
                buffer = free.pop()
                if not buffer.is_deleted():
                    return buffer
            self.made += 1
        if self.device.platform == "cpu":
            return _untouched(slot.shape, slot.dtype, self.device)
        return output_buffer(slot.shape, slot.dtype, self.device)

    def lend(self, result: jax.Array) -> np.ndarray:
        """`result` as a NumPy array (its memory on the CPU); `result` comes back to the pool
        once that array and every view of it are gone."""
        view = np.asarray(result)
        if view.ctypes.data == result.unsafe_buffer_pointer():  # not a copy: reuse its memory
            weakref.finalize(view, self._give, result)
        return view

    def _give(self, buffer: jax.Array) -> None:
        key = (tuple(buffer.shape), np.dtype(buffer.dtype))
        with self._lock:
            free = self._free.setdefault(key, [])
            if len(free) < self.KEEP:
                free.append(buffer)
