"""How a session runs ops on its working set: read once, run once, time after (Panel-free).

The session's loaded trees stay lazy until an op needs them; then `HeldRuns` asks its
`WorkingSet` for them packed on the chosen device (read once, reused by every later run, a
weight change included), runs the op ONCE and hands the result to the page; the timed repeats
follow as separate work that the next change cancels (`generation`). Inputs and output that do
not fit the memory budget are not read at all: a weighted sum then streams into a file
(`inspector.weighted_sum(..., out=)`) and its result opens lazily.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading

import inspector
from inspector.core.packed import PackedTree
from inspector.core.working_set import WorkingSet


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


def _output_bytes(op: str, inputs: list) -> int:
    sizes = [inspector.describe(t)[0].nbytes for t in inputs]
    return sum(sizes) if op == "stack" else max(sizes, default=0)


class HeldRuns:
    """One session's working set and the bookkeeping of its interactive runs."""

    def __init__(self):
        self.working = WorkingSet()
        self._generation = 0
        self._lock = threading.Lock()
        self.streamed_dir = None

    def new_generation(self) -> int:
        """Marks a new run: timed repeats of older runs stop at their next repeat."""
        with self._lock:
            self._generation += 1
            return self._generation

    def current(self, generation: int) -> bool:
        return generation == self._generation

    def args_for(self, job, trees: dict, device):
        """Returns `(args, streamed)`: the job's arguments with each loaded tree replaced by its
        working-set copy, or `(None, True)` when they do not fit the budget.

        Checkpoints (lazy leaves) and packed trees are held; other trees (sharded over a mesh,
        or with non-array leaves) are passed as they are.
        """
        flat = [a for arg in job.args for a in (arg if isinstance(arg, list | tuple) else [arg])]
        ids = {id(a) for a in flat}
        by_id = {id(t.tree): n for n, t in trees.items() if id(t.tree) in ids and _holdable(t.tree)}
        if not by_id:
            return job.args, False
        inputs = [trees[n].tree for n in by_id.values()]
        held = self.working.hold({n: trees[n].tree for n in by_id.values()}, device,
                                 extra_bytes=_output_bytes(job.op, inputs))
        if held is None:
            return None, True

        def swap(arg):
            if id(arg) in by_id:
                return held[by_id[id(arg)]]
            if isinstance(arg, list | tuple) and any(id(a) in by_id for a in arg):
                return type(arg)(swap(a) for a in arg)
            return arg

        return tuple(swap(a) for a in job.args), False

    def run_once(self, job, trees: dict, device):
        """Runs the job once on its held inputs and returns its `RunResult` (too big for the
        budget, a weighted sum is streamed into a file and its result opens lazily)."""
        args, streamed = self.args_for(job, trees, device)
        if streamed:
            return self._streamed(job, device)
        return inspector.run(job.fn, *args, device=device, repeats=1, warmup=0)

    def repeat(self, job, trees: dict, device, repeats: int, generation: int,
               first) -> object:
        """The timed repeats of a run made by `run_once` (its result kept), one execution at a
        time; raises `Cancelled` once a newer run started."""
        if first.cost.get("streamed"):
            return first
        args, streamed = self.args_for(job, trees, device)
        if streamed:
            return first
        times = []
        for _ in range(repeats):
            if not self.current(generation):
                raise Cancelled
            rr = inspector.run(job.fn, *args, device=device, repeats=1, warmup=0)
            times.extend(rr.times)
        return dataclasses.replace(first, times=tuple(times))

    def _streamed(self, job, device):
        if job.op != "weighted_sum":
            raise inspector.InspectorError(
                f"{job.op} needs more memory than the budget allows "
                f"({inspector.core.working_set.budget() / 1e9:.1f} GB): raise the budget in "
                "the sidebar, or run it from Python.")
        if self.streamed_dir is None:
            self.streamed_dir = tempfile.mkdtemp(prefix="inspector-streamed-")
        trees, weights = job.args
        path = os.path.join(self.streamed_dir, f"result_{self._generation}.safetensors")
        import time

        start = time.perf_counter()
        result = inspector.weighted_sum(trees, weights, device=device, out=path)
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
        self.new_generation()
        self.working.close()
        if self.streamed_dir:
            import shutil

            shutil.rmtree(self.streamed_dir, ignore_errors=True)
            self.streamed_dir = None
