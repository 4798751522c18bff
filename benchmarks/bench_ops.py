"""Benchmark of the core ops: bandwidth ratios, compile times, recompiles, describe.

    python benchmarks/bench_ops.py [--quick]

Prints, in one run on this machine: NumPy's copy bandwidth (the reference: a copy into a
preallocated `out=`), then each op's achieved bandwidth and its ratio to that reference;
compile seconds by leaf count; compilations during 20 weight changes; `describe` time for a
100k-leaf tree. Medians with the spread (min-max) because the machine is shared and noisy.
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
from trees import leaf_count_tree, transformer_like  # noqa: E402

import inspector  # noqa: E402

_COMPILES = {"n": 0}
jax.monitoring.register_event_duration_secs_listener(
    lambda name, *_, **__: _COMPILES.__setitem__("n", _COMPILES["n"] + 1)
    if name == "/jax/core/compile/backend_compile_duration" else None)


def spread(times: list[float]) -> str:
    lo, hi = min(times) * 1e3, max(times) * 1e3
    return f"{statistics.median(times) * 1e3:8.2f} ms ({lo:.2f}-{hi:.2f})"


def device_copy_gbps(n: int, repeats: int) -> tuple[float, list[float]]:
    """An accelerator's reference: XLA copying a buffer into a donated output."""
    copy = jax.jit(lambda out, x: x + 0, donate_argnums=0, keep_unused=True)
    x = jax.device_put(np.random.default_rng(0).standard_normal(n, dtype=np.float32))
    out = copy(jax.numpy.zeros_like(x), x).block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = copy(out, x).block_until_ready()
        times.append(time.perf_counter() - start)
    return 2 * x.nbytes / statistics.median(times) / 1e9, times


def numpy_copy_gbps(n: int, repeats: int) -> tuple[float, list[float]]:
    src = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    out = np.empty_like(src)
    np.copyto(out, src)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(out, src)
        times.append(time.perf_counter() - start)
    return 2 * src.nbytes / statistics.median(times) / 1e9, times


def bench_weighted_sum(sizes, ks, repeats, ref_gbps):
    print("\nweighted_sum, transformer-like float32 trees (packed: one kernel per dtype, donated "
          "output)")
    print(f"{'P':>8} {'K':>2} {'leaves':>6} {'median (min-max)':>28} {'GB/s':>7} {'ratio':>6}"
          f" {'plain-tree GB/s':>15}")
    for p in sizes:
        base = transformer_like(p)
        n_leaves = len(jax.tree.leaves(base))
        p = sum(x.size for x in jax.tree.leaves(base))
        for k in ks:
            trees = [base] + [jax.tree.map(lambda x, s=s: x + np.float32(s), base)
                              for s in range(1, k)]
            packed = [inspector.pack(t) for t in trees]
            w = [1.0 / k] * k
            r = inspector.run(inspector.weighted_sum, packed, w, repeats=repeats, warmup=2)
            plain = inspector.run(inspector.weighted_sum, trees, w, repeats=max(3, repeats // 3))
            print(f"{p:8.0e} {k:2d} {n_leaves:6d} {spread(list(r.times)):>28} {r.gbps:7.1f} "
                  f"{r.gbps / ref_gbps:6.2f} {plain.gbps:15.1f}")
            del trees, packed, r, plain


def bench_other_ops(p, repeats, ref_gbps):
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
        r = inspector.run(op, *args, repeats=repeats, warmup=1)
        print(f"{name:>22}: {spread(list(r.times))}  {r.gbps:6.1f} GB/s  ratio "
              f"{r.gbps / ref_gbps:.2f}  ({r.n_kernels} kernels)")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args()
    quick = args.quick
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind} ({len(jax.devices())} "
          f"device(s)); numpy {np.__version__}")
    ref, times = numpy_copy_gbps(int(5e7) if not quick else int(1e6), 9 if not quick else 3)
    print(f"NumPy copy bandwidth (copyto into preallocated out, 200 MB): {ref:.1f} GB/s  "
          f"[{spread(times)}]")
    if jax.devices()[0].platform != "cpu":
        ref, times = device_copy_gbps(int(5e7), 9)
        print(f"{jax.devices()[0].platform} copy bandwidth (XLA, donated output, 200 MB): "
              f"{ref:.1f} GB/s [{spread(times)}]; ratios below are against this")
    sizes = [1e6, 1e7, 5e7] if not quick else [1e5]
    ks = [2, 4, 8] if not quick else [2]
    bench_weighted_sum(sizes, ks, repeats=15 if not quick else 3, ref_gbps=ref)
    bench_other_ops(1e7 if not quick else 1e5, repeats=7 if not quick else 2, ref_gbps=ref)
    bench_compile([100, 1000, 10000] if not quick else [100])
    bench_recompiles()
    bench_describe(100_000 if not quick else 1000, repeats=5 if not quick else 2)


if __name__ == "__main__":
    main()
