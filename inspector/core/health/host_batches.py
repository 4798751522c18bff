"""The timeline's float32 leaves on the CPU: each key path's run of leaves reduced by the worker
threads (`host_step.py`) while the next key path's leaves are read.

`timeline` walks the checkpoints key path by key path (a path's leaf at every step, then the
next path). A leaf that lies in a local file as one native run (`LazyArray.region`, e.g. a
safetensors tensor) is a memory map: reading it costs a `mmap` call and a page fault every few
pages. `Batches.leaf` reads such a leaf as a view of its file's one map (`file_maps.FileMaps`: made
once a run, not once a leaf, as a `np.memmap` costs ~40 us; its pages faulted in), and
`Batches.submit` hands a path's leaves to the worker threads and returns at once: the calling
thread reads the next path while the workers reduce this one. At most `WINDOW` paths are in
flight: memory holds the leaves of those and of the path being read (page-cache pages, not
new memory); a finished path's pages are unmapped (`MADV_DONTNEED`: they stay cached). A run
holding leaves read into memory (remote, compressed, other byte order) is reduced before the
next leaf is read: those stay two leaves at most, as before.
"""

from __future__ import annotations

import mmap
from collections import deque

import jax
import numpy as np

from inspector.core import file_maps
from inspector.core.file_maps import FileMaps
from inspector.core.health import step_kernel as sk
from inspector.core.health.host_step import submit_steps
from inspector.core.lazy import LazyArray

WINDOW = 2
"""Key paths whose reductions may be under way while the next one is read."""


def mapped(x: np.ndarray) -> bool:
    """Whether `x` lies in a memory map (a checkpoint file's pages, not a copy in memory)."""
    while x is not None:
        if isinstance(x, np.memmap | mmap.mmap):
            return True
        x = x.obj if isinstance(x, memoryview) else getattr(x, "base", None)
    return False


class Batches:
    """Reduces runs of one key path's float32 leaves at successive steps on the worker
    threads, `WINDOW` runs in flight; `record(i, t, figures, size, paired)` stores each
    leaf's figures (in the calling thread, in order)."""

    def __init__(self, record, device):
        self._record, self._device = record, device
        self._flight: deque = deque()
        self._maps = FileMaps()  # one read-only map a file, shared by its leaves

    def leaf(self, leaf) -> np.ndarray:
        """`leaf` read: a leaf with a `region` (one native row-major run of a local file) as
        a view of that file's one memory map (no `mmap` call per leaf), its pages faulted
        in; others by their reader."""
        if not (isinstance(leaf, LazyArray) and leaf.region is not None and leaf.size):
            return np.asarray(leaf)
        return self._maps.view(leaf)

    def submit(self, i: int, batch: list) -> None:
        """Starts the reduction of `batch` (key path `i`'s leaves at successive steps, each
        `[t, leaf, paired, recorded]`; `paired`: compared with the entry before)."""
        if all(e[3] for e in batch):
            return
        finish = submit_steps([e[1] for e in batch],
                              [e[2] and k > 0 for k, e in enumerate(batch)])
        self._flight.append((i, batch, finish))
        if not all(mapped(e[1]) for e in batch):
            self.drain(0)  # leaves in memory: no more of them held than before
        else:
            self.drain(WINDOW)

    def drain(self, keep: int = 0) -> None:
        """Records the runs finished, oldest first, until `keep` are in flight."""
        while len(self._flight) > keep:
            i, batch, finish = self._flight.popleft()
            self._finish(i, batch, finish())

    def _finish(self, i, batch, figures):
        """Records `batch`'s figures; a pair whose sums come out non-finite (NaN/Inf) is
        reduced again by the careful kernel."""
        for k, (t, x, paired, recorded) in enumerate(batch):
            if recorded:
                continue
            f = figures[k]
            if not np.isfinite(f).all():
                pair = (batch[k - 1][1] if paired else x, x)
                f = np.asarray(sk.careful_kernel(x.size, "float32", "float32")(
                    *jax.device_put(pair, self._device)), np.float64)
            self._record(i, t, f, x.size, paired)
            batch[k][3] = True
        ours = {id(m) for m in self._maps.files.values()}
        for _, x, _, _ in batch:
            m = file_maps.map_of(x)
            if m is not None and id(m) in ours:
                # a view of its file's map: its pages unmapped (they stay in the page cache),
                # so resident memory holds the paths in flight, not every file read so far
                file_maps.advise(m, x.ctypes.data - file_maps.address(m), x.nbytes,
                                 file_maps.MADV_DONTNEED)
