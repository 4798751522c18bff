"""`JobRunner`: how a session runs its jobs on its working set: read once, plan once, run
once, time after (Panel-free). It names no op: what is special about one (its arguments, its
output size, whether it streams) is its settings' (`Job.settings`).

The session's loaded trees stay lazy until an op needs them; then the runner asks its
`WorkingSet` for them packed on the chosen device (read once, reused by every later run, a
weight change included), plans the op (inputs validated), runs it ONCE and hands the result to
the page; the timed repeats follow as separate work that the next change cancels
(`generation`), each executing the plan the first execution made (`PlannedRun`). Inputs and
output that do not fit the memory budget are not read at all: an op whose library function
takes `out=` then streams into a file (its progress reported; read, compute and write timed
apart: a `StreamedRun`) and its result opens lazily.

A re-run (a weight change) and each timed repeat write their output into the buffers of the
result they replace (`out_buffers.donating`, then the plan's carried outputs): one output's
worth of memory, whatever the number of runs, and no fresh pages to fault in. A repeat puts
its buffers back into the result the page shows (same values), so that result stays readable.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading
import time

import inspector
from inspector.core import host_read, in_flight, working_set
from inspector.core.out_buffers import donating
from inspector.core.packed import PackedTree
from inspector.core.runner import PlannedRun, thread_compiles
from inspector.core.working_set import WorkingSet
from inspector.ui.session import launcher_warm
from inspector.ui.session.formatting import human_bytes
from inspector.ui.session.run_marks import mark


class Cancelled(Exception):
    """The timed repeats were overtaken by a newer run."""


def _holdable(tree) -> bool:
    """Packed trees, and checkpoints whose leaves are all arrays (lazy ones included)."""
    if isinstance(tree, PackedTree):
        return True
    import jax

    leaves = jax.tree.leaves(tree)
    lazy = [isinstance(x, inspector.LazyArray) for x in leaves]
    return any(lazy) and all(
        is_lazy or (hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(
            getattr(x, "sharding", None), jax.sharding.NamedSharding))
        for x, is_lazy in zip(leaves, lazy, strict=True))


def _free(result) -> None:
    """Frees a packed result's device buffers at once (JAX arrays deleted)."""
    if isinstance(result, PackedTree):
        for buffer in result.buffers.values():
            if hasattr(buffer, "delete") and not buffer.is_deleted():
                buffer.delete()


def _aliases(result: PackedTree, args) -> bool:
    used = {_address(b) for a in _flat(args) if isinstance(a, PackedTree)
            for b in a.buffers.values()}
    return any(_address(b) in used for b in result.buffers.values())


def _address(buffer):
    """Where a buffer's memory is (two array objects can share it: a device_put no-op)."""
    try:
        return buffer.unsafe_buffer_pointer()
    except Exception:  # several shards, or not a JAX array
        return id(buffer)


def _flat(args) -> list:
    return [a for arg in args for a in (arg if isinstance(arg, list | tuple) else [arg])]


def _packed_parts(result) -> list | None:
    """A packed result's parts (itself, or each tree of a list of packed trees: an unstack's),
    None for any other result."""
    parts = list(result) if isinstance(result, list | tuple) else [result]
    return parts if parts and all(isinstance(p, PackedTree) for p in parts) else None


def _refill(shown, new) -> None:
    """Puts the buffers of `new` (an execution's packed result) into `shown` (the result the
    page shows, whose buffers that execution took): `shown` stays readable, same values."""
    for a, b in zip(_packed_parts(shown), _packed_parts(new), strict=True):
        a.buffers.update(b.buffers)


@dataclasses.dataclass(frozen=True)
class StreamedRun(inspector.RunResult):
    """A run streamed into a file (its inputs and output did not fit the memory budget):
    `times` is the one pass over the whole tree, `read_seconds` of it waiting for input
    leaves to be read, `compute_seconds` in the kernels, `compile_seconds` compiling them and
    `write_seconds` the rest (writing the file). No kernel count: one call per output leaf."""

    compute_seconds: float = 0.0
    write_seconds: float = 0.0
    path: str = ""


class JobRunner:
    """One session's runner: its working set, and the runs of its jobs on it."""

    def __init__(self):
        self.working = WorkingSet()
        self._generation = 0
        self._lock = threading.Lock()
        self._closed = False
        self.streamed_dir = None
        # (bytes, seconds, bytes of those left in their files' maps) the last hold read
        self.last_read = (0, 0.0, 0)
        self._last = None  # the last result (packed), whose buffers the next run may reuse
        self._planned = None  # (first RunResult, PlannedRun): the plan its repeats execute
        self._pinned = None  # the result last kept as a tree: no run writes into it again
        self._warm = False  # the last result came from the launcher's trees only
        self._handed = None  # the result given to the next session (once), if any
        self._orphan = None  # the last result `close` left to the execution in flight
        # held while an execution writes into the last result's buffers (the worker thread),
        # so `close` hands them to the next session only when no execution is in flight (else
        # the execution does, once done)
        self._executing = threading.Lock()

    def new_generation(self) -> int:
        """Marks a new run: timed repeats of older runs stop at their next repeat."""
        with self._lock:
            self._generation += 1
            self._planned = None  # its inputs and outputs are the next run's to reuse
            return self._generation

    def current(self, generation: int) -> bool:
        return generation == self._generation

    def pin(self, result) -> None:
        """Keeps `result`'s buffers from being reused by later runs (it was kept as a tree)."""
        if self._last is result:
            self._last = None
        self._pinned = result  # its timed repeats, if any, go on into fresh buffers

    def _reusable(self, inputs) -> list:
        """The last result's buffers that a new output may take (none that is an input)."""
        if not isinstance(self._last, PackedTree):
            return []
        used = {_address(b) for a in _flat(inputs) if isinstance(a, PackedTree)
                for b in a.buffers.values()}
        return [b for b in self._last.buffers.values() if _address(b) not in used]

    def inputs(self, job, loaded: dict, device, reused: int = 0,
               reading=None) -> list | None:
        """The job's input trees, in order, each loaded tree replaced by its working-set copy;
        None when they do not fit the budget (with the output, less the `reused` bytes of an
        earlier result it is written into).

        Checkpoints (lazy leaves) and packed trees are held; other trees (sharded over a mesh,
        or with non-array leaves) are passed as they are. `reading` (see `WorkingSet.hold`)
        hears of each tree read from its files.
        """
        if self._closed:  # the session ended while this run waited: read nothing again
            raise Cancelled
        self.last_read = (0, 0.0, 0)
        trees = {n: loaded[n].tree for n in job.trees}
        shape_only = set(job.settings.structure_only)
        skip = {n for i, n in enumerate(job.trees) if i in shape_only} - {
            n for i, n in enumerate(job.trees) if i not in shape_only}  # never read
        holdable = {n: t for n, t in trees.items() if n not in skip and _holdable(t)}
        if holdable:
            extra = max(0, job.settings.output_bytes([trees[n] for n in job.trees]) - reused)
            start, before = time.perf_counter(), host_read.stats()
            held = self.working.hold(holdable, device, extra_bytes=extra, reading=reading,
                                     mapped=job.settings.reads_in_place)
            # what this hold read from files (other sessions' reads may add to the count),
            # and how much of it stays in the files' maps
            after = host_read.stats()
            self.last_read = (after["bytes"] - before["bytes"], time.perf_counter() - start,
                              after["mapped"] - before["mapped"])
            if held is None:
                return None
            launcher_warm.pin(held, holdable, device)
            trees.update(held)
        return [trees[n] for n in job.trees]

    def run_once(self, job, loaded: dict, device, progress=None, reading=None):
        """Runs the job once on its held inputs and returns its `RunResult`: planned, compiled
        and executed once, the plan kept for `repeat`. Too big for the budget, an op that
        streams (`OpSettings.streams`) is streamed into a file, reporting to `progress`, and
        its result opens lazily (a `StreamedRun`). `reading` hears of each input tree read
        from its files (`WorkingSet.hold`)."""
        self._planned = None
        reusable_result = False
        plain = [loaded[n].tree for n in job.trees]
        warm = all(launcher_warm.launched(t) for t in plain)
        # A session's first run on the launcher's trees writes into the buffers of a closed
        # session's last result (same op and trees: same output), not into fresh memory.
        spare = launcher_warm.take_spare() if warm and self._last is None else []
        reusable = self._reusable(plain) + spare
        mark(f"spare taken ({len(spare)} buffers)")
        inputs = self.inputs(job, loaded, device, reused=sum(b.nbytes for b in reusable),
                             reading=reading)
        mark(f"inputs held (read {self.last_read[0] / 1e9:.2f} GB)")
        if inputs is None:
            rr, planned = self._streamed(job, plain, device, progress), None
        else:
            reusable = self._reusable(inputs) + spare  # not one of the held inputs either
            fn, args, kwargs = job.arguments(inputs)
            with donating(reusable):  # the output is planned into the last result's buffers
                planned = PlannedRun(fn, *args, device=device, **kwargs)
                mark(f"planned (kernels {planned._kernel_seconds:.3f} s, place "
                     f"{planned.place_seconds:.3f} s)")
                with in_flight.executing():  # background copies wait (`settle`)
                    result, seconds = planned.execute()
                mark("executed")
            rr = planned.result(result, [seconds])
            self.working.settle()  # files mapped for this run: packed copies follow, shortly
            read_bytes, read_seconds, mapped = self.last_read
            if read_bytes:  # the working set read the files: the timing card's read line
                rr = dataclasses.replace(rr, read_bytes=rr.read_bytes + read_bytes,
                                         read_seconds=rr.read_seconds + read_seconds,
                                         mapped_bytes=rr.mapped_bytes + mapped)
            # A result sharing an input's buffer (an index keeping a whole axis) is never
            # handed to a later run to write into.
            reusable_result = isinstance(rr.result, PackedTree) and not _aliases(rr.result,
                                                                                 args)
        with self._executing:
            if self._closed:  # the session ended while it ran: nobody will see it; a
                # result of the launcher's trees is the next session's output (`close`
                # left it to this execution), any other is freed
                self._after_close(rr.result, warm and reusable_result)
                raise Cancelled
            self._last = rr.result if reusable_result else None
            self._warm = warm
        if planned is not None:
            self._planned = (rr, planned)
        return rr

    def repeat(self, first, repeats: int, generation: int):
        """The timed repeats of the run that gave `first` (made by `run_once`, its result
        shown): each executes the plan that run made (no planning, no validating again),
        writing into the shown result's buffers; raises `Cancelled` once a newer run
        started. Returns `first` with the repeats' times."""
        planned = self._planned[1] if self._planned and self._planned[0] is first else None
        if planned is None:  # streamed, kept, or overtaken
            return first
        refill, detached = _packed_parts(first.result) is not None, False
        times = []
        for _ in range(repeats):
            if not self.current(generation):
                raise Cancelled
            if not detached and (not refill or self._pinned is first.result):
                # a plain result cannot take new buffers, a kept one must not: the repeats
                # write into fresh ones
                planned.detach()
                refill, detached = False, True
            with self._executing:
                if self._closed:
                    raise Cancelled
                with in_flight.executing():
                    result, seconds = planned.execute()
                times.append(seconds)
                if refill:  # the shown result's buffers now hold this run's (equal) output
                    _refill(first.result, result)
            if self._closed:  # it ended during this execution: free what close did not take
                if not refill:
                    _free(result)
                # the shown result, refilled: the next session's output when it came from the
                # launcher's trees (`close` could not hand it on while this execution wrote
                # into it), else freed
                self._after_close(first.result, refill and self._warm)
                raise Cancelled
        with self._lock:
            if self._planned is not None and self._planned[1] is planned:
                self._planned = None  # timed: its inputs and spare outputs go
        return dataclasses.replace(first, times=tuple(times))

    def _streamed(self, job, trees: list, device, progress=None) -> StreamedRun:
        if not job.settings.streams:
            raise inspector.InspectorError(
                f"{job.op} needs more memory than the budget allows "
                f"({human_bytes(working_set.budget())}): raise the budget in "
                "the sidebar, or run it from Python.")
        if self.streamed_dir is None:
            self.streamed_dir = tempfile.mkdtemp(prefix="inspector-streamed-")
        path = os.path.join(self.streamed_dir, f"result_{self._generation}.safetensors")
        last = []

        def report(p):
            last[:] = [p]
            if progress is not None:
                progress(p)

        n_before, compile_before = thread_compiles()
        start = time.perf_counter()
        result = job.settings.stream(trees, job.call.options, device, path, report)
        seconds = time.perf_counter() - start
        n_after, compile_after = thread_compiles()
        read = last[0].read_seconds if last else 0.0
        compute = last[0].compute_seconds if last else 0.0
        compiled = compile_after - compile_before
        nbytes = inspector.describe(result)[0].nbytes
        read_bytes = sum(inspector.describe(t)[0].nbytes for t in trees)
        return StreamedRun(
            op=job.op, result=result, device=str(device), compile_seconds=compiled,
            n_compiled=n_after - n_before, n_kernels=0, place_seconds=0.0, times=(seconds,),
            bytes_read=read_bytes, bytes_written=nbytes, cost={}, read_seconds=read,
            read_bytes=read_bytes, compute_seconds=compute,
            write_seconds=max(0.0, seconds - read - compute - compiled), path=path)

    def _hand_on(self, result) -> bool:
        """Gives `result`'s buffers to the next session's first run (once per session:
        whichever of `close` and a finishing execution comes first); False if already given."""
        with self._lock:
            if self._handed is not None:
                return False
            self._handed = result
        launcher_warm.give_spare([b for b in result.buffers.values()
                                  if hasattr(b, "is_deleted") and not b.is_deleted()])
        return True

    def _after_close(self, result, handable: bool) -> None:
        """An execution that finished after `close` (which did not wait for it): hands
        `result` on to the next session when `handable`, else frees it; frees what `close`
        left to it (the result that execution replaced), unless that is `result`."""
        with self._lock:
            orphan, self._orphan = self._orphan, None
        if not (handable and isinstance(result, PackedTree) and
                (self._hand_on(result) or self._handed is result)):
            _free(result)
        if orphan is not None and orphan is not result:
            _free(orphan)

    def held(self) -> list:
        """What the working set holds now (`Holding`s)."""
        return self.working.holdings()

    def close(self) -> None:
        """Releases the working set and any streamed results (a session ending)."""
        self._closed = True
        self.new_generation()
        self._planned = None
        # Freed now, whoever still refers to it (work in flight, callbacks of the ended page):
        # a result is this session's own (a kept one is a tree, pinned, and not freed here);
        # one of the launcher's trees goes to the next session, to write its output into.
        # Never waiting for an execution writing into it (this is the server's event loop):
        # that execution hands it on once done.
        last, self._last = self._last, None
        if self._warm and isinstance(last, PackedTree):
            # Left to an execution in flight (a timed repeat writing into it, or a run), which
            # hands it on or frees it once done (`_after_close`); taken back here if none is.
            with self._lock:
                self._orphan = last
            if self._executing.acquire(blocking=False):
                try:
                    with self._lock:
                        orphan, self._orphan = self._orphan, None
                    # an execution that finished meanwhile may have handed on its own result
                    if orphan is not None and not self._hand_on(orphan) and \
                            self._handed is not orphan:
                        _free(orphan)
                finally:
                    self._executing.release()
        else:
            _free(last)
        self.working.close()
        if self.streamed_dir:
            import shutil

            shutil.rmtree(self.streamed_dir, ignore_errors=True)
            self.streamed_dir = None
