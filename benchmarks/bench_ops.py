"""Benchmark of the core ops: bandwidth ratios, compile times, recompiles, describe.

    python benchmarks/bench_ops.py [--quick]

Prints, in one run on this machine: each op's achieved bandwidth, median (min-max) over its
timed runs, and its ratio to the memory-bandwidth reference of `bandwidth.py` (the best of a
one-thread NumPy copy, an all-core NumPy copy and an XLA copy into a donated output, of a 256
MiB buffer), sampled between the op's own runs; then compile seconds by leaf count, including
one jit over a whole unpacked tree (what `pack` avoids); compilations during 20 weight changes;
`describe` time for a 100k-leaf tree. Medians with the spread because the machine is shared.
Targets (issue 2): weighted-sum ratio >= 0.85 for P >= 1e7; compile <= 1 s at 10,000 leaves;
0 recompiles; describe(100k leaves) <= 0.5 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.monitoring
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bandwidth import MIB, Reference, interleaved  # noqa: E402
from trees import leaf_count_tree, transformer_like  # noqa: E402

import inspector  # noqa: E402

_COMPILES = {"n": 0}
jax.monitoring.register_event_duration_secs_listener(
    lambda name, *_, **__: _COMPILES.__setitem__("n", _COMPILES["n"] + 1)
    if name == "/jax/core/compile/backend_compile_duration" else None)


def spread(times: list[float]) -> str:
    lo, hi = min(times) * 1e3, max(times) * 1e3
    return f"{statistics.median(times) * 1e3:8.2f} ms ({lo:.2f}-{hi:.2f})"


def gbps_of(r) -> list[float]:
    """GB/s of each timed execution of a `RunResult` (bytes read + written per second)."""
    return [(r.bytes_read + r.bytes_written) / t / 1e9 for t in r.times]


def timed(op, *args, repeats: int):
    """A `run_op` for `interleaved`: one `inspector.run` of `repeats` timed executions."""
    return lambda: gbps_of(inspector.run(op, *args, repeats=repeats, warmup=1))


def bench_weighted_sum(ref, sizes, ks, rounds, repeats):
    print("\nweighted_sum, transformer-like float32 trees: packed (one kernel per dtype, donated "
          "output) and plain (one kernel per leaf shape)")
    print(f"{'P':>6} {'K':>2} {'leaves':>6}  {'packed GB/s (min-max), ratio':<60} plain")
    for p in sizes:
        base = transformer_like(p)
        n_leaves = len(jax.tree.leaves(base))
        p = sum(x.size for x in jax.tree.leaves(base))
        for k in ks:
            trees = [base] + [jax.tree.map(lambda x, s=s: x + np.float32(s), base)
                              for s in range(1, k)]
            packed = [inspector.pack(t) for t in trees]
            w = [1.0 / k] * k
            m = interleaved(ref, timed(inspector.weighted_sum, packed, w, repeats=repeats),
                            rounds)
            plain = interleaved(ref, timed(inspector.weighted_sum, trees, w, repeats=2),
                                max(2, rounds // 2))
            print(f"{p:6.0e} {k:2d} {n_leaves:6d}  {m.row():<60} {plain.median:5.1f} GB/s, "
                  f"ratio {plain.ratio:.2f}")
            del trees, packed


def bench_other_ops(ref, p, rounds, repeats):
    print(f"\nother ops at P = {p:.0e} (leaf by leaf, one compile per distinct shape)")
    base = transformer_like(p)
    trees = [base, jax.tree.map(lambda x: x + 1, base), jax.tree.map(lambda x: x + 2, base),
             jax.tree.map(lambda x: x + 3, base)]
    stacked = inspector.stack(trees)
    cases = [
        ("stack K=4", inspector.stack, (trees,)),
        ("unstack K=4", inspector.unstack, (stacked,)),
        ("index '1:3' of stack", inspector.index, (stacked, "1:3")),
    ]
    for name, op, args in cases:
        n_kernels = inspector.run(op, *args, repeats=1).n_kernels
        m = interleaved(ref, timed(op, *args, repeats=repeats), rounds)
        print(f"{name:>22}: {m.row()}  ({n_kernels} kernels)")


def bench_compile(leaf_counts):
    print("\ncompile seconds by leaf count (fresh kernel cache; transformer-like, 12 leaves/block)")
    print(f"{'leaves':>7} {'shapes':>6} {'packed ws':>10} {'plain ws':>9} {'index':>7} "
          f"{'stack':>7} {'first call total':>16}")
    for n in leaf_counts:
        t = leaf_count_tree(n)
        t2 = jax.tree.map(lambda x: x * 2, t)
        shapes = len({x.shape for x in jax.tree.leaves(t)})
        inspector.clear_cache()
        start = time.perf_counter()
        packed = inspector.run(inspector.weighted_sum, [inspector.pack(t), inspector.pack(t2)],
                               [0.5, 0.5], repeats=1)
        plain = inspector.run(inspector.weighted_sum, [t, t2], [0.5, 0.5], repeats=1)
        idx = inspector.run(inspector.index, t, "0", repeats=1)
        stk = inspector.run(inspector.stack, [t, t2], repeats=1)
        total = time.perf_counter() - start
        print(f"{len(jax.tree.leaves(t)):7d} {shapes:6d} {packed.compile_seconds:10.3f} "
              f"{plain.compile_seconds:9.3f} {idx.compile_seconds:7.3f} "
              f"{stk.compile_seconds:7.3f} {total:15.2f}s")


def bench_recompiles():
    trees = [inspector.pack(transformer_like(1e6, seed=s)) for s in range(3)]
    plain = [transformer_like(1e5, seed=s) for s in range(3)]
    inspector.run(inspector.weighted_sum, trees, [1.0, 1.0, 1.0], repeats=1)
    inspector.run(inspector.weighted_sum, plain, [1.0, 1.0, 1.0], repeats=1)
    inspector.run(inspector.index, plain[0], "0", repeats=1)
    before = _COMPILES["n"]
    rng = np.random.default_rng(0)
    for _ in range(20):
        w = [float(x) for x in rng.normal(size=3)]
        inspector.run(inspector.weighted_sum, trees, w, repeats=1)
        inspector.run(inspector.weighted_sum, plain, [np.float32(w[0]), w[1], 2], repeats=1)
        inspector.run(inspector.index, plain[0], str(int(rng.integers(0, 4))), repeats=1)
    print(f"\ncompilations during 20 weight changes (packed + plain) and 20 index moves: "
          f"{_COMPILES['n'] - before}")


def bench_describe(n_leaves, repeats):
    tree = leaf_count_tree(n_leaves, d=2)
    n = len(jax.tree.leaves(tree))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        rows = inspector.describe(tree)
        times.append(time.perf_counter() - start)
    print(f"\ndescribe: {n} leaves, {len(rows)} rows: {spread(times)}")


def bench_one_jit(leaf_counts):
    """The README's "a minute at 10,000 leaves": one `jax.jit` over a whole unpacked tree
    (XLA compiles one fusion per leaf), the cost that `pack` and per-shape kernels avoid."""
    print("\none jit over the whole unpacked tree (weighted sum K = 2; what pack avoids)")
    for n in leaf_counts:
        t = leaf_count_tree(n)
        t2 = jax.tree.map(lambda x: x * 2, t)
        f = jax.jit(lambda a, b, w: jax.tree.map(lambda x, y: w[0] * x + w[1] * y, a, b))
        start = time.perf_counter()
        f.lower(t, t2, np.ones(2, np.float32)).compile()
        print(f"{len(jax.tree.leaves(t)):7d} leaves: {time.perf_counter() - start:7.2f} s "
              "compile")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--only", nargs="+", default=None,
                        choices=["ws", "ops", "compile", "one-jit", "recompiles", "describe"],
                        help="run only these parts")
    args = parser.parse_args()
    quick = args.quick
    parts = set(args.only or ["ws", "ops", "compile", "one-jit", "recompiles", "describe"])
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind} ({len(jax.devices())} "
          f"device(s)); numpy {np.__version__}")
    if parts & {"ws", "ops"}:
        ref = Reference(256 * MIB if not quick else 16 * MIB)
        rounds, repeats = (5, 3) if not quick else (2, 2)
        if "ws" in parts:
            bench_weighted_sum(ref, [1e7, 5e7] if not quick else [1e5],
                               [2, 4, 8] if not quick else [2], rounds, repeats)
        if "ops" in parts:
            bench_other_ops(ref, 1e7 if not quick else 1e5, rounds, repeats)
        print(f"\nreference copies of {ref.src.nbytes // MIB} MiB over the whole run "
              "(GB/s = read + written bytes / s):")
        print(ref.summary())
        ref.close()
    if "compile" in parts:
        bench_compile([100, 1000, 10000] if not quick else [100])
    if "one-jit" in parts:
        bench_one_jit([1000, 10000] if not quick else [100])
    if "recompiles" in parts:
        bench_recompiles()
    if "describe" in parts:
        bench_describe(100_000 if not quick else 1000, repeats=5 if not quick else 2)


if __name__ == "__main__":
    main()
