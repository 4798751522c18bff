"""`run(op, *args)`: an op compiled ahead of time, then timed honestly on a chosen device."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import jax

from inspector.core import placement
from inspector.core.compile_count import thread_compiles
from inspector.core.devices import device_name, devices, resolve_device
from inspector.core.errors import InspectorError
from inspector.core.host_read import read_leaves
from inspector.core.lazy import LazyArray
from inspector.core.mapped_leaves import MappedLeaf, map_calls, mapped_views
from inspector.core.op import Op, block, op_of, run_once
from inspector.core.out_buffers import output_buffer
from inspector.core.plan import Call, Plan

__all__ = ["PlannedRun", "RunResult", "as_op", "block", "devices", "resolve_device", "run",
           "run_once"]


@dataclass(frozen=True)
class RunResult:
    """What one `run` did, and what it gave back.

    Attributes:
        op: the op's name.
        result: the result tree (or packed tree).
        device: where the result lives (`cpu:0`).
        compile_seconds: time spent compiling now: the op's kernels, plus XLA's time for any
            other compilation the run caused (0.0 when nothing compiled).
        n_compiled: XLA compilations this run caused, counted from JAX's backend-compile
            events: the op's kernels and anything else (0 when all came from the caches).
        n_kernels: kernel calls per execution (independent per-leaf calls of one shape run
            in batches of up to 32, each batch one call).
        place_seconds: time to move the inputs onto the device (not in the timed runs).
        read_seconds: time to read lazy (checkpoint) leaves and move every input onto the
            device, once per run (includes `place_seconds`; never in `times`).
        read_bytes: bytes of lazy leaves read in `read_seconds` (`read_gbps`: their rate).
        mapped_bytes: of `read_bytes`, those left in their files' maps (their pages faulted
            in, not copied: the kernel reads them there; `mapped_groups.py`).
        times: each timed execution, in seconds, each ended by `block_until_ready`.
        median_seconds, min_seconds, max_seconds: over `times`.
        bytes_read, bytes_written: the op's own input and output bytes.
        gbps: (bytes_read + bytes_written) / median, in GB/s (1e9 bytes): kernel time only.
        cost: XLA's cost analysis summed over the kernels (`flops`, `bytes accessed`) when
            the backend gives one, else empty.
        mesh: the mesh the op ran on as SPMD programs (`data=4, model=2`) when its inputs
            were sharded, else None (then `device` names the one device).
    """

    op: str
    result: object
    device: str
    compile_seconds: float
    n_compiled: int
    n_kernels: int
    place_seconds: float
    times: tuple[float, ...]
    bytes_read: int
    bytes_written: int
    cost: dict
    read_seconds: float = 0.0
    mesh: str | None = None
    read_bytes: int = 0
    mapped_bytes: int = 0

    @property
    def read_gbps(self) -> float:
        """Bytes of lazy (checkpoint) leaves read per second of `read_seconds`, in GB/s
        (0.0 when nothing was read): the file side, apart from the kernels' `gbps`."""
        return self.read_bytes / self.read_seconds / 1e9 if self.read_bytes and \
            self.read_seconds > 0 else 0.0

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.times)

    @property
    def min_seconds(self) -> float:
        return min(self.times)

    @property
    def max_seconds(self) -> float:
        return max(self.times)

    @property
    def gbps(self) -> float:
        return (self.bytes_read + self.bytes_written) / self.median_seconds / 1e9


def as_op(op) -> Op:
    """The `Op` to run for `op`: an `Op` itself, the `Op` of a public op function
    (`inspector.weighted_sum`), or any other JAX function as a one-kernel op."""
    found = op_of(op)
    if found is not None:
        return found
    if not callable(op):
        raise InspectorError(
            f"Cannot run {op!r}: give an inspector op (inspector.weighted_sum, an inspector.Op) "
            "or a JAX function of pytrees.")
    return Op(getattr(op, "__name__", "function"),
              lambda *args, device=None, **kwargs: _function_plan(op, args, kwargs, device))


def run(op: Callable | Op, *args, device=None, repeats: int = 5, warmup: int = 1,
        **kwargs) -> RunResult:
    """Runs `op(*args)` compiled ahead of time on `device`, and times it.

    `op` is an `Op`, one of the inspector's ops (`weighted_sum`, `index`, `stack`, `unstack`)
    or any JAX-traceable function of pytrees. Kernels are cached per (op, structure, shapes, dtypes,
    static index pattern, device): a new weight or index start reuses them. Compilation is
    timed apart; then `warmup` untimed executions, then `repeats` timed ones, each ended by
    `block_until_ready`. The op is planned (its inputs validated) once: every execution runs
    that plan (`PlannedRun`). Lazy leaves are read once, before the executions; on the CPU a
    leaf lying in a local file is not copied but used where it lies, in the file's memory map
    (`mapped_leaves.py`), for this call's executions.

    Raises:
        InspectorError: bad inputs (see each op), or `repeats < 1`.
    """
    if repeats < 1:
        raise InspectorError(f"repeats must be at least 1, got {repeats}.")
    planned = PlannedRun(op, *args, device=device, map_files=True, **kwargs)
    result = None
    for _ in range(warmup):
        result, _ = planned.execute()
    planned.settle()
    times = []
    for _ in range(repeats):
        result, seconds = planned.execute()
        times.append(seconds)
    return planned.result(result, times)


class PlannedRun:
    """An op planned (inputs validated), compiled, read and placed ONCE; `execute()` runs that
    plan again as often as asked, each execution ended by `block_until_ready` and timed.

    `run` is a `PlannedRun` executed `warmup + repeats` times; the app's session keeps one per
    run so that its timed repeats execute the plan its first execution made (no planning or
    validating per repeat). Outputs written into donated buffers are carried from one
    execution to the next (`Call.carry`): each execution's result takes the last one's memory.

    >>> import numpy as np
    >>> from inspector.core.weighted_sum import weighted_sum
    >>> planned = PlannedRun(weighted_sum, [{"w": np.ones(2)}] * 2, [1.0, 2.0])
    >>> result, seconds = planned.execute()
    >>> result["w"].tolist(), planned.result(result, [seconds]).op
    ([3.0, 3.0], 'weighted_sum')
    """

    def __init__(self, op: Callable | Op, *args, device=None, map_files: bool = False,
                 **kwargs):
        self.device = resolve_device(device)
        self._start = thread_compiles()
        self.plan = as_op(op).plan(*args, device=self.device, **kwargs)
        # `run`'s plan on the CPU uses leaves in local files where they lie (mapped_leaves.py);
        # the app's keeps its own copies (a session outlives a file being rewritten)
        self.mapped = map_calls(self.plan) if map_files else 0
        # read lazy leaves once here, not inside every timed repeat, and while the kernels
        # compile (the reads leave the GIL; lowering keeps this thread's JAX settings): file
        # leaves in parallel straight into aligned host buffers (a CPU device then uses them
        # without a copy), remote ones several at once
        # kernels stored by an earlier process first: loading them alongside the reads waits
        # on the page faults (0.03 s a kernel, against 2 ms alone)
        preload_seconds = self.plan.preload()
        reading = _start_reading(self.plan)
        try:
            before = thread_compiles()
            self._kernel_seconds, _ = self.plan.compile()
            self._kernel_seconds += preload_seconds
            self._compiled = (before, thread_compiles())
        finally:
            values, read_seconds = reading.result() if reading is not None else ({}, 0.0)
        place_start = time.perf_counter()
        self.read_bytes = _place_lazy_args(self.plan, values)
        self.place_seconds = self.plan.place()
        self.read_seconds = read_seconds + time.perf_counter() - place_start
        self._settled = None

    def execute(self) -> tuple[object, float]:
        """Runs the plan once: `(result, seconds)`, the result computed (blocked on)."""
        start = time.perf_counter()
        result = block(self.plan.execute())
        return result, time.perf_counter() - start

    def detach(self) -> None:
        """The next execution writes into fresh output buffers, not into the last result's
        (which stays readable: an execution otherwise takes the last one's donated buffers).
        Costs one output's worth of memory, as planning afresh would."""
        for call in self.plan.calls:
            if call.chain:  # its first argument is the previous call's output, at each run
                continue
            for i in call.donate:
                old = call.args[i]
                if isinstance(old, jax.Array):
                    call.args[i] = output_buffer(old.shape, old.dtype, old.sharding
                                                 if call.shardings else self.plan.device)

    def settle(self) -> None:
        """Marks the end of the untimed part: compilations until now count as this run's."""
        if self._settled is None:
            self._settled = thread_compiles()

    def result(self, result, times) -> RunResult:
        """The `RunResult` of `result`, given by executions that took `times` seconds."""
        self.settle()
        (n_start, seconds_start), (_, seconds_before), (_, seconds_after) = \
            self._start, *self._compiled
        n_end, seconds_end = self._settled
        # Compiles outside `plan.compile` (planning, placing, warming up) add XLA's own time.
        other_seconds = (seconds_end - seconds_start) - (seconds_after - seconds_before)
        n_compiled = n_end - n_start
        plan, mesh = self.plan, self.plan.mesh
        return RunResult(
            op=plan.op,
            result=result,
            device=device_name(self.device) if mesh is None else
            f"{mesh.devices.size} device{'s' if mesh.devices.size > 1 else ''}",
            mesh=None if mesh is None else ", ".join(f"{n}={s}" for n, s in mesh.shape.items()),
            compile_seconds=self._kernel_seconds + (other_seconds if n_compiled else 0.0),
            n_compiled=n_compiled,
            n_kernels=plan.dispatches,
            place_seconds=self.place_seconds,
            times=tuple(times),
            bytes_read=plan.bytes_read,
            bytes_written=plan.bytes_written,
            cost=plan.cost(),
            read_seconds=self.read_seconds,
            read_bytes=self.read_bytes,
        )


_ALIAS_MAX = 4096
"""Up to this many lazy leaves, `run` places each read leaf by `jax.device_put(...,
may_alias=True)`, a list per device at once: ~50 us of Python per array here, and on the CPU
no copy (the host buffer is used as it is). More go through `place`'s batched copies, which
compile copy kernels (13 for a 196-tensor GPT-2-like pair: 0.35 s) and copy every byte."""


def _start_reading(plan: Plan) -> Future | None:
    """Starts reading the plan's lazy arguments (each leaf once; a `MappedLeaf` as a view of
    its file's map) in a thread; its result is `({leaf id: array}, seconds)`. None when there
    are none."""
    lazy = {id(a): a for call in plan.calls for a in call.args if isinstance(a, LazyArray)}
    mapped = {id(a): a for call in plan.calls for a in call.args if isinstance(a, MappedLeaf)}
    if not lazy and not mapped:
        return None

    def read():
        start = time.perf_counter()
        values = mapped_views(mapped.values())
        values.update(zip(lazy, read_leaves(lazy.values()), strict=True))
        return values, time.perf_counter() - start

    future: Future = Future()

    def work():
        try:
            future.set_result(read())
        except BaseException as exc:  # raised in the caller, by `result()`
            future.set_exception(exc)

    threading.Thread(target=work, name="inspector-run-read", daemon=True).start()
    return future


def _place_lazy_args(plan: Plan, values: dict) -> int:
    """Replaces each call's lazy arguments by their data (`values`, by leaf id); data bound
    for one device is put there now (aliased on the CPU), the rest is left to `place`.
    Returns the bytes read."""
    lazy = {id(a): a for call in plan.calls for a in call.args
            if isinstance(a, LazyArray | MappedLeaf)}
    if len(lazy) > _ALIAS_MAX:
        for call in plan.calls:
            call.args = [values.get(id(a), a) for a in call.args]
        return sum(a.nbytes for a in lazy.values())
    wanted: dict[tuple, object] = {}  # (leaf id, device) -> None, in order
    for call in plan.calls:
        for j, a in enumerate(call.args):
            if id(a) in values:
                target = call.target(j, plan.device)
                if isinstance(target, jax.Device):
                    wanted[id(a), target] = None
    by_device: dict = {}
    for key in wanted:
        by_device.setdefault(key[1], []).append(key)
    moved = {}
    for target, keys in by_device.items():
        placed = jax.device_put([values[k[0]] for k in keys], target, may_alias=True)
        moved.update(zip(keys, placed, strict=True))
    for call in plan.calls:
        args = []
        for j, a in enumerate(call.args):
            if id(a) in values:
                found = moved.get((id(a), call.target(j, plan.device)))
                args.append(values[id(a)] if found is None else found)
            else:
                args.append(a)
        call.args = args
    return sum(a.nbytes for a in lazy.values())


def _function_plan(fn: Callable, args: tuple, kwargs: dict, device) -> Plan:
    """A plan for an arbitrary JAX function: one kernel over all its flattened inputs."""
    import numpy as np

    from inspector.core.validate import flatten, signature

    leaves, treedef = flatten((args, kwargs))
    key = ("function", fn, signature(leaves, treedef))

    def make():
        def flat_fn(*xs):
            a, kw = treedef.unflatten(xs)
            return fn(*a, **kw)

        return flat_fn

    arrays = [np.asarray(x) if not hasattr(x, "dtype") else x for x in leaves]
    nbytes = sum(int(np.prod(np.shape(x))) * np.dtype(x.dtype).itemsize for x in arrays)
    out_shape = jax.eval_shape(fn, *args, **kwargs)
    written = sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
                  for x in jax.tree_util.tree_leaves(out_shape))
    name = getattr(fn, "__name__", "function")
    call = Call(key, make, arrays)
    sharding = placement.first(arrays)
    if sharding is not None:  # SPMD over the inputs' mesh; JAX propagates the layouts
        call.shardings = tuple(placement.like(placement.replicated(sharding.mesh), arrays))
    return Plan(name, device, [call], lambda outs: outs[0], nbytes, written)
