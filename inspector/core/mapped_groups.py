"""A held checkpoint's float32 groups read where they lie in its file, for the app's first run.

Holding a checkpoint used to mean reading every byte into packed memory before any kernel ran:
1.06-1.32 s for two 1.22 GB safetensors files here, where mapping them and faulting their
pages in takes 0.03 s (the files in the page cache). The CPU's weighted sum needs no packed
copy: its loop reads each tensor where the file's map has it (`sum_loops.
weighted_gather_sum_into`). A `MappedGroup` stands for one dtype group of a packed tree in
that form: the file's map, and where each of the group's leaves starts in it.

Anything else that needs the group as one buffer (an XLA kernel, a statistic) gets a packed
copy, made once and kept (`host()`, `placed(device)`): the same read as before, when first
needed. The working set hands such groups out when asked (`WorkingSet.hold(..., mapped=True)`,
the app's runs on the CPU) and replaces them by their packed copies in a background thread
soon after (`WorkingSet.settle`): a file's map is held for seconds, not for the server's life
(a file truncated under a map makes its pages unreadable: SIGBUS).

What is mapped (`packed_reads.read_mapped`): a group the CPU's loop sums (`weighted_sum_host.
usable`: float32, 16 MiB or more) whose leaves are all `LazyArray`s with a `region` in one
local file, each starting a whole number of elements from the file's start (aligned in
memory). Other groups gain nothing from a map, and are read as before.
"""

from __future__ import annotations

import threading

import jax
import numpy as np

from inspector.core.errors import LoadError
from inspector.core.file_maps import MADV_POPULATE_READ, FileMaps, advise
from inspector.core.host_read import count_read, host_array, readable_in_place

PIECE = 1 << 22
"""Elements copied between two checks for runs in flight (`MappedGroup.host(pause)`): a
run that starts meanwhile waits for at most one piece (16 MiB of float32)."""


class MappedGroup:
    """One dtype group of a packed tree, its leaves where they lie in one file's map.

    Attributes:
        dtype, shape, size, nbytes: those of the packed buffer it stands for (1-D).
        where: `(source, positions)`: the file's map as a 1-D read-only array of `dtype`, and
            where each leaf starts in it (int64, in the group's slot order). Once the packed
            copy is made (`host()`), the copy and the leaves' offsets in it: the map is let go
            (read both at once: a reader in another thread sees one pair or the other).
        offsets, sizes: where each leaf goes in the packed buffer, and its element count.
    """

    __slots__ = ("dtype", "shape", "where", "offsets", "sizes", "_host", "_placed", "_lock")

    def __init__(self, source: np.ndarray, positions, offsets, sizes, size: int):
        self.dtype = source.dtype
        self.shape = (int(size),)
        self.where = (source, np.asarray(positions, np.int64))
        self.offsets = np.asarray(offsets, np.int64)
        self.sizes = np.asarray(sizes, np.int64)
        self._host: np.ndarray | None = None
        self._placed: dict = {}
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self.shape[0]

    @property
    def ndim(self) -> int:
        return 1

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def view(self, offset: int, size: int) -> np.ndarray:
        """The leaf at `offset` of the packed buffer (`size` elements): a view of the map (or
        of the packed copy, once made)."""
        source, positions = self.where
        j = int(np.searchsorted(self.offsets, offset))
        if j >= self.offsets.size or self.offsets[j] != offset or self.sizes[j] != size:
            return self.host()[offset:offset + size]  # not one leaf: from the packed copy
        start = int(positions[j])
        return source[start:start + size]

    def host(self, pause=None) -> np.ndarray:
        """The packed buffer (read-only), copied once from the map into aligned memory; the
        group reads its copy from then on, and the map goes with the last run reading it.
        `pause()`, if given, is called before each piece of at most `PIECE` elements is
        copied (a background copy waiting for the runs in flight)."""
        with self._lock:
            if self._host is None:
                source, positions = self.where
                # in the background, pages faulted as the pieces reach them: one call
                # populating 1.2 GB kept a weight change waiting about 0.6 s
                out = host_array(self.shape, self.dtype, populate=pause is None)
                for start, offset, size in zip(positions.tolist(), self.offsets.tolist(),
                                               self.sizes.tolist(), strict=True):
                    for at in range(0, size, PIECE):
                        if pause is not None:
                            pause()
                        n = min(PIECE, size - at)
                        out[offset + at:offset + at + n] = source[start + at:start + at + n]
                out.flags.writeable = False
                self._host = out
                self.where = (out, self.offsets)  # a run reading the map keeps it alive
            return self._host

    def placed(self, device) -> jax.Array:
        """The packed buffer on `device` (a CPU device uses `host()` without a copy), once."""
        host = self.host()
        with self._lock:  # one placed array a device, whoever asks first
            found = self._placed.get(device)
            if found is None:
                found = self._placed[device] = jax.device_put(host, device, may_alias=True)
        return found

    def __array__(self, dtype=None, copy=None):
        host = self.host()
        return host if dtype is None else host.astype(dtype)

    def __repr__(self) -> str:
        return f"MappedGroup({self.dtype}[{self.size}], {self.offsets.size} leaves)"


def map_group(members: list, size: int, maps: FileMaps) -> MappedGroup | None:
    """The group of `members` (`(leaf, slot)`, in slot order) as a `MappedGroup` of its file's
    map, its pages faulted in; None when it cannot be one."""
    leaves = [leaf for leaf, _ in members]
    if not leaves or not all(readable_in_place(x) for x in leaves):
        return None
    path = leaves[0].region[0]
    dtype = leaves[0].dtype
    itemsize = dtype.itemsize
    regions = [x.region for x in leaves]
    if any(p != path or o % itemsize or x.dtype != dtype  # elements aligned in memory
           for (p, o), x in zip(regions, leaves, strict=True)):
        return None
    m = maps.file(path, leaves[0].source)
    source = np.frombuffer(m, dtype, len(m) // itemsize)
    positions = np.array([o // itemsize for _, o in regions], np.int64)
    sizes = np.array([s.size for _, s in members], np.int64)
    too_long = np.flatnonzero(positions + sizes > source.size)
    if too_long.size:
        leaf = leaves[int(too_long[0])]
        raise LoadError(
            f"{leaf.source}: the {leaf.dtype}{list(leaf.shape)} array at byte "
            f"{leaf.region[1]} of {path} runs past its end ({len(m)} bytes). The file changed "
            "or shrank after it was opened; load it again.")
    if not advise(m, 0, len(m), MADV_POPULATE_READ):
        source[::max(1, 4096 // itemsize)].max()  # an older kernel: a fault every few pages
    count_read(int(sizes.sum()) * itemsize, len(leaves), mapped=True)
    return MappedGroup(source, positions, [s.offset for _, s in members], sizes, size)


def has_mapped(tree) -> bool:
    """Whether a packed tree holds a `MappedGroup`."""
    return any(isinstance(b, MappedGroup) for b in getattr(tree, "buffers", {}).values())


def gather_args(xs: list) -> tuple:
    """`(sources, positions, offsets, sizes)` for `sum_loops.weighted_gather_sum_into` of the
    packed group `xs` (k buffers of one layout: `MappedGroup`s, read in place, or arrays)."""
    mapped = next(x for x in xs if isinstance(x, MappedGroup))
    sources, positions = [], []
    for x in xs:
        if isinstance(x, MappedGroup):
            source, where = x.where
            sources.append(source)
            positions.append(where)
        else:
            sources.append(_read_only(np.asarray(x).reshape(-1)))
            positions.append(mapped.offsets)
    return sources, np.stack(positions), mapped.offsets, mapped.sizes


def _read_only(x: np.ndarray) -> np.ndarray:
    """`x` as a read-only view (numba compiles one loop for a tuple of read-only arrays)."""
    if x.flags.writeable:
        x = x.view()
        x.flags.writeable = False
    return x
