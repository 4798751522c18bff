"""Every op on packed and plain trees: bandwidth ratios, many-leaf latency, first-call time.

    python benchmarks/bench_packed.py [--quick] [--sizes 1e7,5e7] [--ks 2,4,8]

Prints, in one run on this machine (issue 9 targets in brackets):

1. weighted sum, stack, unstack, index (one index on the model axis) and per-subtree index
   (a different model per subtree) on transformer-like float32 trees of P parameters, K trees;
   packed (one kernel per dtype) and plain (one kernel per leaf shape). GB/s = (bytes read +
   bytes written) / kernel time, as `RunResult.gbps`; the ratio divides by `bandwidth.py`'s
   reference (best of three 256 MiB copies, sampled between the op's runs)
   [packed >= 0.85, plain >= 0.7];
2. each op on 20,000-leaf packed trees of small leaves: median ms [<= 5 ms];
3. the first call of each op at 10,000 leaves, kernel cache cleared: compile + place + run
   [<= 1 s].
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
from bandwidth import Reference, interleaved  # noqa: E402
from trees import leaf_count_tree, transformer_like  # noqa: E402

import inspector  # noqa: E402


def gbps_of(r) -> list[float]:
    return [(r.bytes_read + r.bytes_written) / t / 1e9 for t in r.times]


def timed(op, *args, repeats: int):
    return lambda: gbps_of(inspector.run(op, *args, repeats=repeats, warmup=1))


def per_subtree(tree, k: int) -> dict:
    """A different model for each top-level subtree (the blocks take the last one)."""
    return {"embed": 0, "unembed": min(1, k - 1), "blocks": k - 1}


def cases(trees, stacked, k):
    return [
        ("weighted_sum", inspector.weighted_sum, (trees, [1.0 / k] * k)),
        ("stack", inspector.stack, (trees,)),
        ("unstack", inspector.unstack, (stacked,)),
        ("index", inspector.index, (stacked, k - 1)),
        ("per-subtree index", inspector.index, (stacked, per_subtree(stacked, k))),
    ]


def bench_bandwidth(ref, sizes, ks, rounds, repeats):
    print("\n1. GB/s (min-max) and ratio to the reference, transformer-like float32 trees")
    print(f"{'P':>6} {'K':>2} {'op':>17}  {'packed':<62} {'plain':<20}")
    for p in sizes:
        base = transformer_like(p)
        for k in ks:
            trees = [base] + [jax.tree.map(lambda x, s=s: x + np.float32(s), base)
                              for s in range(1, k)]
            rows = {}
            packed = [inspector.pack(t) for t in trees]
            stacked = inspector.stack(packed)
            for name, op, args in cases(packed, stacked, k):
                n = inspector.run(op, *args, repeats=1, warmup=0).n_kernels
                rows[name] = (interleaved(ref, timed(op, *args, repeats=repeats), rounds), n)
            del packed, stacked
            plain_stacked = inspector.stack(trees)
            for name, op, args in cases(trees, plain_stacked, k):
                m = interleaved(ref, timed(op, *args, repeats=max(1, repeats // 2)),
                                max(2, rounds // 2))
                packed_m, n = rows[name]
                print(f"{p:6.0e} {k:2d} {name:>17}  {packed_m.row():<52} {n:2d} kernels"
                      f"  {m.median:5.1f} GB/s ratio {m.ratio:4.2f}")
            del plain_stacked, trees


def bench_many_leaves(n_leaves, repeats):
    print(f"\n2. {n_leaves:,}-leaf packed trees of small leaves (K = 2): median ms (min-max)")
    trees = [inspector.pack(leaf_count_tree(n_leaves, d=4, seed=s)) for s in range(2)]
    stacked = inspector.stack(trees)
    n = trees[0].n_leaves
    for name, op, args in cases(trees, stacked, 2):
        args = args if name != "per-subtree index" else (
            stacked, {k: i % 2 for i, k in enumerate(stacked.unpack())})
        r = inspector.run(op, *args, repeats=repeats, warmup=2)
        t = [x * 1e3 for x in r.times]
        verdict = "ok" if statistics.median(t) <= 5 else "MISSED"
        print(f"{name:>17}: {statistics.median(t):7.2f} ms ({min(t):.2f}-{max(t):.2f})  "
              f"{r.n_kernels} kernels, {n} leaves  [<= 5 ms {verdict}]")


def bench_first_call(n_leaves):
    print(f"\n3. first call at {n_leaves:,} leaves, kernel cache cleared: compile + place + run")
    for packed in (True, False):
        trees = [leaf_count_tree(n_leaves, d=4, seed=s) for s in range(2)]
        if packed:
            trees = [inspector.pack(t) for t in trees]
        stacked = inspector.stack(trees)
        for name, op, args in cases(trees, stacked, 2):
            if name == "per-subtree index":
                args = (stacked, {k: i % 2 for i, k in
                                  enumerate(stacked.unpack() if packed else stacked)})
            inspector.clear_cache()
            start = time.perf_counter()
            out = op(*args)
            jax.block_until_ready(jax.tree.leaves(
                out.buffers if isinstance(out, inspector.PackedTree) else
                [o.buffers if isinstance(o, inspector.PackedTree) else o for o in out]
                if isinstance(out, list) else out))
            s = time.perf_counter() - start
            kind = "packed" if packed else "plain"
            print(f"{kind:>6} {name:>17}: {s:6.2f} s  [<= 1 s {'ok' if s <= 1 else 'MISSED'}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--sizes", default="1e7,5e7")
    parser.add_argument("--ks", default="2,4,8")
    args = parser.parse_args()
    sizes = [1e6] if args.quick else [float(s) for s in args.sizes.split(",")]
    ks = [2] if args.quick else [int(k) for k in args.ks.split(",")]
    ref = Reference()
    print(f"jax {jax.__version__}, {jax.devices()[0]}")
    bench_bandwidth(ref, sizes, ks, rounds=2 if args.quick else 3, repeats=3)
    print("\nreference copies over the whole run:\n" + ref.summary())
    ref.close()
    bench_many_leaves(2_000 if args.quick else 20_000, repeats=10)
    bench_first_call(1_000 if args.quick else 10_000)


if __name__ == "__main__":
    main()
