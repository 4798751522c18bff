"""One op call against the same kernels issued back to back: what a timed repeat holds besides
the copy.

    python benchmarks/bench_call.py [--sizes 1e7 5e7] [--k 4]

`run` times each execution alone: the plan's Python, the dispatch, the kernels, the wait. On a
GPU the kernels of a 40 MB tree take ~30 us and the rest ~0.1-0.2 ms, so `bench_ops.py`'s
ratios there show the call, not the copy. This prints, for packed transformer-like float32
trees (K of them, and their stack): one call (median of 20), the Python and dispatch part of it,
and 20 executions issued back to back then waited for once (per execution, median of 5); each
in GB/s and as a ratio to `bandwidth.py`'s reference, measured first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bandwidth import Reference  # noqa: E402
from bench_ops import cases, top_level_choice  # noqa: E402
from trees import transformer_like  # noqa: E402

import inspector  # noqa: E402
from inspector.core.op import block  # noqa: E402
from inspector.core.runner import as_op  # noqa: E402


def packed_cases(p: float, k: int) -> list:
    """`bench_ops.cases` on K packed transformer-like trees of P parameters, less the stack."""
    base = transformer_like(int(p))
    trees = [inspector.pack(jax.tree.map(lambda x, s=s: x + np.float32(s), base))
             for s in range(k)]
    stacked = inspector.stack(trees)
    return [c for c in cases(trees, stacked, top_level_choice(base, k)) if c[0] != "stack"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e7, 5e7])
    parser.add_argument("--k", type=int, default=4)
    args = parser.parse_args()
    device = jax.devices()[0]
    ref = Reference()
    for _ in range(5):
        ref.sample()
    name, limit = ref.best()
    print(f"jax {jax.__version__} on {device.device_kind}; reference {name} {limit:.1f} GB/s")
    for p in args.sizes:
        for op_name, op, op_args in packed_cases(p, args.k):
            plan = as_op(op).plan(*op_args, device=device)
            plan.compile()
            plan.place()
            moved = plan.bytes_read + plan.bytes_written
            for _ in range(3):
                block(plan.execute())
            one, issue, burst = [], [], []
            for _ in range(20):
                start = time.perf_counter()
                out = plan.execute()
                issued = time.perf_counter()
                block(out)
                one.append(time.perf_counter() - start)
                issue.append(issued - start)
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(20):
                    out = plan.execute()
                block(out)
                burst.append((time.perf_counter() - start) / 20)
            a, b = statistics.median(one), statistics.median(burst)
            print(f"P = {p:.0e}, K = {args.k}, {op_name:>17}: one call {a * 1e3:7.3f} ms "
                  f"({moved / a / 1e9:7.1f} GB/s, ratio {moved / a / 1e9 / limit:4.2f}; Python "
                  f"and dispatch {statistics.median(issue) * 1e3:.3f} ms), back to back "
                  f"{b * 1e3:7.3f} ms ({moved / b / 1e9:7.1f} GB/s, ratio "
                  f"{moved / b / 1e9 / limit:4.2f})")


if __name__ == "__main__":
    main()
