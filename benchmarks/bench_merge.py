"""Benchmark of `inspector.merge` and the value diff: time per run, bandwidth ratio, recompiles.

    .venv/bin/python benchmarks/bench_merge.py [--params 1e7] [--ks 2,3] [--mb 1144]

Prints, in one run on this machine:
1. the bandwidth reference (`bandwidth.Reference`: best of three kinds of copy, sampled between
   the runs of each op, as bench_ops does);
2. every merge method on K packed transformer-like float32 trees of `--params` parameters plus
   a base: steady-state median (min-max) per run, achieved GB/s (the op's own bytes: K trees +
   base read, one tree written), its ratio to the reference, and its time over the time of a
   `weighted_sum` of the same K packed trees in the same run (issue 13 aims TIES at <= 3x);
3. compilations during 20 parameter changes per method (target 0);
4. `diff(a, b, values=True)` of two `--mb` MiB safetensors checkpoints (lazy) against the time
   to read both once (every byte of both files into memory, from the page cache: `readinto` one
   buffer), interleaved, medians of 3 (target <= 2x).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bandwidth import Reference, interleaved  # noqa: E402
from bench_ops import spread  # noqa: E402
from trees import transformer_like  # noqa: E402

import inspector  # noqa: E402

PARAMS = {
    "linear": lambda k, i=0: {"weights": [1.0 + 0.1 * i] + [1.0] * (k - 1)},
    "task_arithmetic": lambda k, i=0: {"weights": [0.5 + 0.01 * i] * k, "lam": 0.9},
    "ties": lambda k, i=0: {"weights": [1.0] * k, "density": 0.2 + 0.01 * i},
    "dare_linear": lambda k, i=0: {"weights": [1.0] * k, "density": 0.3, "seed": i},
    "dare_ties": lambda k, i=0: {"weights": [1.0] * k, "density": 0.3 + 0.01 * i, "seed": i},
    "slerp": lambda k, i=0: {"t": 0.3 + 0.01 * i},
    "model_stock": lambda k, i=0: {},
}
NO_BASE = ("linear", "slerp")


class Timed:
    """A `run_op` for `interleaved` that also keeps every timed execution's seconds."""

    def __init__(self, op, *args, repeats: int, **kwargs):
        self.call = lambda: inspector.run(op, *args, repeats=repeats, warmup=1, **kwargs)
        self.times: list[float] = []

    def __call__(self) -> list[float]:
        r = self.call()
        self.times.extend(r.times)
        return [(r.bytes_read + r.bytes_written) / t / 1e9 for t in r.times]


def models(p: float, k: int):
    base = transformer_like(p, seed=0)
    rng = np.random.default_rng(1)
    tuned = [jax.tree.map(lambda x: x + np.float32(0.01) * rng.standard_normal(
        x.shape, dtype=np.float32), base) for _ in range(k)]
    return inspector.pack(base), [inspector.pack(t) for t in tuned]


def bench_methods(ref: Reference, p: float, ks: list[int], rounds: int, repeats: int) -> None:
    print(f"\nmerge of K packed transformer-like float32 trees of {p:.0e} parameters (+ a base "
          "where the method needs one); GB/s counts the op's own bytes")
    print(f"{'method':>16} {'K':>2} {'median (min-max) per run':>30} {'GB/s':>6} {'ratio':>6}"
          f" {'x weighted_sum':>15} {'recompiles/20':>14}")
    for k in ks:
        base, tuned = models(p, k)
        ws_op = Timed(inspector.weighted_sum, tuned, [1.0 / k] * k, repeats=repeats)
        ws = interleaved(ref, ws_op, rounds)
        ws_time = statistics.median(ws_op.times)
        print(f"{'weighted_sum':>16} {k:>2} {spread(ws_op.times):>30} {ws.median:6.1f}"
              f" {ws.ratio:6.2f} {1.0:15.2f} {'':>14}")
        for method, params in PARAMS.items():
            if method == "slerp" and k != 2:
                continue
            b = None if method in NO_BASE else base
            op = Timed(inspector.merge, method, tuned, base=b, repeats=repeats, **params(k))
            m = interleaved(ref, op, rounds)
            before = inspector.compile_count()
            for i in range(1, 21):
                inspector.merge(method, tuned, base=b, **params(k, i))
            recompiles = inspector.compile_count() - before
            print(f"{method:>16} {k:>2} {spread(op.times):>30} {m.median:6.1f} {m.ratio:6.2f}"
                  f" {statistics.median(op.times) / ws_time:15.2f} {recompiles:>14}")
        del base, tuned
    print("reference copies (sampled between the runs above):")
    print(ref.summary())


def bench_value_diff(mb: float) -> None:
    from bench_load import flat_arrays, transformer_shapes, write_safetensors

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for seed in range(2):
            folder = Path(tmp) / f"ckpt{seed}"
            folder.mkdir()
            flat = flat_arrays(transformer_shapes(int(mb * 2**20)), seed=seed)
            paths.append(write_safetensors(flat, folder))
            del flat
        n_bytes = sum(p.stat().st_size for p in paths)

        buffer = np.empty(max(p.stat().st_size for p in paths), np.uint8)

        def read_once():
            """Every byte of both files read into memory (one buffer, allocated once)."""
            for path in paths:
                with open(path, "rb", buffering=0) as f:
                    view = memoryview(buffer)[:path.stat().st_size]
                    while view:  # readinto may return less than asked
                        view = view[f.readinto(view):]

        def value_diff():
            return inspector.diff(inspector.load(paths[0]), inspector.load(paths[1]),
                                  values=True)

        read_once()  # both files in the page cache, as for every timed run after
        found = value_diff()  # compiles
        reads, diffs = [], []
        for _ in range(3):
            start = time.perf_counter()
            read_once()
            reads.append(time.perf_counter() - start)
            start = time.perf_counter()
            value_diff()
            diffs.append(time.perf_counter() - start)
        ratio = statistics.median(diffs) / statistics.median(reads)
        print(f"\nvalue diff of two {mb:.0f} MiB safetensors checkpoints ({n_bytes / 1e9:.2f} GB "
              f"in all, {len(found)} leaves differ)")
        rate = n_bytes / statistics.median(reads) / 1e9
        print(f"  read both once      {spread(reads)}  ({rate:.1f} GB/s)")
        print(f"  diff(values=True)   {spread(diffs)}")
        print(f"  ratio {ratio:.2f} (target <= 2) {'ok' if ratio <= 2 else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, default=1e7)
    parser.add_argument("--ks", default="2,3", help="model counts ('' skips the merges)")
    parser.add_argument("--rounds", type=int, default=3, help="reference samples per op")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per round")
    parser.add_argument("--mb", type=float, default=1144, help="each checkpoint (0: skip)")
    args = parser.parse_args()
    if args.ks:
        ref = Reference()
        bench_methods(ref, args.params, [int(k) for k in args.ks.split(",")], args.rounds,
                      args.repeats)
        ref.close()
    if args.mb:
        bench_value_diff(args.mb)


if __name__ == "__main__":
    main()
