"""The timeline's float32 leaves on the CPU: each key path's run of leaves reduced by the worker
threads (`host_step.py`) while the next key path's leaves are read.

`timeline` walks the checkpoints key path by key path (a path's leaf at every step, then the
next path). A leaf that lies in a local file as one native run (`LazyArray.region`, e.g. a
safetensors tensor) is a memory map: reading it costs a `mmap` call and a page fault every few
pages. `Batches.leaf` maps such a leaf and faults its pages in with one
`madvise(MADV_POPULATE_READ)` (Linux 5.14+; else the pages are touched once), and
`Batches.submit` hands a path's leaves to the worker threads and returns at once: the calling
thread reads the next path while the workers reduce this one. At most `WINDOW` paths are in
flight: memory holds the leaves of those and of the path being read (file pages, not new
memory). A run holding leaves read into memory (remote, compressed, other byte order) is
reduced before the next leaf is read: those stay two leaves at most, as before.
"""

from __future__ import annotations

import mmap
from collections import deque

import jax
import numpy as np

from inspector.core.health import step_kernel as sk
from inspector.core.health.host_step import submit_steps
from inspector.core.lazy import LazyArray

WINDOW = 2
"""Key paths whose reductions may be under way while the next one is read."""
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)  # Linux's value
_POPULATE = {"ok": hasattr(mmap.mmap, "madvise")}


def mapped(x: np.ndarray) -> bool:
    """Whether `x` lies in a memory map (a checkpoint file's pages, not a copy in memory)."""
    while x is not None:
        if isinstance(x, np.memmap | mmap.mmap):
            return True
        x = getattr(x, "base", None)
    return False


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
        flat[::mmap.PAGESIZE].max()


class Batches:
    """Reduces runs of one key path's float32 leaves at successive steps on the worker
    threads, `WINDOW` runs in flight; `record(i, t, figures, size, paired)` stores each
    leaf's figures (in the calling thread, in order)."""

    def __init__(self, record, device):
        self._record, self._device = record, device
        self._flight: deque = deque()

    @staticmethod
    def leaf(leaf) -> np.ndarray:
        """`leaf` read: a memory-mapped leaf with its pages faulted in."""
        x = np.asarray(leaf)
        if isinstance(leaf, LazyArray) and leaf.region is not None and mapped(x):
            populate(x)
        return x

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
