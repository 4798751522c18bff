"""Lazy results: an op's result whose leaves are computed one at a time, when each is read.

A result larger than memory cannot be held, but it can be written: `lazy_result(plan)` turns
a leaf-by-leaf plan (one kernel call per output leaf, as `weighted_sum`, `stack` and `index`
make for plain or lazy trees) into a tree of `LazyArray`s. Reading one leaf reads only that
leaf's inputs, runs its (cached) kernel and hands back a host array; nothing else is kept. A
writer that goes leaf by leaf (`inspector.save`) then holds one output leaf and its inputs at a
time: that is how `weighted_sum(..., out=path)` streams.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import jax
import numpy as np

from inspector.core.errors import InspectorError
from inspector.core.lazy import LazyArray
from inspector.core.output_slots import OutputSlot, SlotPool
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


def lazy_result(plan: Plan, progress: Callable[[StreamProgress], None] | None = None,
                ahead: bool = False):
    """Returns the plan's result as a tree of `LazyArray`s, each computed when it is read.

    Kernels are compiled now (so shapes, dtypes and compile errors are known at once); no
    input data is read until a leaf is. `progress`, if given, is called after each leaf is
    computed (in the reading thread) with a `StreamProgress`. With `ahead`, reading leaf `i`
    starts computing leaf `i + 1` in a worker thread (for a writer that reads every leaf in
    order: the next kernel runs on the other core meanwhile; at most one leaf ahead).

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
    placed = _Shared(plan.device)
    slots = SlotPool(plan.device)
    placeholders = [_Marker(i) for i in range(len(plan.calls))]
    skeleton = plan.assemble(placeholders)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(skeleton)
    out = []
    computing = _Ahead() if ahead else None
    for path, leaf in leaves:
        if isinstance(leaf, _Marker):
            info = infos[leaf.i]
            name = f"{plan.op}{jax.tree_util.keystr(path)}"
            read = _reader(plan, leaf.i, counter, inputs, placed, slots)
            if computing is not None:
                read = computing.wrap(leaf.i, read)
            out.append(LazyArray(info.shape, info.dtype, read, source=name))
        else:
            out.append(leaf)  # an input leaf the op leaves as it is (index with ':')
    return jax.tree_util.tree_unflatten(treedef, out)


_AHEAD: dict[str, ThreadPoolExecutor] = {}
_AHEAD_LOCK = threading.Lock()


class _Ahead:
    """Computes the leaf after the one being read in a worker thread (`lazy_result(ahead=)`):
    the ties merge's kernels are single-threaded, so the next leaf's runs on the other core
    while this one is written (and the writer's copy overlaps both)."""

    def __init__(self):
        self.readers: dict[int, Callable[[], np.ndarray]] = {}
        self.pending: dict[int, Future] = {}
        self.lock = threading.Lock()

    def wrap(self, i: int, read: Callable[[], np.ndarray]) -> Callable[[], np.ndarray]:
        self.readers[i] = read

        def get() -> np.ndarray:
            with self.lock:
                future = self.pending.pop(i, None)
                if not self.pending and i + 1 in self.readers:  # one leaf ahead at most
                    self.pending[i + 1] = _worker().submit(self.readers[i + 1])
            return read() if future is None else future.result()

        get.call_index = i
        return get


def _worker() -> ThreadPoolExecutor:
    with _AHEAD_LOCK:
        if "pool" not in _AHEAD:
            _AHEAD["pool"] = ThreadPoolExecutor(1, "inspector-compute-ahead")
        return _AHEAD["pool"]


class _Marker:
    """Stands for output `i` while the plan assembles its result's structure."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


class _Shared:
    """Small host arguments that several calls share (an op's weights), each put on the
    device once per stream rather than once per call (~0.1 s over 196 calls here). An array
    is kept once a second call passes it; at most `LIMIT` of them, of at most `NBYTES`."""

    LIMIT = 64
    NBYTES = 1 << 16

    def __init__(self, device):
        self.device = device
        self._seen: set[int] = set()
        self._placed: dict[int, tuple[np.ndarray, jax.Array]] = {}
        self._lock = threading.Lock()

    def get(self, value) -> jax.Array:
        if not isinstance(value, np.ndarray) or value.nbytes > self.NBYTES:
            return jax.device_put(np.asarray(value), self.device)
        key = id(value)
        with self._lock:
            hit = self._placed.get(key)
            if hit is not None and hit[0] is value:
                return hit[1]
            again = key in self._seen
            self._seen.add(key)
        placed = jax.device_put(value, self.device)
        if again and len(self._placed) < self.LIMIT:
            with self._lock:
                self._placed[key] = (value, placed)  # the array held: its id stays its own
        return placed


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
            # in the lock: with `ahead`, two threads finish leaves; reports stay in order
            self.progress(report)


def _reader(plan: Plan, i: int, counter: _Counter, inputs: StreamInputs, placed: _Shared,
            slots: SlotPool):
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
            slotted = any(isinstance(a, OutputSlot) for a in values)
            args: list = [None] * len(values)
            aliased = []  # arguments on host memory just read: in the pool's buffers (their
            # index) or read by their own reader (-1)
            for j, a in enumerate(values):
                if isinstance(a, OutputSlot):
                    args[j] = slots.take(a)  # donated: the result lands in a reused buffer
                elif isinstance(a, LazyArray):
                    begin = time.perf_counter()
                    host = np.asarray(a)
                    read += time.perf_counter() - begin
                    args[j] = jax.device_put(host, plan.device)
                    aliased.append(-1)  # may alias `host` too
                    del host
                elif isinstance(a, jax.Array):
                    args[j] = a
                elif isinstance(a, np.ndarray) and overlaps(a, buffers):
                    aliased.append(j)
                else:
                    args[j] = placed.get(a)
            in_pool = [j for j in aliased if j >= 0]
            if in_pool:  # one batched call: on the CPU the read buffers are used as they are
                for j, x in zip(in_pool, jax.device_put([values[j] for j in in_pool],
                                                        plan.device, may_alias=True),
                                strict=True):
                    args[j] = x
            result = compiled(*args)
            out = slots.lend(result) if slotted else np.asarray(result)  # waits for the kernel
            del result
            if buffers and overlaps(out, buffers):
                out = out.copy()  # the buffers are reused for the next leaves
            del args
            if aliased:
                # JAX defers releasing arrays that alias host memory (the leaves just read) to
                # its collector hook: run it, so they are gone before the next call reads
                gc.collect(0)
        finally:
            inputs.give_back(buffers)
        counter.finished(i, read, time.perf_counter() - start - read)
        return out

    read.call_index = i  # which call gives this leaf (`chunked_stream.chunk_pieces`)
    return read

