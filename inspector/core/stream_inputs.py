"""The inputs of a streamed op's calls, read ahead into reused buffers.

`lazy_result` computes an output leaf when it is read, from its call's inputs. Here each
call's file leaves are read with `preadv` (several threads) into buffers of a `BufferPool`,
the next call's while this one computes, and the buffers are given back once the kernel is
done: a stream faults its memory in once, and reading overlaps computing.
"""

from __future__ import annotations

import threading

import numpy as np

from inspector.core.host_read import BufferPool, executor, read_into, readable_in_place


class StreamInputs:
    """Reads call `i`'s lazy arguments on demand, and call `i + 1`'s in the background."""

    def __init__(self, calls: list):
        self.calls = calls
        self.pool = BufferPool()
        self._pending: dict[int, list] = {}
        self._lock = threading.Lock()

    def _start(self, i: int) -> None:
        items = []
        for a in self.calls[i].args:
            if readable_in_place(a):
                buf = self.pool.take(a.nbytes)
                view = buf[: a.nbytes].view(a.dtype).reshape(a.shape)
                items.append((view, buf, executor().submit(read_into, a, view)))
            else:
                items.append((a, None, None))
        self._pending[i] = items

    def _lazy(self, i: int) -> bool:
        return any(readable_in_place(a) for a in self.calls[i].args)

    def take(self, i: int) -> tuple[list, list[np.ndarray]]:
        """Returns call `i`'s arguments (file leaves read into pool buffers) and those
        buffers, to `give_back` once the kernel that uses them is done."""
        with self._lock:
            if i not in self._pending:
                self._start(i)
            items = self._pending.pop(i)
            nxt = i + 1
            if not self._pending and nxt < len(self.calls) and self._lazy(nxt):
                self._start(nxt)  # read ahead while call i computes
        buffers = [buf for _, buf, _ in items if buf is not None]
        try:
            for _, _, future in items:
                if future is not None:
                    future.result()
        except BaseException:
            for _, _, future in items:
                if future is not None:
                    future.cancel()
            # a read still running may write into its buffer: wait before reusing it
            for _, _, future in items:
                if future is not None and not future.cancelled():
                    future.exception()
            self.give_back(buffers)
            raise
        return [value for value, _, _ in items], buffers

    def give_back(self, buffers: list[np.ndarray]) -> None:
        for buf in buffers:
            self.pool.give(buf)


def overlaps(array: np.ndarray, buffers: list[np.ndarray]) -> bool:
    """Whether `array`'s memory lies in one of `buffers` (an output aliasing an input)."""
    lo = array.__array_interface__["data"][0]
    hi = lo + array.nbytes
    for b in buffers:
        start = b.__array_interface__["data"][0]
        if lo < start + b.nbytes and start < hi:
            return True
    return False
