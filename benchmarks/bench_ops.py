"""Every op on packed and plain trees against the memory-bandwidth limit, measured in one run.

    python benchmarks/bench_ops.py [--quick] [--only ops many first recompiles describe one-jit]

Prints, on this machine (issue 9 targets in brackets; `--quick`: small sizes, a smoke run):

1. `ops`: weighted sum, stack, unstack, index (one model of a stack) and per-subtree index (a
   different model per top-level subtree) on transformer-like float32 trees of P = 1e7 and 5e7
   parameters, K = 2, 4, 8 trees; packed (one kernel per dtype) and plain (one kernel per leaf).
   GB/s = (bytes read + bytes written) / kernel time, as `RunResult.gbps`. Two ratios per
   cell: "ratio" divides the op's median by the reference of `bandwidth.py` (the best median
   of three 256 MiB copies: NumPy one thread, NumPy on all cores, XLA into a donated output),
   sampled between the op's own runs [packed >= 0.85, plain >= 0.7]; the copy is a
   reference, not a ceiling (on a CPU a read-heavy op may pass it: write-allocate, see
   `bandwidth.py`). "of floor" divides the op's own time floor (its bytes, write-allocate
   counted, at the copy's bandwidth) by its median: 1.0 is the bandwidth model's best. Under
   the plain index rows, NumPy copying the same leaves one by one (one thread, reused
   buffers) in the same run: what an op that writes each leaf to its own buffer reaches;
2. `many`: each op on 20,000-leaf packed trees of small leaves (K = 2) held on the device (as
   the app's working set holds them): the whole call
   (`op(*args)`: plan, place, run, wait; kernels cached) and the kernel alone, median ms
   (min-max) [call <= 5 ms];
3. `first`: the first call of each op at 10,000 leaves, each in a fresh interpreter (no JAX or
   inspector caches): plan + compile + place + run [<= 1 s]; packed, then plain trees;
4. `recompiles`: compilations during 20 weight changes and 20 index moves [0];
5. `describe`: `describe` of a 100k-leaf tree [<= 0.5 s];
6. `one-jit` (only when asked: minutes): one `jax.jit` over a whole unpacked tree, what `pack`
   avoids.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.monitoring
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bandwidth import MIB, Reference, interleaved, write_allocate  # noqa: E402
from trees import leaf_count_tree, transformer_like  # noqa: E402

import inspector  # noqa: E402

_COMPILES = {"n": 0}
jax.monitoring.register_event_duration_secs_listener(
    lambda name, *_, **__: _COMPILES.__setitem__("n", _COMPILES["n"] + 1)
    if name == "/jax/core/compile/backend_compile_duration" else None)

OPS = ("weighted sum", "stack", "unstack", "index", "per-subtree index")


def spread(times: list[float]) -> str:
    lo, hi = min(times) * 1e3, max(times) * 1e3
    return f"{statistics.median(times) * 1e3:8.2f} ms ({lo:.2f}-{hi:.2f})"


def gbps_of(r) -> list[float]:
    """GB/s of each timed execution of a `RunResult` (bytes read + written per second)."""
    return [(r.bytes_read + r.bytes_written) / t / 1e9 for t in r.times]


def timed(op, *args, repeats: int):
    """A `run_op` for `interleaved`: one `inspector.run` of `repeats` timed executions."""
    return lambda: gbps_of(inspector.run(op, *args, repeats=repeats, warmup=1))


def cases(trees, stacked, per_subtree) -> list:
    """(name, op, args) of every op: on `trees` (K of them) and on `stacked` (their stack)."""
    k = len(trees)
    return [
        ("weighted sum", inspector.weighted_sum, (trees, [1.0 / k] * k)),
        ("stack", inspector.stack, (trees,)),
        ("unstack", inspector.unstack, (stacked,)),
        ("index", inspector.index, (stacked, k - 1)),
        ("per-subtree index", inspector.index, (stacked, per_subtree)),
    ]


def numpy_copy(stacked: dict, index, repeats: int) -> Callable[[], list[float]]:
    """A `run_op` for `interleaved`: NumPy copying, leaf by leaf on one thread, the slices a
    plain index of `stacked` returns (`index` an int, or a model per top-level key) into
    buffers reused from run to run: what a copy of those leaves reaches on this machine."""
    pairs = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(stacked)[0]:
        model = index if isinstance(index, int) else index[path[0].key]
        src = np.asarray(leaf)[model]  # a view of the stacked leaf, no copy
        pairs.append((np.empty_like(src), src))
    moved = 2 * sum(dst.nbytes for dst, _ in pairs)

    def run() -> list[float]:
        gbps = []
        for _ in range(repeats + 1):  # the first copy warms, as `run`'s warmup does
            start = time.perf_counter()
            for dst, src in pairs:
                np.copyto(dst, src)
            gbps.append(moved / (time.perf_counter() - start) / 1e9)
        return gbps[1:]

    return run


def top_level_choice(tree, k: int) -> dict:
    """A different model for each top-level subtree of a transformer-like tree."""
    return {"embed": 0, "unembed": min(1, k - 1), "blocks": k - 1}


def block_choice(tree) -> dict:
    """Model 0 or 1 for each block of a `leaf_count_tree` (thousands of subtrees)."""
    keys = tree.structure() if isinstance(tree, inspector.PackedTree) else tree
    return {key: i % 2 for i, key in enumerate(keys)}


def held(tree: inspector.PackedTree) -> inspector.PackedTree:
    """The packed tree with its buffers on the default device, as the working set holds it."""
    groups = list(tree.buffers)
    return inspector.PackedTree(tree.layout, dict(zip(
        groups, jax.block_until_ready(jax.device_put([tree.buffers[g] for g in groups])),
        strict=True)))


def wait(out):
    """Blocks until an op's result (a tree, a packed tree or a list of them) is computed."""
    parts = out if isinstance(out, list) else [out]
    jax.block_until_ready([p.buffers if isinstance(p, inspector.PackedTree) else p
                           for p in parts])
    return out


def bench_bandwidth(ref, sizes, ks, rounds, repeats):
    print("\n1. GB/s median (min-max) and ratio to the reference; transformer-like float32 trees"
          "  [packed >= 0.85, plain >= 0.7]")
    print(f"{'P':>6} {'K':>2} {'op':>17}  {'packed (one kernel per dtype)':<58} plain")
    table, numpy_ratios = [], []
    for p in sizes:
        base = transformer_like(p)
        for k in ks:
            trees = [base] + [jax.tree.map(lambda x, s=s: x + np.float32(s), base)
                              for s in range(1, k)]
            choice = top_level_choice(base, k)
            packed = [inspector.pack(t) for t in trees]
            stacked = inspector.stack(packed)
            rows = {}
            for name, op, args in cases(packed, stacked, choice):
                r = inspector.run(op, *args, repeats=1, warmup=0)
                rows[name] = (interleaved(ref, timed(op, *args, repeats=repeats), rounds),
                              r.n_kernels, (r.bytes_read, r.bytes_written))
            del packed, stacked
            plain_stacked = inspector.stack(trees)
            for name, op, args in cases(trees, plain_stacked, choice):
                m = interleaved(ref, timed(op, *args, repeats=max(1, repeats - 1)),
                                max(2, rounds - 1))
                packed_m, n, moved = rows[name]
                floors = (packed_m.floor_ratio(*moved), m.floor_ratio(*moved))
                ok = "" if packed_m.ratio >= 0.85 else " <"
                print(f"{p:6.0e} {k:2d} {name:>17}  {packed_m.row():<50}{ok:2} {n} kernel(s)  "
                      f"{m.median:5.1f} GB/s ratio {m.ratio:4.2f}{'' if m.ratio >= 0.7 else ' <'}"
                      f"  of floor {floors[0]:4.2f} / {floors[1]:4.2f}")
                table.append((p, k, name, packed_m.ratio, m.ratio, *floors))
                if name in ("index", "per-subtree index") and jax.default_backend() == "cpu":
                    copy = interleaved(ref, numpy_copy(*args, repeats=repeats), max(2, rounds - 1))
                    print(f"{'':>28}NumPy copying the same leaves one by one: {copy.median:5.1f} "
                          f"GB/s ratio {copy.ratio:4.2f}; the plain index is "
                          f"{m.median / copy.median:4.2f} of it")
                    numpy_ratios.append((p, copy.ratio))
            del plain_stacked, trees
    print("\nratios to the reference copy (packed / plain); '<' marks a miss of the targets:")
    _ratio_table(table, sizes, ks, 3, lambda a, b: f"{a:.2f}{'<' if a < 0.85 else ' '} / "
                                                   f"{b:.2f}{'<' if b < 0.7 else ' '}")
    print(f"\nratios to each op's own floor (packed / plain): its bytes read + written"
          f"{' + a read of each written line (write-allocate)' if write_allocate() else ''} at "
          "the copy's bandwidth; '!' marks a figure above 1.05, where the bandwidth model does "
          "not hold for that run:")
    _ratio_table(table, sizes, ks, 5, lambda a, b: f"{a:.2f}{'!' if a > 1.05 else ' '} / "
                                                   f"{b:.2f}{'!' if b > 1.05 else ' '}")
    for p in sizes:
        got = [r for pp, r in numpy_ratios if pp == p]
        if not got:  # not on the CPU: NumPy's copy is no ceiling there
            continue
        print(f"P = {p:.0e}: NumPy copying the plain index's leaves one by one reaches "
              f"{min(got):.2f}-{max(got):.2f} of the reference (what per-leaf copies reach)")


def _ratio_table(table, sizes, ks, column: int, cell) -> None:
    print(f"{'P, K':>8} | " + " | ".join(f"{name:>17}" for name in OPS))
    for p in sizes:
        for k in ks:
            cells = {row[2]: row[column:column + 2] for row in table if row[:2] == (p, k)}
            print(f"{p:.0e}, {k}".rjust(8) + " | " + " | ".join(
                cell(*cells[name]).rjust(17) for name in OPS))


def bench_many_leaves(n_leaves, repeats):
    print(f"\n2. {n_leaves:,}-leaf packed trees of small leaves (K = 2) held on the device, "
          "kernels cached: the "
          "whole call op(*args) and the kernel alone, median ms (min-max)  [call <= 5 ms]")
    trees = [held(inspector.pack(leaf_count_tree(n_leaves, d=4, seed=s))) for s in range(2)]
    stacked = inspector.stack(trees)
    for name, op, args in cases(trees, stacked, block_choice(stacked)):
        wait(op(*args))
        calls = []
        for _ in range(repeats):
            start = time.perf_counter()
            wait(op(*args))
            calls.append(time.perf_counter() - start)
        r = inspector.run(op, *args, repeats=repeats, warmup=1)
        verdict = "ok" if statistics.median(calls) <= 5e-3 else "MISSED"
        print(f"{name:>17}: call {spread(calls)}  kernel {spread(list(r.times))}  "
              f"{r.n_kernels} kernel(s), {trees[0].n_leaves} leaves  [{verdict}]")


_FIRST_CALL = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import jax, inspector
from bench_ops import block_choice, cases, wait
from trees import leaf_count_tree
n, packed, which = int(sys.argv[2]), sys.argv[3] == "packed", sys.argv[4]
trees = [leaf_count_tree(n, d=4, seed=s) for s in range(2)]
if packed:
    trees = [inspector.pack(t) for t in trees]
stacked = inspector.stack(trees) if which in ("unstack", "index", "per-subtree index") else None
choice = block_choice(stacked) if stacked is not None else None
jax.numpy.zeros(1).block_until_ready()  # the backend itself started, as in any session
name, op, args = next(c for c in cases(trees, stacked, choice) if c[0] == which)
start = time.perf_counter()
wait(op(*args))
print(json.dumps({"seconds": time.perf_counter() - start,
                  "leaves": len(jax.tree.leaves(trees[0].structure() if packed else trees[0]))}))
"""


def bench_first_call(n_leaves, plain: bool):
    print(f"\n3. first call at {n_leaves:,} leaves (K = 2), each in a fresh interpreter: plan + "
          "compile + place + run  [<= 1 s]")
    for kind in ("packed", "plain") if plain else ("packed",):
        cells = []
        for name in OPS:
            proc = subprocess.run(
                [sys.executable, "-c", _FIRST_CALL, str(Path(__file__).parent), str(n_leaves),
                 kind, name], capture_output=True, text=True, check=True)
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            cells.append(f"{name} {r['seconds']:.2f} s{'' if r['seconds'] <= 1 else ' MISSED'}")
        print(f"{kind:>7} ({r['leaves']} leaves): " + ", ".join(cells))


def bench_recompiles():
    trees = [inspector.pack(transformer_like(1e6, seed=s)) for s in range(3)]
    plain = [transformer_like(1e5, seed=s) for s in range(3)]
    stacked = inspector.stack(trees)
    inspector.run(inspector.weighted_sum, trees, [1.0, 1.0, 1.0], repeats=1)
    inspector.run(inspector.weighted_sum, plain, [1.0, 1.0, 1.0], repeats=1)
    inspector.run(inspector.index, plain[0], "0", repeats=1)
    inspector.run(inspector.index, stacked, {"embed": 0, "unembed": 1, "blocks": 2}, repeats=1)
    before = _COMPILES["n"]
    rng = np.random.default_rng(0)
    for _ in range(20):
        w = [float(x) for x in rng.normal(size=3)]
        inspector.run(inspector.weighted_sum, trees, w, repeats=1)
        inspector.run(inspector.weighted_sum, plain, [np.float32(w[0]), w[1], 2], repeats=1)
        inspector.run(inspector.index, plain[0], str(int(rng.integers(0, 4))), repeats=1)
        m = [int(x) for x in rng.integers(0, 3, size=3)]
        inspector.run(inspector.index, stacked, {"embed": m[0], "unembed": m[1], "blocks": m[2]},
                      repeats=1)
    print(f"\n4. compilations during 20 weight changes (packed + plain) and 20 index moves "
          f"(plain + packed per-subtree): {_COMPILES['n'] - before}  [0]")


def bench_describe(n_leaves, repeats):
    tree = leaf_count_tree(n_leaves, d=2)
    n = len(jax.tree.leaves(tree))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        rows = inspector.describe(tree)
        times.append(time.perf_counter() - start)
    print(f"\n5. describe: {n} leaves, {len(rows)} rows: {spread(times)}  [<= 500 ms]")


def bench_one_jit(leaf_counts):
    """The README's "minutes at 10,000 leaves": one `jax.jit` over a whole unpacked tree
    (XLA compiles one fusion per leaf), the cost that `pack` and per-shape kernels avoid."""
    print("\n6. one jit over the whole unpacked tree (weighted sum K = 2; what pack avoids)")
    for n in leaf_counts:
        t = leaf_count_tree(n)
        t2 = jax.tree.map(lambda x: x * 2, t)
        f = jax.jit(lambda a, b, w: jax.tree.map(lambda x, y: w[0] * x + w[1] * y, a, b))
        start = time.perf_counter()
        f.lower(t, t2, np.ones(2, np.float32)).compile()
        print(f"{len(jax.tree.leaves(t)):7d} leaves: {time.perf_counter() - start:7.2f} s "
              "compile")


PARTS = ["ops", "many", "first", "recompiles", "describe", "one-jit"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--only", nargs="+", default=None, choices=PARTS,
                        help="run only these parts (default: all but one-jit)")
    args = parser.parse_args()
    quick = args.quick
    parts = set(args.only or PARTS[:-1])
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind} ({len(jax.devices())} "
          f"device(s)); numpy {np.__version__}")
    if "ops" in parts:
        ref = Reference(256 * MIB if not quick else 16 * MIB)
        bench_bandwidth(ref, [1e7, 5e7] if not quick else [1e5], [2, 4, 8] if not quick else [2],
                        rounds=3 if not quick else 2, repeats=3 if not quick else 2)
        print(f"\nreference copies of {ref.src.nbytes // MIB} MiB over the whole run "
              "(GB/s = read + written bytes / s):")
        print(ref.summary())
        ref.close()
    if "many" in parts:
        bench_many_leaves(20_000 if not quick else 2_000, repeats=15 if not quick else 5)
    if "first" in parts:
        bench_first_call(10_000 if not quick else 1_000, plain=True)
    if "recompiles" in parts:
        bench_recompiles()
    if "describe" in parts:
        bench_describe(100_000 if not quick else 1000, repeats=5 if not quick else 2)
    if "one-jit" in parts:
        bench_one_jit([1000, 10000] if not quick else [100])


if __name__ == "__main__":
    main()
