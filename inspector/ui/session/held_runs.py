"""How a session runs ops on its working set: read once, run once, time after (Panel-free).

The session's loaded trees stay lazy until an op needs them; then `HeldRuns` asks its
`WorkingSet` for them packed on the chosen device (read once, reused by every later run, a
weight change included), runs the op ONCE and hands the result to the page; the timed repeats
follow as separate work that the next change cancels (`generation`). Inputs and output that do
not fit the memory budget are not read at all: a weighted sum then streams into a file
(`inspector.weighted_sum(..., out=)`, its progress reported) and its result opens lazily.

A re-run (a weight change) and each timed repeat write their output into the buffers of the
result they replace (`out_buffers.donating`): one output's worth of memory, whatever the number
of runs, and no fresh pages to fault in. A repeat puts its buffers back into the result the
page shows (same values), so that result stays readable.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading
import time

import inspector
from inspector.core import host_read, working_set
from inspector.core.out_buffers import donating
from inspector.core.packed import PackedTree
from inspector.core.working_set import WorkingSet
from inspector.ui.session import launcher_warm
from inspector.ui.session.formatting import human_bytes


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


def _output_bytes(op: str, inputs: list) -> int:
    sizes = [inspector.describe(t)[0].nbytes for t in inputs]
    return sum(sizes) if op == "stack" else max(sizes, default=0)


class HeldRuns:
    """One session's working set and the bookkeeping of its interactive runs."""

    def __init__(self):
        self.working = WorkingSet()
        self._generation = 0
        self._lock = threading.Lock()
        self._closed = False
        self.streamed_dir = None
        self.last_read = (0, 0.0)  # (bytes, seconds) the last hold read from files
        self._last = None  # the last result (packed), whose buffers the next run may reuse
        self._reusable_result = False  # whether the last execution's result may be `_last`

    def new_generation(self) -> int:
        """Marks a new run: timed repeats of older runs stop at their next repeat."""
        with self._lock:
            self._generation += 1
            return self._generation

    def current(self, generation: int) -> bool:
        return generation == self._generation

    def pin(self, result) -> None:
        """Keeps `result`'s buffers from being reused by later runs (it was kept as a tree)."""
        if self._last is result:
            self._last = None

    def _reusable(self, inputs: tuple) -> list:
        """The last result's buffers that a new output may take (none that is an input)."""
        if not isinstance(self._last, PackedTree):
            return []
        used = {_address(b) for a in _flat(inputs) if isinstance(a, PackedTree)
                for b in a.buffers.values()}
        return [b for b in self._last.buffers.values() if _address(b) not in used]

    def args_for(self, job, trees: dict, device, reused: int = 0):
        """Returns `(args, streamed)`: the job's arguments with each loaded tree replaced by its
        working-set copy, or `(None, True)` when they do not fit the budget (with the output,
        less the `reused` bytes of an earlier result it is written into).

        Checkpoints (lazy leaves) and packed trees are held; other trees (sharded over a mesh,
        or with non-array leaves) are passed as they are.
        """
        if self._closed:  # the session ended while this run waited: read nothing again
            raise Cancelled
        self.last_read = (0, 0.0)
        flat = _flat(job.args)
        ids = {id(a) for a in flat}
        by_id = {id(t.tree): n for n, t in trees.items() if id(t.tree) in ids and _holdable(t.tree)}
        if not by_id:
            return job.args, False
        inputs = [trees[n].tree for n in by_id.values()]
        extra = max(0, _output_bytes(job.op, inputs) - reused)
        start, before = time.perf_counter(), host_read.stats()["bytes"]
        held = self.working.hold({n: trees[n].tree for n in by_id.values()}, device,
                                 extra_bytes=extra)
        # what this hold read from files (other sessions' reads may add to the count)
        self.last_read = (host_read.stats()["bytes"] - before, time.perf_counter() - start)
        if held is None:
            return None, True
        launcher_warm.pin(held, {n: trees[n].tree for n in by_id.values()}, device)

        def swap(arg):
            if id(arg) in by_id:
                return held[by_id[id(arg)]]
            if isinstance(arg, list | tuple) and any(id(a) in by_id for a in arg):
                return type(arg)(swap(a) for a in arg)
            return arg

        return tuple(swap(a) for a in job.args), False

    def _execute(self, job, trees: dict, device):
        """`(RunResult, donated)`: one execution on the held inputs, its output written into
        the last result's buffers where they fit; `(None, False)` if it must stream."""
        reusable = self._reusable(job.args)
        args, streamed = self.args_for(job, trees, device,
                                       reused=sum(b.nbytes for b in reusable))
        if streamed:
            return None, False
        reusable = self._reusable(args)  # not one of the held inputs either
        with donating(reusable):
            rr = inspector.run(job.fn, *args, device=device, repeats=1, warmup=0)
        read_bytes, read_seconds = self.last_read
        if read_bytes:  # the working set read the files: the timing card's read line
            rr = dataclasses.replace(rr, read_bytes=rr.read_bytes + read_bytes,
                                     read_seconds=rr.read_seconds + read_seconds)
        # A result sharing an input's buffer (an index keeping a whole axis) is never handed
        # to a later run to write into.
        self._reusable_result = isinstance(rr.result, PackedTree) and not _aliases(rr.result,
                                                                                   args)
        return rr, any(b.is_deleted() for b in reusable)

    def run_once(self, job, trees: dict, device, progress=None):
        """Runs the job once on its held inputs and returns its `RunResult` (too big for the
        budget, a weighted sum is streamed into a file, reporting to `progress`, and its
        result opens lazily)."""
        self._reusable_result = False
        rr, _ = self._execute(job, trees, device)
        if rr is None:
            rr = self._streamed(job, device, progress)
        if self._closed:  # the session ended while it ran: nobody will see it
            _free(rr.result)
            raise Cancelled
        self._last = rr.result if self._reusable_result else None
        return rr

    def repeat(self, job, trees: dict, device, repeats: int, generation: int,
               first) -> object:
        """The timed repeats of a run made by `run_once` (its result kept), one execution at a
        time; raises `Cancelled` once a newer run started."""
        if first.cost.get("streamed"):
            return first
        times = []
        for _ in range(repeats):
            if not self.current(generation):
                raise Cancelled
            rr, donated = self._execute(job, trees, device)
            if rr is None:
                return first
            times.extend(rr.times)
            if donated:  # the shown result's buffers now hold this run's (equal) output
                first.result.buffers.update(rr.result.buffers)
            if self._closed:
                _free(rr.result)
                _free(first.result)
                raise Cancelled
        return dataclasses.replace(first, times=tuple(times))

    def _streamed(self, job, device, progress=None):
        if job.op != "weighted_sum":
            raise inspector.InspectorError(
                f"{job.op} needs more memory than the budget allows "
                f"({human_bytes(working_set.budget())}): raise the budget in "
                "the sidebar, or run it from Python.")
        if self.streamed_dir is None:
            self.streamed_dir = tempfile.mkdtemp(prefix="inspector-streamed-")
        trees, weights = job.args
        path = os.path.join(self.streamed_dir, f"result_{self._generation}.safetensors")
        start = time.perf_counter()
        result = inspector.weighted_sum(trees, weights, device=device, out=path,
                                        progress=progress)
        seconds = time.perf_counter() - start
        nbytes = inspector.describe(result)[0].nbytes
        return inspector.RunResult(
            op=job.op, result=result, device=str(device), compile_seconds=0.0, n_compiled=0,
            n_kernels=len(inspector.describe(result)), place_seconds=0.0, times=(seconds,),
            bytes_read=len(trees) * nbytes, bytes_written=nbytes,
            cost={"streamed": 1.0}, read_seconds=0.0)

    def held(self) -> list:
        """What the working set holds now (`Holding`s)."""
        return self.working.holdings()

    def close(self) -> None:
        """Releases the working set and any streamed results (a session ending)."""
        self._closed = True
        self.new_generation()
        # Freed now, whoever still refers to it (work in flight, callbacks of the ended page):
        # a result is this session's own (a kept one is a tree, pinned, and not freed here).
        _free(self._last)
        self._last = None
        self.working.close()
        if self.streamed_dir:
            import shutil

            shutil.rmtree(self.streamed_dir, ignore_errors=True)
            self.streamed_dir = None
