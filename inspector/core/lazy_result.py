"""Lazy results: an op's result whose leaves are computed one at a time, when each is read.

A result larger than memory cannot be held, but it can be written: `lazy_result(plan)` turns
a leaf-by-leaf plan (one kernel call per output leaf, as `weighted_sum`, `stack` and `index`
make for plain or lazy trees) into a tree of `LazyArray`s. Reading one leaf reads only that
leaf's inputs, runs its (cached) kernel and hands back a host array; nothing else is kept. A
writer that goes leaf by leaf (`inspector.save`) then holds one output leaf and its inputs at a
time: that is how `weighted_sum(..., out=path)` streams.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import jax
import numpy as np

from inspector.core.errors import InspectorError
from inspector.core.lazy import LazyArray
from inspector.core.plan import Plan
from inspector.core.stream_inputs import StreamInputs, overlaps


@dataclass(frozen=True)
class StreamProgress:
    """How far a streamed result has got: `done` of `total` leaves computed, `nbytes` of
    `total_bytes` output bytes, after `seconds`; of which `read_seconds` waiting for input
    leaves to be read (reads ahead overlap computing: only the wait counts) and
    `compute_seconds` in the kernels (with the copies to and from the device). The rest of a
    stream's time is its writer's."""

    done: int
    total: int
    nbytes: int
    total_bytes: int
    seconds: float
    read_seconds: float = 0.0
    compute_seconds: float = 0.0

    @property
    def rate(self) -> float:
        """Output bytes per second so far."""
        return self.nbytes / self.seconds if self.seconds > 0 else 0.0


def lazy_result(plan: Plan, progress: Callable[[StreamProgress], None] | None = None):
    """Returns the plan's result as a tree of `LazyArray`s, each computed when it is read.

    Kernels are compiled now (so shapes, dtypes and compile errors are known at once); no
    input data is read until a leaf is. `progress`, if given, is called after each leaf is
    computed (in the reading thread) with a `StreamProgress`.

    Raises:
        InspectorError: some call of the plan gives more than one array (it cannot stream).

    >>> from inspector.core.weighted_sum import plan_weighted_sum
    >>> out = lazy_result(plan_weighted_sum([{"w": np.ones(2)}, {"w": np.ones(2)}], [1, 2]))
    >>> out["w"], out["w"].read().tolist()
    (LazyArray(float32[2], source="weighted_sum['w']"), [3.0, 3.0])
    """
    plan.compile()
    infos = [compiled.out_info for compiled in plan.compiled]
    if not all(isinstance(info, jax.ShapeDtypeStruct) for info in infos):
        raise InspectorError(
            f"Cannot stream {plan.op}: its kernels give more than one array per call; "
            "run it in memory instead.")
    sizes = [int(np.prod(info.shape)) * np.dtype(info.dtype).itemsize for info in infos]
    counter = _Counter(sizes, progress)
    inputs = StreamInputs(plan.calls)
    placeholders = [_Marker(i) for i in range(len(plan.calls))]
    skeleton = plan.assemble(placeholders)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(skeleton)
    out = []
    for path, leaf in leaves:
        if isinstance(leaf, _Marker):
            info = infos[leaf.i]
            name = f"{plan.op}{jax.tree_util.keystr(path)}"
            read = _reader(plan, leaf.i, counter, inputs)
            out.append(LazyArray(info.shape, info.dtype, read, source=name))
        else:
            out.append(leaf)  # an input leaf the op leaves as it is (index with ':')
    return jax.tree_util.tree_unflatten(treedef, out)


class _Marker:
    """Stands for output `i` while the plan assembles its result's structure."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


class _Counter:
    """Counts computed leaves, and the time spent reading and computing, for `progress`."""

    def __init__(self, sizes: list[int], progress):
        self.sizes, self.progress = sizes, progress
        self.done = self.nbytes = 0
        self.read = self.compute = 0.0
        self.start = None
        self.lock = threading.Lock()

    def started(self) -> None:
        with self.lock:
            if self.start is None:
                self.start = time.perf_counter()

    def finished(self, i: int, read: float, compute: float) -> None:
        if self.progress is None:
            return
        with self.lock:
            self.done += 1
            self.nbytes += self.sizes[i]
            self.read += read
            self.compute += compute
            report = StreamProgress(self.done, len(self.sizes), self.nbytes, sum(self.sizes),
                                    time.perf_counter() - self.start, self.read, self.compute)
        self.progress(report)


def _reader(plan: Plan, i: int, counter: _Counter, inputs: StreamInputs):
    def read() -> np.ndarray:
        counter.started()
        compiled = plan.compiled[i]
        start = time.perf_counter()
        values, buffers = inputs.take(i)  # file leaves read ahead into reused buffers
        read = time.perf_counter() - start
        try:
            # Arguments move to the device here, one call's worth at a time (not in `place`);
            # on the CPU the read buffers are used as they are. Other lazy leaves (remote
            # ones) are read here, one at a time, in the read time too.
            args = []
            for a in values:
                if isinstance(a, LazyArray):
                    begin = time.perf_counter()
                    host = np.asarray(a)
                    read += time.perf_counter() - begin
                    args.append(jax.device_put(host, plan.device))
                    del host
                elif isinstance(a, jax.Array):
                    args.append(a)
                elif isinstance(a, np.ndarray) and overlaps(a, buffers):
                    args.append(jax.device_put(a, plan.device, may_alias=True))
                else:
                    args.append(jax.device_put(np.asarray(a), plan.device))
            out = np.asarray(compiled(*args))
            del args
            if buffers and overlaps(out, buffers):
                out = out.copy()  # the buffers are reused for the next leaves
        finally:
            inputs.give_back(buffers)
        counter.finished(i, read, time.perf_counter() - start - read)
        return out

    return read
