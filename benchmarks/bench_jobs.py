"""The app's run path (issue 27 item 2): what planning once saves per timed repeat, and a
streamed run's read / compute / write split, in a session state (no browser).

    PYTHONPATH=. python benchmarks/bench_jobs.py [--leaves 2000] [--mb 64]

1. Timed repeats of a weighted sum over two in-memory trees of `--leaves` leaves (packed, as
   the session holds them): a session's repeat (the run's plan, executed) against
   `inspector.run(..., repeats=1, warmup=0)` per repeat (planned and validated each time, as
   the app's repeats were before), medians of 5.
2. A weighted sum of two `--mb` MB safetensors files with the memory budget at 1 KiB: the
   streamed run's total, read wait, compute, compile and write, as the timing card shows them.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import inspector
from inspector.core import working_set
from inspector.ui.session.state import InspectorState


def a_tree(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {f"w{i}": rng.normal(size=(32, 16)).astype(np.float32) for i in range(n)}


def repeats(n: int) -> None:
    a, b = a_tree(n, 0), a_tree(n, 1)
    s = InspectorState(repeats=5)
    s.add_tree("a", a)
    s.add_tree("b", b)
    s.ops["weighted_sum"].param.update(trees=["a", "b"], weights=[0.5, 0.5])
    s.param.trigger("run")
    s.param.trigger("run")  # kernels cached: the second run's repeats are the figure
    planned = statistics.median(s.result.times)
    ta, tb = s.trees["a"].tree, s.trees["b"].tree
    each = []
    for _ in range(5):
        start = time.perf_counter()
        inspector.run(inspector.weighted_sum, [ta, tb], [0.5, 0.5], repeats=1, warmup=0)
        each.append(time.perf_counter() - start)
    print(f"{n} leaves ({'packed' if isinstance(ta, inspector.PackedTree) else 'plain'}): "
          f"repeat executing the run's plan {planned * 1e3:.2f} ms; planned and validated "
          f"per repeat {statistics.median(each) * 1e3:.2f} ms (medians of 5)")
    s.close()


def streamed(mb: int) -> None:
    folder = Path(tempfile.mkdtemp())
    n = mb * 2**20 // 4 // 1024
    for name, seed in (("a", 0), ("b", 1)):
        values = np.random.default_rng(seed).normal(size=(n, 1024)).astype(np.float32)
        inspector.save({"w": values[: n // 2], "v": values[n // 2:]},
                       folder / f"{name}.safetensors")
    s = InspectorState(file_root=str(folder))
    s.open.open_paths = [str(folder / "a.safetensors"), str(folder / "b.safetensors")]
    s.open.param.trigger("open_files")
    s.ops["weighted_sum"].param.update(trees=["a.safetensors", "b.safetensors"],
                                       weights=[0.5, 0.5])
    working_set.set_budget(1024)
    for run in (1, 2):
        s.param.trigger("run")
        rr = s.result
        print(f"streamed {2 * mb} MB -> {mb} MB, run {run}: total {rr.median_seconds:.3f} s = "
              f"read wait {rr.read_seconds:.3f} + compute {rr.compute_seconds:.3f} + compile "
              f"{rr.compile_seconds:.3f} + write {rr.write_seconds:.3f} s")
    working_set.set_budget(None)
    s.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=2000)
    parser.add_argument("--mb", type=int, default=64)
    args = parser.parse_args()
    repeats(args.leaves)
    streamed(args.mb)


if __name__ == "__main__":
    main()
