"""Lazy leaves read straight into their final place: one copy from the file, in parallel.

A leaf whose bytes lie in a local file as one native, row-major run (a safetensors tensor, an
uncompressed npz member: its reader says where, `LazyArray.region`) is read with `os.preadv`
into the memory where it will stay: its slot of a packed buffer, or the host buffer a CPU
kernel takes without a copy. No memory map is faulted page by page and no intermediate array
is made. Destination buffers are anonymous mappings populated in one call, page-aligned, so
JAX's CPU client uses them as they are (`jax.device_put` aliases a 64-byte-aligned array).
Several leaves are read at once by a few threads (the copy out of the page cache releases
the GIL). Other leaves (remote,
sub-byte, compressed, other byte order) are read by their own reader and copied once.

`stats()` counts the bytes read this way (tests check each byte is read once per run).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from inspector.core.errors import LoadError
from inspector.core.lazy import LazyArray, read_ahead

THREADS = max(2, min(8, os.cpu_count() or 2))
"""Leaves read at once (the copy from the page cache runs on every core; 8 at most)."""

_ALIGN = 64  # what XLA's CPU client needs to use a host array without copying it
_STATS = {"bytes": 0, "reads": 0, "mapped": 0}
_STATS_LOCK = threading.Lock()
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux's value
_POPULATE_WRITE = {"ok": hasattr(mmap.mmap, "madvise")}


def stats() -> dict[str, int]:
    """Bytes and leaves read into place (`preadv`, or used from a map of the file by a
    chunked stream) since the process started; `mapped`: the bytes of those used where a
    file's map has them (pages faulted in, not copied)."""
    with _STATS_LOCK:
        return dict(_STATS)


def count_read(nbytes: int, reads: int = 1, mapped: bool = False) -> None:
    """Adds a read made elsewhere (a chunked stream's map or gather) to `stats()`; `mapped`:
    the bytes stay in the file's map, where the kernel reads them."""
    with _STATS_LOCK:
        _STATS["bytes"] += nbytes
        _STATS["reads"] += reads
        if mapped:
            _STATS["mapped"] += nbytes


def host_buffer(nbytes: int, populate: bool = True) -> np.ndarray:
    """A page-aligned, already-faulted uint8 buffer of `nbytes` (freed when unreferenced).

    Every page is faulted in by one call (`MADV_POPULATE_WRITE`, Linux 5.14+; else the mapping
    is made with `MAP_POPULATE`), not one fault per 4 KiB page as the copy reaches it. Huge
    pages (`MADV_HUGEPAGE`) are not asked for: in a fresh process here they made a 614 MB
    read 0.8-0.94 s against 0.36-0.55 s without (the kernel compacts memory to find them).
    With `populate=False` each page is faulted by what first writes it (a background copy in
    pieces: one call populating 1.2 GB held a run waiting about 0.6 s)."""
    if nbytes == 0:
        return np.empty(0, np.uint8)
    if not populate:
        return np.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS),
                             np.uint8)
    if _POPULATE_WRITE["ok"]:
        m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        try:
            _populate(m, nbytes)
            return np.frombuffer(m, np.uint8)
        except OSError:
            _POPULATE_WRITE["ok"] = False  # an older kernel: populate when mapping
            m.close()
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _POPULATE)
    return np.frombuffer(m, np.uint8)


def _libc_madvise():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    return madvise


_MADVISE = _libc_madvise()


def _populate(m: mmap.mmap, nbytes: int) -> None:
    """Faults every page of `m` in with one `MADV_POPULATE_WRITE`. Through libc by ctypes,
    which lets go of the GIL meanwhile (`mmap.madvise` holds it: 0.15-0.2 s for 614 MB here,
    during which `run`'s kernels could not compile beside the read)."""
    if _MADVISE is None:
        m.madvise(_MADV_POPULATE_WRITE)
        return
    address = np.frombuffer(m, np.uint8).ctypes.data  # the view goes: `m` may still close
    if _MADVISE(address, nbytes, _MADV_POPULATE_WRITE) != 0:
        raise OSError(ctypes.get_errno(), "madvise(MADV_POPULATE_WRITE) failed")


def host_array(shape: tuple[int, ...], dtype, populate: bool = True) -> np.ndarray:
    """An uninitialised array in a `host_buffer` (aligned; faulted in unless `populate` is
    False)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    nbytes = n * dtype.itemsize
    return host_buffer(nbytes, populate)[:nbytes].view(dtype).reshape(shape)


def readable_in_place(leaf) -> bool:
    """Whether `leaf` can be read with `preadv` (a local, native, row-major run of bytes)."""
    return isinstance(leaf, LazyArray) and leaf.region is not None and leaf._value is None


def read_into(leaf: LazyArray, dest: np.ndarray, first: int = 0) -> None:
    """Reads `leaf`'s bytes into `dest` (C-contiguous) with `preadv`: all of them, or the
    `dest.size` elements from element `first` on (a part of a leaf that spans staging buffers).

    Raises:
        LoadError: the file is shorter than its header says (it changed after loading).
    """
    path, offset = leaf.region
    offset += first * np.dtype(leaf.dtype).itemsize
    view = memoryview(dest.reshape(-1).view(np.uint8))
    done, total = 0, len(view)
    fd = os.open(path, os.O_RDONLY)
    try:
        while done < total:
            n = os.preadv(fd, [view[done:]], offset + done)
            if n <= 0:
                raise LoadError(
                    f"{leaf.source}: the file ended after {done} of {total} bytes of this "
                    "tensor. It changed or shrank after it was opened; load it again.")
            done += n
    finally:
        os.close(fd)
    with _STATS_LOCK:
        _STATS["bytes"] += total
        _STATS["reads"] += 1


def fill(pairs: Sequence[tuple[object, np.ndarray]], threads: int = THREADS) -> None:
    """Writes each `value` into its `dest` view: lazy leaves that can be read in place by
    `preadv` (several threads), the others read once (remote ones concurrently) and copied.
    The first error raised is raised once every read has stopped."""
    direct = [(v, d) for v, d in pairs if readable_in_place(v) and d.flags.c_contiguous
              and d.dtype == v.dtype and d.size == v.size]
    chosen = {id(d) for _, d in direct}
    rest = [(v, d) for v, d in pairs if id(d) not in chosen]
    pool = ThreadPoolExecutor(threads, "inspector-read") if len(direct) > 1 else None
    try:
        futures = [pool.submit(read_into, v, d) for v, d in direct] if pool else []
        if pool is None:
            for v, d in direct:
                read_into(v, d)
        for value, (_, dest) in zip(read_ahead(v for v, _ in rest), rest, strict=True):
            dest[...] = np.asarray(value).reshape(dest.shape)
        for f in futures:
            f.result()
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def read_leaves(values: Iterable, threads: int = THREADS) -> list:
    """Returns `values` with each `LazyArray` read: in place when it can be (`preadv`, several
    threads) into one arena of aligned, faulted-in host memory (each leaf a 64-byte-aligned
    view of it; the arena is freed when the last view is), else by its own reader; other
    values as they are."""
    values = list(values)
    out = list(values)
    direct = [i for i, v in enumerate(values) if readable_in_place(v)]
    offsets, total = [], 0
    for i in direct:
        offsets.append(total)
        total += -(-values[i].nbytes // _ALIGN) * _ALIGN
    arena = host_buffer(total)
    pairs = []
    for i, start in zip(direct, offsets, strict=True):
        v = values[i]
        out[i] = arena[start : start + v.nbytes].view(v.dtype).reshape(v.shape)
        pairs.append((v, out[i]))
    fill(pairs, threads)
    others = [i for i, v in enumerate(values) if isinstance(v, LazyArray) and
              not readable_in_place(v)]
    for i, value in zip(others, read_ahead(values[i] for i in others), strict=True):
        out[i] = value
    return out


_SHARED: dict[str, ThreadPoolExecutor] = {}
_SHARED_LOCK = threading.Lock()


def executor() -> ThreadPoolExecutor:
    """The process's reader threads (`THREADS` of them), for reads that overlap compute."""
    with _SHARED_LOCK:
        if "pool" not in _SHARED:
            _SHARED["pool"] = ThreadPoolExecutor(THREADS, "inspector-read-ahead")
        return _SHARED["pool"]


class BufferPool:
    """A few host buffers reused by a streamed op: taken for a leaf's read, given back once
    its kernel is done, so a stream of 1,000 leaves faults its memory in once, not 1,000 times.

    Holds at most what was taken at once (the largest leaves in flight), and frees it all with
    the pool.
    """

    _GRAIN = 1 << 20

    def __init__(self):
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()
        self.allocated = 0  # bytes ever allocated (tests: no growth once warm)

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 buffer of at least `nbytes` (aligned, faulted in)."""
        with self._lock:
            fits = [n for n, b in enumerate(self._free) if b.size >= nbytes]
            if fits:
                return self._free.pop(min(fits, key=lambda n: self._free[n].size))
            size = max(self._GRAIN, -(-nbytes // self._GRAIN) * self._GRAIN)
            self.allocated += size
        return host_buffer(size)

    def give(self, buffer: np.ndarray) -> None:
        with self._lock:
            self._free.append(buffer)
