"""Checkpoint files' memory maps: one read-only map a file, leaves as views of it.

A leaf that lies in a local file as one native row-major run of bytes (`LazyArray.region`,
e.g. a safetensors tensor) can be used where it lies: a view of its file's map costs no copy
and no new memory (the pages are the page cache's). `FileMaps.view` makes such a view, its
pages faulted in by one `madvise(MADV_POPULATE_READ)` (Linux 5.14+; else touched once a
page), so whatever reads the view next (a NumPy reduction, an XLA kernel) takes no page
faults. The timeline's reductions (`health/host_batches.py`) and `run`'s kernels on the CPU
(`mapped_leaves.py`) read leaves this way.

A map lives as long as a view of it. A file truncated while mapped makes the pages past its
new end unreadable (SIGBUS on Linux); the maps are held for one run only.
"""

from __future__ import annotations

import mmap

import numpy as np

from inspector.core.errors import LoadError

MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)  # Linux's value
MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", 4)
ALIGN = 64
"""What XLA's CPU client needs to use a host array in place (an array starting elsewhere is
copied)."""
SUB_BYTE = frozenset({"float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "int2", "uint2",
                      "int4", "uint4"})
"""Dtypes stored packed, several elements a byte: their bytes are no array of elements to
view in a map."""
_POPULATE = {"ok": hasattr(mmap.mmap, "madvise")}  # no madvise (Windows): pages touched


def advise(m: mmap.mmap, offset: int, nbytes: int, advice: int) -> bool:
    """`madvise(advice)` over bytes `[offset, offset + nbytes)` of `m` (widened to whole
    pages); False where the kernel refuses it (MADV_POPULATE_READ before Linux 5.14)."""
    if not hasattr(m, "madvise") or advice == MADV_POPULATE_READ and not _POPULATE["ok"]:
        return False
    start = offset - offset % mmap.PAGESIZE
    try:
        m.madvise(advice, start, min(len(m), offset + nbytes) - start)
        return True
    except (OSError, ValueError):
        if advice == MADV_POPULATE_READ:
            _POPULATE["ok"] = False
        return False


def address(m: mmap.mmap) -> int:
    """Where `m`'s first byte lies in memory (`m` not empty)."""
    return np.frombuffer(m, np.uint8, 1).ctypes.data


def map_of(x: np.ndarray) -> mmap.mmap | None:
    """The memory map under `x`, if any."""
    while x is not None and not isinstance(x, mmap.mmap):
        x = x.obj if isinstance(x, memoryview) else getattr(x, "base", None)
    return x


def _touch(x: np.ndarray) -> None:
    flat = x.reshape(-1).view(np.uint8)
    if flat.size:
        flat[::mmap.PAGESIZE].max()


class FileMaps:
    """One read-only map per file, made when a leaf of that file is first viewed."""

    def __init__(self):
        self.files: dict[str, mmap.mmap] = {}

    def file(self, path: str, source: str) -> mmap.mmap:
        """The map of the file at `path` (made once; `source` names the leaf in errors).

        Raises:
            LoadError: the file cannot be opened (or mapped: an empty file).
        """
        m = self.files.get(path)
        if m is None:
            try:
                with open(path, "rb") as f:
                    m = self.files[path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:
                raise LoadError(f"{source}: {path} could not be opened ({exc}).") from exc
        return m

    def view(self, leaf, shift: int | None = None, length: int | None = None) -> np.ndarray:
        """`leaf` (a `LazyArray` with a `region`, not empty) as a view of its file's map, its
        pages faulted in. With `shift`, a flat view of `length` elements (at least `shift +
        leaf.size`; by default that) starting `shift` elements before the leaf
        (`aligned_shift` gives the one that starts on an `ALIGN` boundary).

        Raises:
            LoadError: the file cannot be opened, or is now shorter than its header said.
        """
        path, offset = leaf.region
        m = self.file(path, leaf.source)
        itemsize = leaf.dtype.itemsize
        nbytes = leaf.size * itemsize
        start = offset - (shift or 0) * itemsize
        count = leaf.size + (shift or 0) if length is None else length
        if start + count * itemsize > len(m):  # covers the leaf (count >= shift + size)
            raise LoadError(
                f"{leaf.source}: the {leaf.dtype}{list(leaf.shape)} array at byte {offset} of "
                f"{path} runs past its end ({len(m)} bytes). The file changed or shrank after "
                "it was opened; load it again.")
        x = np.frombuffer(m, leaf.dtype, count, start)
        if not advise(m, start, offset + nbytes - start, MADV_POPULATE_READ):
            _touch(x)  # an older kernel: a fault every few pages
        return x.reshape(leaf.shape) if shift is None else x


def aligned_shift(leaf) -> int | None:
    """Elements between the `ALIGN`-byte boundary at or before `leaf`'s first byte in its file
    and that byte (a map starts on a page, so the boundary is one in memory too); None when
    that is not a whole number of elements."""
    offset = leaf.region[1]
    gap = offset % ALIGN
    itemsize = leaf.dtype.itemsize
    return gap // itemsize if itemsize and gap % itemsize == 0 else None
