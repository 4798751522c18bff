"""The timeline's read-ahead: the next key path's leaves mapped and faulted in while the current
one is reduced.

`timeline` walks the checkpoints key path by key path (each path's leaf at every step, then the
next path). The leaves that lie in a local file as one native run (`LazyArray.region`, e.g. a
safetensors tensor) are memory maps: reading them costs a `mmap` call each and a page fault per
few pages as the reduction first touches them. Here a background thread maps the next path's
leaves and faults every page in with one `madvise(MADV_POPULATE_READ)` a leaf (Linux 5.14+;
else each page is touched once), so the reduction of path i overlaps the mapping and faulting
of path i + 1. Only file-backed maps are read ahead (page-cache pages, not new memory), one path
at a time: at most two paths' leaves are mapped at once. Leaves read into memory by their own
reader (remote, compressed, other byte order) are left to the caller, read when reached.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from inspector.core.lazy import LazyArray

_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)  # Linux's value
_POPULATE = {"ok": hasattr(mmap.mmap, "madvise")}
_PAGE = mmap.PAGESIZE


def mappable(leaf) -> bool:
    """Whether `leaf` is read as a memory map of a local file (a `LazyArray` with a
    `region`: one native row-major run of the file)."""
    return isinstance(leaf, LazyArray) and leaf.region is not None


def populate(x: np.ndarray) -> None:
    """Faults every page of the memory map under `x` in, in one call where the kernel can."""
    m = x
    while m is not None and not isinstance(m, mmap.mmap):
        m = getattr(m, "base", None)
    if m is not None and _POPULATE["ok"]:
        try:
            m.madvise(_MADV_POPULATE_READ)
            return
        except (OSError, ValueError):
            _POPULATE["ok"] = False  # an older kernel: touch the pages
    flat = x.reshape(-1).view(np.uint8)
    if flat.size:
        flat[::_PAGE].max()


class ReadAhead:
    """`get(i)`: `{step: array}` of key path `i`'s leaves chosen by `wanted(leaf)` (read and
    faulted in), after which path `i + 1`'s are read in the background."""

    def __init__(self, flats: Sequence[dict], paths: Sequence[str],
                 wanted: Callable[[object], bool]):
        self._flats, self._paths, self._wanted = flats, paths, wanted
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="inspector-read-ahead")
        self._next: tuple[int, Future] | None = None

    def _read(self, i: int) -> dict[int, np.ndarray]:
        out = {}
        path = self._paths[i]
        for t, leaves in enumerate(self._flats):
            leaf = leaves.get(path)
            if leaf is not None and self._wanted(leaf):
                x = np.asarray(leaf)
                populate(x)
                out[t] = x
        return out

    def get(self, i: int) -> dict[int, np.ndarray]:
        if self._next is not None and self._next[0] == i:
            found = self._next[1].result()
        else:
            found = self._read(i)
        self._next = None
        if i + 1 < len(self._paths):
            self._next = (i + 1, self._pool.submit(self._read, i + 1))
        return found

    def close(self) -> None:
        self._next = None
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()
