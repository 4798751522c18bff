"""The weighted sum of packed float32 trees on the CPU: the numba loop with streaming stores
(`core/weighted_sum_host.py`) against XLA's kernel, alternated in one process against the
bandwidth reference (`bandwidth.py`) sampled between them.

    PYTHONPATH=. python benchmarks/bench_sum_host.py [--params 1e8] [--trees 2 3 4] [--rounds 5]

Each tree is one float32 buffer of `--params` values (`inspector.pack` of a dict of 2048-wide
leaves), resident; each way is planned once (`PlannedRun`) and executed into its last
result's memory (donated), as the app's weight changes run. GB/s counts (K + 1) x 4 bytes a
parameter (K buffers read, one written); the ratio divides by the best copy of the same run.
Before that, a fresh plan and its first execution of each way (kernels already compiled in
this process for XLA): the loop writes fresh memory once; XLA's plan fills a zero buffer to
donate, and the execution writes it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from bandwidth import report_alternated  # noqa: E402

import inspector  # noqa: E402
from inspector.core import weighted_sum_host  # noqa: E402
from inspector.core.runner import PlannedRun  # noqa: E402

CPU = jax.devices("cpu")[0]


def packed_tree(params: int, seed: int):
    rng = np.random.default_rng(seed)
    rows = params // 2048
    leaves = {f"w{i:03d}": rng.standard_normal((min(4096, rows - i * 4096), 2048),
                                               dtype=np.float32)
              for i in range(-(-rows // 4096))}
    return inspector.pack(leaves)  # host buffers: the CPU holds them as they are


def planned(trees, host: bool) -> PlannedRun:
    weighted_sum_host.HOST_LOOP = host  # read when planning: each plan keeps its way
    try:
        return PlannedRun(inspector.weighted_sum, trees, [0.5] * len(trees), device=CPU)
    finally:
        weighted_sum_host.HOST_LOOP = True


def bench(k: int, params: int, rounds: int) -> None:
    trees = [packed_tree(params, s) for s in range(k)]
    nbytes = (k + 1) * 4 * params
    first = {}
    for name, host in (("xla", False), ("loop", True)):
        start = time.perf_counter()  # planning makes XLA's zero-filled output buffer
        run = planned(trees, host)
        jax.block_until_ready(run.execute()[0].buffers)
        first[name] = time.perf_counter() - start
        del run
    runs = {name: planned(trees, host) for name, host in (("loop", True), ("xla", False))}
    assert [c.host for c in runs["loop"].plan.calls] == [True]
    assert [c.host for c in runs["xla"].plan.calls] == [False]

    def timed(run):
        def call() -> float:
            start = time.perf_counter()
            jax.block_until_ready(run.execute()[0].buffers)
            return nbytes / (time.perf_counter() - start) / 1e9
        return call

    report_alternated(
        {name: timed(run) for name, run in runs.items()}, rounds,
        lambda ref, gbps: f"weighted sum of {k} packed float32 trees of {params:,} parameters "
                          f"({nbytes / 1e9:.2f} GB counted a call); reference {ref} "
                          f"{gbps:.1f} GB/s; a fresh plan and its first execution: loop "
                          f"{first['loop']:.3f} s, xla (zero fill + sum) {first['xla']:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, default=1e8)
    parser.add_argument("--trees", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for k in args.trees:
        bench(k, int(args.params) // 2048 * 2048, args.rounds)


if __name__ == "__main__":
    main()
