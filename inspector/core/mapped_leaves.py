"""`run` on the CPU: lazy leaves used where they lie in their files, not read into memory.

Reading a checkpoint's leaves for a run copies every byte into fresh memory, and the fresh
memory costs as much again in page faults: two 1.22 GB checkpoints took 0.95-1.3 s to read
where a NumPy program mapping the same files reads nothing (issue 26). XLA's CPU client uses
a host array without a copy when it starts on a 64-byte boundary, but a safetensors tensor
starts wherever its header's length puts it (48 bytes past a boundary in a GPT-2-like file).
So each such leaf is given to its kernel as a flat view of its file's map (`file_maps`) from
the boundary at or before its first byte, and the kernel slices the leaf out at its shift (a
traced argument: XLA reads the elements in place, no copy). The views are placed
without a copy (`device_put(..., may_alias=True)`) and every execution reads the page
cache's pages; each leaf's pages are faulted in once, while the kernels compile.

What is mapped: a `LazyArray` with a `region` (one native row-major run of a local file),
not empty, of a dtype XLA keeps as it is, at an offset that is a whole number of elements
from a boundary, passed to a call that neither donates nor carries it, on a plan for one CPU
device. Everything else is read as before (`host_read.read_leaves`). Kernels never write
their inputs unless donated, so the read-only pages are never written.

The maps live as long as the `PlannedRun`: `run` holds them for its executions only (a
result never aliases them: the kernel's slice is its own buffer). A file truncated during
the run would make its pages unreadable (SIGBUS), as for any memory-mapped reader.
"""

from __future__ import annotations

import dataclasses
import os

import jax
import numpy as np

from inspector.core.calls import Call
from inspector.core.file_maps import ALIGN, SUB_BYTE, FileMaps, aligned_shift
from inspector.core.host_read import count_read
from inspector.core.lazy import LazyArray


@dataclasses.dataclass(frozen=True, eq=False)
class MappedLeaf:
    """A lazy leaf bound for a kernel as a flat view of its file's map of `length` elements
    from the `ALIGN`-byte boundary `shift` elements before its first one (what the kernel is
    compiled for: `shape`, `dtype`)."""

    leaf: LazyArray
    shift: int
    length: int

    @property
    def shape(self) -> tuple[int]:
        return (self.length,)

    @property
    def dtype(self) -> np.dtype:
        return self.leaf.dtype

    @property
    def nbytes(self) -> int:
        return self.leaf.nbytes


def map_calls(plan) -> int:
    """Rewrites `plan.calls` so that their mappable lazy leaves (see the module) become
    `MappedLeaf`s and their kernels slice them; returns how many distinct leaves were.

    Every view of a leaf of `size` elements is `size + ALIGN / itemsize - 1` long, whatever
    its shift (shorter only for a file's last leaves, which end where the file does), and the
    shift is a traced argument (`lax.dynamic_slice`): leaves of one shape share one kernel
    wherever they start in their files (a static shift made up to 16 kernels of each shape:
    6.8 s of compiling for a 106k-tensor file against 2.4 s read)."""
    if plan.device.platform != "cpu" or plan.mesh is not None or not np.little_endian:
        return 0
    mapped: dict[int, MappedLeaf] = {}  # by leaf: a leaf in several calls is mapped once
    sizes: dict[str, int] = {}  # file -> bytes
    shifts: dict[int, jax.Array] = {}  # one argument per shift value, on the device
    for i, call in enumerate(plan.calls):
        if call.shardings is not None or call.chain or call.carry:
            continue
        spots = []
        for j, a in enumerate(call.args):
            m = None if j in call.donate else mapped.get(id(a)) or _mappable(a, sizes)
            if m is not None:
                mapped[id(a)] = m
                spots.append((j, m.length, a.size, tuple(a.shape)))
        if spots:
            plan.calls[i] = _sliced(call, tuple(spots), mapped, shifts, plan.device)
    return len(mapped)


def _mappable(a, sizes: dict) -> MappedLeaf | None:
    if not (isinstance(a, LazyArray) and a.region is not None and a._value is None
            and a.size):
        return None
    dtype = np.dtype(a.dtype)
    if dtype.name in SUB_BYTE or jax.dtypes.canonicalize_dtype(dtype) != dtype:
        return None
    shift = aligned_shift(a)
    if shift is None:
        return None
    path, offset = a.region
    if path not in sizes:
        try:
            sizes[path] = os.path.getsize(path)
        except OSError:
            sizes[path] = -1  # read as before: its reader says what is wrong
    start = offset - shift * dtype.itemsize
    # up to the file's end (its last leaf: a kernel of its own length); a file now shorter
    # than the leaf is the reader's to report, as before
    length = min(a.size + ALIGN // dtype.itemsize - 1, (sizes[path] - start) // dtype.itemsize)
    if length < shift + a.size:
        return None
    return MappedLeaf(a, shift, length)


def _sliced(call: Call, spots: tuple, mapped: dict, shifts: dict, device) -> Call:
    """`call` with the leaves at `spots` (`(position, view length, size, shape)`) given as
    flat views from their boundaries, and their shifts as extra arguments (after the call's
    own), sliced by its kernel."""
    inner, n = call.make, len(spots)

    def make():
        kernel = inner()

        def sliced(*args):
            args, starts = list(args[:-n]), args[-n:]
            for (j, _, size, shape), start in zip(spots, starts, strict=True):
                args[j] = jax.lax.dynamic_slice(args[j], (start,), (size,)).reshape(shape)
            return kernel(*args)

        return sliced

    args = list(call.args)
    starts = []
    for j, _, _, _ in spots:
        m = mapped[id(args[j])]
        args[j] = m
        if m.shift not in shifts:  # placed now: a NumPy scalar would cost `place` a compile
            shifts[m.shift] = jax.device_put(np.int32(m.shift), device)
        starts.append(shifts[m.shift])
    return dataclasses.replace(call, key=("mapped", call.key, spots), make=make,
                               args=[*args, *starts])


def mapped_views(leaves) -> dict:
    """`{id(m): view}` of each `MappedLeaf` in `leaves` (each file mapped once, each leaf's
    pages faulted in, its bytes counted as read).

    Raises:
        LoadError: a file cannot be opened or is shorter than its header said.
    """
    maps, out = FileMaps(), {}
    for m in leaves:
        out[id(m)] = maps.view(m.leaf, m.shift, m.length)
        count_read(m.nbytes)
    return out
