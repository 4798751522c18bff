"""What each way of computing the scan's figures costs on the CPU, in one run.

    python benchmarks/bench_scan_passes.py [--mb 400] [--xla]

`inspector.scan` on the CPU (`core/health/host_scan.py`) reduces a float32 buffer with one
numba pass (`core/health/scan_loops.py`) that computes min, max, zeros, sum and sum of squares
while reading each element once. Before it, five NumPy/BLAS passes per 1 MiB chunk did (no
NumPy or BLAS routine computes two of these figures in one pass). This prints, on one buffer
of `--mb` MB in the same run:

1. the single-pass references: a 2-thread copy (read + write) and a 2-thread `max` (read only);
2. the numba pass over the buffer, one thread, and two threads with the prefetch settings in
   use and former ones (`SETTINGS`), alternated (wall time);
3. each NumPy pass over every chunk, one thread, in thread CPU time (the first pass also reads
   the chunk from memory), their total, and the total's throughput on two ideal cores;
4. with `--xla`: the same figures as jitted XLA formulations (reductions over the major axis
   of `(rows, 1024)`, a loop over blocks of rows): XLA's CPU backend emits one loop per
   reduction and a scalar loop for a reduction with a fused elementwise producer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

CHUNK = 1 << 18  # host_scan.CHUNK
ROW = 1024


def best_of(fn, repeats: int = 5, clock=time.perf_counter) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def references(x: np.ndarray) -> None:
    pool = ThreadPoolExecutor(2)
    halves = np.array_split(x, 2)
    dst = np.empty_like(x)
    pairs = list(zip(np.array_split(dst, 2), halves, strict=True))
    copy = best_of(lambda: list(pool.map(lambda p: np.copyto(*p), pairs)))
    read = best_of(lambda: list(pool.map(np.maximum.reduce, halves)))
    print(f"copy, 2 threads: {copy * 1e3:6.1f} ms = {2 * x.nbytes / copy / 1e9:5.1f} GB/s "
          f"counted read + write (bench_health's reference); ratio 0.5 = a scan as fast as "
          f"this copy")
    print(f"max, 2 threads:  {read * 1e3:6.1f} ms = {x.nbytes / read / 1e9:5.1f} GB/s read "
          f"(one streaming pass)")
    pool.shutdown()


SETTINGS = {
    "in use": None,  # scan_loops.BLOCK, AHEAD, FAR
    "blocks of 256, 8 KiB into L1 (the settings before)": (256, 2048, 0),
    "blocks of 512, 4 KiB into L1 only": (512, 1024, 0),
    "blocks of 256, 4 KiB into L1 + 32 KiB into L2": (256, 1024, 8192),
}
"""Prefetch settings of the numba pass timed alternately (`block, ahead, far`, elements)."""


def one_pass(x: np.ndarray, rounds: int = 7) -> None:
    from inspector.core.health import scan_loops

    u = x.view(np.uint32)
    pool = ThreadPoolExecutor(2)
    halves = [np.array([0, x.size // 2], np.int64), np.array([x.size // 2, x.size], np.int64)]

    def run(starts, setting=None):
        scan_loops.segment_pass(u, starts, np.empty((1, scan_loops.BITS), np.uint32),
                                np.empty((1, scan_loops.SUMS)), *(setting or ()))

    one = best_of(lambda: run(np.array([0, x.size], np.int64)))
    print(f"numba pass, 1 thread: {one * 1e3:6.1f} ms = {x.nbytes / one / 1e9:5.1f} GB/s read "
          f"(every figure: scan_loops.segment_pass, wall time)")
    times: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for setting in SETTINGS.values():  # compile each (numba: one per argument count)
        list(pool.map(lambda h, s=setting: run(h, s), halves))
    for _ in range(rounds):  # alternated: a neighbour's load falls on every setting alike
        for name, setting in SETTINGS.items():
            start = time.perf_counter()
            list(pool.map(lambda h, s=setting: run(h, s), halves))
            times[name].append(time.perf_counter() - start)
    print(f"numba pass, 2 threads (block, ahead into L1, far into L2 = {scan_loops.BLOCK}, "
          f"{scan_loops.AHEAD}, {scan_loops.FAR} elements in use), alternated {rounds} times:")
    for name, t in times.items():
        m = statistics.median(t)
        print(f"  {name:46s} {m * 1e3:6.1f} ms ({min(t) * 1e3:.1f}-{max(t) * 1e3:.1f}) "
              f"= {x.nbytes / m / 1e9:5.1f} GB/s read")
    pool.shutdown()


def passes(x: np.ndarray) -> None:
    ones = np.ones(ROW, np.float32)
    flags = np.empty(CHUNK, bool)
    steps = {
        "min (reads the chunk from memory)": lambda y, rows: np.minimum.reduce(y),
        "max": lambda y, rows: np.maximum.reduce(y),
        "zeros (== 0, count_nonzero)": lambda y, rows: np.count_nonzero(
            np.equal(y, 0, out=flags[:y.size])),
        "sum (BLAS rows @ ones)": lambda y, rows: rows @ ones,
        "sum of squares (BLAS vecdot)": lambda y, rows: np.vecdot(rows, rows),
    }
    chunks = [(x[i:i + CHUNK], x[i:i + CHUNK].reshape(-1, ROW))
              for i in range(0, x.size - CHUNK + 1, CHUNK)]
    totals = {name: [] for name in steps}
    for _ in range(3):
        spent = dict.fromkeys(steps, 0.0)
        for y, rows in chunks:
            for name, step in steps.items():
                start = time.thread_time()
                step(y, rows)
                spent[name] += time.thread_time() - start
        for name in steps:
            totals[name].append(spent[name])
    whole = 0.0
    print(f"passes over {len(chunks)} chunks of 1 MiB, one thread, thread CPU time "
          f"(median of 3):")
    for name, t in totals.items():
        m = statistics.median(t)
        whole += m
        print(f"  {name:36s} {m * 1e3:6.1f} ms  ({m * 1e9 / x.size:.2f} ns/element)")
    print(f"  {'all five':36s} {whole * 1e3:6.1f} ms  ({whole * 1e9 / x.size:.2f} ns/element):"
          f" on two ideal cores {2 * x.nbytes / whole / 1e9:.1f} GB/s at best")


def xla(x: np.ndarray) -> None:
    import jax
    import jax.numpy as jnp

    n = x.size - x.size % (64 * ROW)
    xj = jax.device_put(x[:n])

    def all_figures(v):
        y = v.reshape(-1, ROW)
        return (y.sum(0), (y * y).sum(0), y.min(0), y.max(0),
                (y == 0).astype(jnp.int32).sum(0))

    def blocks(v, k=32):
        def body(i, acc):
            y = jax.lax.dynamic_slice(v, (i * k * ROW,), (k * ROW,)).reshape(k, ROW)
            s, ss, lo, hi, z = acc
            return (s + y.sum(0), ss + (y * y).sum(0), jnp.minimum(lo, y.min(0)),
                    jnp.maximum(hi, y.max(0)), z + (y == 0).astype(jnp.int32).sum(0))
        zero = jnp.zeros(ROW, jnp.float32)
        init = (zero, zero, zero + jnp.inf, zero - jnp.inf, jnp.zeros(ROW, jnp.int32))
        return jax.lax.fori_loop(0, v.size // (k * ROW), body, init)

    forms = {"sum over the major axis of (rows, 1024)": lambda v: v.reshape(-1, ROW).sum(0),
             "sum of squares, same axis": lambda v: (v * v).reshape(-1, ROW).sum(0),
             "all five figures, same axis": all_figures,
             "all five, loop over blocks of 32 rows": blocks}
    print("XLA on the CPU, one call over the buffer (wall time, median of 5):")
    for name, fn in forms.items():
        f = jax.jit(fn)
        t = best_of(lambda f=f: jax.block_until_ready(f(xj)))
        print(f"  {name:40s} {t * 1e3:7.1f} ms  {xj.nbytes / t / 1e9:5.1f} GB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=400)
    parser.add_argument("--xla", action="store_true", help="also the XLA formulations")
    args = parser.parse_args()
    n = args.mb * 10**6 // 4
    x = np.random.default_rng(0).standard_normal(n - n % CHUNK, dtype=np.float32)
    print(f"numpy {np.__version__}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"{x.nbytes / 1e6:.0f} MB float32")
    references(x)
    one_pass(x)
    passes(x)
    if args.xla:
        xla(x)


if __name__ == "__main__":
    main()
