"""Streamed elementwise ops in fixed-size chunks that span many leaves (issue 26: streamed
outputs at the floor).

`weighted_sum(..., out=)` of checkpoints on disk computes every output leaf from the same
leaf of each input by one elementwise formula. Leaf by leaf (`lazy_result`), that is one
kernel call, one read and one write per leaf, and a fresh output for each new leaf shape.
Here the output's data section is cut instead into chunks of `CHUNK_BYTES` that run across
leaf boundaries, all computed by ONE compiled kernel per dtype signature:

- inputs: each input file is memory-mapped once; a chunk whose bytes lie in one run of the
  file (the inputs' leaves in the output's order, as in every checkpoint saved by the same
  library) is handed to the kernel as a view of the map (aliased on the CPU: no copy). The
  view starts at the 64-byte boundary at or before the chunk (what XLA needs to alias it)
  and the kernel slices it by a traced shift. Other chunks (leaves in another order, the
  last chunk of a file) are gathered with `preadv` into one reused buffer per input. Pages
  of the maps already used are dropped from the process (`MADV_DONTNEED`: the page cache
  keeps them), so resident memory stays bounded.
- outputs: `BUFFERS` device buffers, donated to the kernel call after call (no page faults
  after the first) and lent to the writer as NumPy views; a buffer comes back when the
  writer is done with its view.

Values are those of the leaf-by-leaf kernels: the same function on the same elements.
"""

from __future__ import annotations

import math
import mmap
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import jax
import numpy as np

from inspector.core.calls import Call
from inspector.core.errors import LoadError
from inspector.core.file_maps import ALIGN, SUB_BYTE
from inspector.core.host_read import count_read, host_buffer, readable_in_place
from inspector.core.kernel_cache import compiled_kernel
from inspector.core.output_slots import _untouched

CHUNK_BYTES = 16 << 20
"""Output bytes per kernel call (the floor's buffer size)."""

BUFFERS = 4
"""Output buffers in rotation: one computing, the others waiting for or in the writer."""

_PAGE = mmap.PAGESIZE


@dataclass(frozen=True)
class Elementwise:
    """One output leaf as `make()(*params, *inputs)`, elementwise over the inputs (each of
    the output's shape). Leaves of equal `key` share `make` and `params`."""

    key: tuple
    make: Callable[[], Callable]
    params: tuple
    inputs: tuple
    out_dtype: np.dtype


def chunk_pieces(plan, progress=None, chunk_bytes: int | None = None):
    """Returns `pieces(leaves)` for `safetensors_format.save`, or None where `plan` cannot
    stream in chunks (not elementwise, not on the CPU, inputs not plain local file runs).

    `pieces(leaves)` takes the output leaves in the file's order (the `LazyArray`s of
    `lazy_result(plan)`) and returns an iterator of `(offset in the data section, array)`
    covering them, or None when a leaf is not one of the plan's."""
    elements = getattr(plan, "elementwise", None)
    chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    if not elements or plan.device.platform != "cpu" or plan.mesh is not None \
            or not np.little_endian:
        return None
    if any(e.out_dtype.name in SUB_BYTE for e in elements):
        return None  # packed on write: leaf by leaf
    if not all(readable_in_place(x) or not math.prod(x.shape) for e in elements
               for x in e.inputs):
        return None

    def pieces(leaves: list) -> Iterator[tuple[int, np.ndarray]] | None:
        order = [getattr(getattr(leaf, "_reader", None), "call_index", None) for leaf in leaves]
        if any(i is None for i in order) or len(set(order)) != len(order):
            return None
        return _stream([elements[i] for i in order], plan.device, progress, chunk_bytes)

    return pieces


def _stream(elements: list[Elementwise], device, progress, chunk_bytes: int):
    from inspector.core.lazy_result import StreamProgress  # (it imports this module's users)

    maps = _Maps()
    sizes = [math.prod(e.inputs[0].shape) * e.out_dtype.itemsize for e in elements]
    ends = np.cumsum([0, *sizes])
    start = time.perf_counter()
    read = compute = 0.0
    offset = 0
    try:
        for group in _segments(elements):
            runner = _Segment(group, device, chunk_bytes, maps)
            for piece in runner.chunks():
                read, compute = read + runner.read, compute + runner.compute
                runner.read = runner.compute = 0.0
                yield offset, piece
                offset += piece.nbytes
                del piece
                if progress is not None:
                    done = int(np.searchsorted(ends, offset, side="right")) - 1
                    progress(StreamProgress(done, len(elements), offset, int(ends[-1]),
                                            time.perf_counter() - start, read, compute))
    finally:
        maps.close()


def _segments(elements: list[Elementwise]) -> Iterator[list[Elementwise]]:
    """Runs of consecutive leaves with one kernel (same key and parameters)."""
    group: list[Elementwise] = []
    for e in elements:
        if group and (e.key != group[0].key or len(e.params) != len(group[0].params)
                      or any(p is not q for p, q in zip(e.params, group[0].params, strict=True))):
            yield group
            group = []
        if math.prod(e.inputs[0].shape):
            group.append(e)
    if group:
        yield group


class _Maps:
    """Each input file mapped once, read-only, for the stream (its descriptor kept open, to
    check the file's size before each use of the map)."""

    def __init__(self):
        self._maps: dict[str, tuple[mmap.mmap, np.ndarray, int] | None] = {}

    def get(self, path: str) -> tuple[mmap.mmap, np.ndarray, int] | None:
        if path not in self._maps:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                self._maps[path] = None  # gathered with preadv, which says what went wrong
                return None
            try:
                m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # empty, or not mappable: gathered with preadv
                os.close(fd)
                self._maps[path] = None
            else:
                self._maps[path] = (m, np.frombuffer(m, np.uint8), fd)
        return self._maps[path]

    def check(self, path: str, end: int) -> None:
        """Raises unless the file still holds `end` bytes: a map read past a file that shrank
        meanwhile would kill the process (SIGBUS) instead of raising."""
        if os.fstat(self._maps[path][2]).st_size < end:
            raise LoadError(f"{path}: the file is shorter than when it was opened; it changed "
                          "after it was opened: load it again.")

    def close(self) -> None:
        for mapped in self._maps.values():
            if mapped is not None:
                os.close(mapped[2])
        self._maps.clear()  # each map is closed as its last view (maybe JAX's alias) goes


class _Input:
    """Where one input's elements of a segment lie: (path, byte offset, elements) per leaf."""

    def __init__(self, leaves: list, maps: _Maps, size: int, pad: int):
        self.dtype = leaves[0].dtype
        self.runs = [(leaf.region[0], leaf.region[1], math.prod(leaf.shape)) for leaf in leaves]
        self.maps, self.size, self.pad = maps, size, pad
        self.gather: np.ndarray | None = None
        self.dropped: dict[str, int] = {}

    def pieces(self, first: int, count: int, index: list[int]) -> list[tuple[str, int, int]]:
        """(path, offset, bytes) of elements [first, first + count), merged where adjacent;
        `index` is [leaf, its first element], advanced along the segment."""
        item, out = self.dtype.itemsize, []
        while count:
            path, offset, n = self.runs[index[0]]
            skip = first - index[1]
            take = min(count, n - skip)
            at, nbytes = offset + skip * item, take * item
            if out and out[-1][0] == path and out[-1][1] + out[-1][2] == at:
                out[-1] = (path, out[-1][1], out[-1][2] + nbytes)
            else:
                out.append((path, at, nbytes))
            first, count = first + take, count - take
            if skip + take == n:
                index[0], index[1] = index[0] + 1, index[1] + n
        return out

    def array(self, pieces: list[tuple[str, int, int]]) -> tuple[np.ndarray, int]:
        """The chunk's input (`size + pad` elements) and the shift of its first element."""
        item = self.dtype.itemsize
        count_read(sum(nbytes for _, _, nbytes in pieces), len(pieces))
        if len(pieces) == 1:
            path, at, _ = pieces[0]
            mapped = self.maps.get(path)
            begin = at - at % ALIGN
            if mapped is not None and (at - begin) % item == 0 \
                    and begin + (self.size + self.pad) * item <= mapped[1].size:
                self.maps.check(path, begin + (self.size + self.pad) * item)
                view = mapped[1][begin: begin + (self.size + self.pad) * item]
                return view.view(self.dtype), (at - begin) // item
        if self.gather is None:
            self.gather = host_buffer((self.size + self.pad) * item)
        done = 0
        for path, at, nbytes in pieces:
            _pread(path, at, self.gather[done: done + nbytes])
            done += nbytes
        return self.gather.view(self.dtype), 0

    def drop(self, pieces: list[tuple[str, int, int]]) -> None:
        """Drops the pages before the chunk's last from this process's maps (the next chunk
        may start in that page); the page cache keeps them."""
        for path, at, nbytes in pieces:
            mapped = self.maps.get(path)
            if mapped is None:
                continue
            lo = max(self.dropped.get(path, 0), at - at % _PAGE)
            hi = (at + nbytes) - (at + nbytes) % _PAGE
            if hi > lo:
                try:
                    mapped[0].madvise(mmap.MADV_DONTNEED, lo, hi - lo)
                except (OSError, AttributeError, ValueError):
                    return  # not offered here: the kernel drops clean pages when it needs to
                self.dropped[path] = hi


def _pread(path: str, offset: int, dest: np.ndarray) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        view, done = memoryview(dest), 0
        while done < len(view):
            n = os.preadv(fd, [view[done:]], offset + done)
            if n <= 0:
                raise LoadError(f"{path}: the file ended before byte {offset + len(view)}; it "
                              "changed after it was opened: load it again.")
            done += n
    finally:
        os.close(fd)


class _Buffers:
    """`BUFFERS` output buffers of one shape: donated to the kernel, lent to the writer as
    NumPy views, back once the view (and every slice of it) is gone."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, device):
        self.shape, self.dtype, self.device = shape, dtype, device
        self._free: list[jax.Array] = []
        self._made = 0
        self._cond = threading.Condition()

    def take(self) -> jax.Array:
        with self._cond:
            while not self._free and self._made >= BUFFERS:
                self._cond.wait()
            if self._free:
                return self._free.pop()
            self._made += 1
        # untouched: XLA writes the first output afresh, which then comes back here
        return _untouched(self.shape, self.dtype, self.device)

    def lend(self, result: jax.Array) -> np.ndarray:
        view = np.asarray(result)
        if view.ctypes.data == result.unsafe_buffer_pointer():
            weakref.finalize(view, self._give, result)
        else:  # a copy: the buffer is free at once
            self._give(result)
        return view

    def _give(self, buffer: jax.Array) -> None:
        with self._cond:
            self._free.append(buffer)
            self._cond.notify()


class _Segment:
    """Consecutive leaves of one kernel, computed `size` elements at a time."""

    def __init__(self, group: list[Elementwise], device, chunk_bytes: int, maps: _Maps):
        first = group[0]
        self.group, self.device = group, device
        self.total = sum(math.prod(e.inputs[0].shape) for e in group)
        self.size = max(1, chunk_bytes // first.out_dtype.itemsize)
        self.inputs = []
        for j, x in enumerate(first.inputs):
            pad = max(1, ALIGN // x.dtype.itemsize)
            self.inputs.append(_Input([e.inputs[j] for e in group], maps, self.size, pad))
        params = [jax.device_put(np.asarray(p), device) for p in first.params]
        spec = [jax.ShapeDtypeStruct((self.size,), first.out_dtype), *params]
        for x in self.inputs:
            spec += [jax.ShapeDtypeStruct((self.size + x.pad,), x.dtype), np.int32(0)]
        call = Call(("chunked", first.key, self.size, tuple(x.pad for x in self.inputs)),
                    lambda: _chunk_kernel(first.make, len(params), len(self.inputs),
                                          self.size), spec, donate=(0,))
        self.kernel = compiled_kernel(call, device)[0]
        self.params = params
        self.buffers = _Buffers((self.size,), first.out_dtype, device)
        self.read = self.compute = 0.0

    def chunks(self) -> Iterator[np.ndarray]:
        """Each chunk's output, a NumPy view of a lent buffer (let it go once written)."""
        indexes = [[0, 0] for _ in self.inputs]
        for first in range(0, self.total, self.size):
            count = min(self.size, self.total - first)
            args = [self.buffers.take(), *self.params]  # may wait for the writer
            start = time.perf_counter()
            pieces = [x.pieces(first, count, i) for x, i in zip(self.inputs, indexes, strict=True)]
            for x, where in zip(self.inputs, pieces, strict=True):
                host, shift = x.array(where)
                args += [jax.device_put(host, self.device, may_alias=True), np.int32(shift)]
            begin = time.perf_counter()
            self.read += begin - start
            result = self.kernel(*args)
            del args, host
            view = self.buffers.lend(result)  # waits for the kernel
            del result
            self.compute += time.perf_counter() - begin
            for x, where in zip(self.inputs, pieces, strict=True):
                x.drop(where)
            yield view[:count]
            del view


def _chunk_kernel(make: Callable[[], Callable], n_params: int, n_inputs: int, size: int):
    fn = make()

    def kernel(buffer, *args):
        del buffer  # donated: the result is written into it
        params, rest = args[:n_params], args[n_params:]
        xs = [jax.lax.dynamic_slice(rest[2 * j], (rest[2 * j + 1],), (size,))
              for j in range(n_inputs)]
        return fn(*params, *xs)

    return kernel
