"""The CPU's FP8 dequantize loop (`inspector/core/quant/dequant_loops.fp8_runs`, non-temporal
stores) against the memory-bandwidth reference of the same run (`bandwidth.py`).

    PYTHONPATH=. python benchmarks/bench_dequant_loop.py [--rounds 7] [--n 100000000]
                                                         [--parts] [--float32]

The case: N = 1e8 float8_e4m3fn codes (random bytes, NaN codes included) in runs of 128
elements (R = N / 128 runs, each its own random float32 scale, `scale_index = arange(R)`),
dequantized to bfloat16 into a preallocated, faulted-in output.

GB/s counts the bytes the call reads and writes, once each:
N x 1 (codes) + R x 4 (scales) + R x 8 (starts, int64) + R x 8 (scale index, int64) +
N x 2 (bfloat16 out; N x 4 with `--float32`), over the call's wall time (threads started and
joined inside it). The reference is the best median of `bandwidth.Reference`'s copies (NumPy
1 thread, NumPy all cores, XLA donated), sampled between the loop's samples, one of each per
round; the ratio is loop median / reference median.

The output is `dequant_loops.empty_out` (64-byte aligned: every line streamed straight from
the registers); `unaligned output` is the same call into NumPy's own `np.empty` (16 bytes past
a page: the lines go through the L1 scratch). `--parts` also times, alternated in the same
rounds: `read only` (the codes summed as uint64 by NumPy: 1 byte a code counted) and
`ordinary stores` (NumPy's `np.copyto` of the codes into a uint16 array: 3 bytes a code
counted, the floor of a kernel whose stores read each line first).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from inspector.core.quant import dequant_loops  # noqa: E402


def case(n: int, run: int = 128, seed: int = 0):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 256, n, dtype=np.uint8)
    r = -(-n // run)
    starts = np.minimum(np.arange(r + 1, dtype=np.int64) * run, n)
    scale_index = np.arange(r, dtype=np.int64)
    scales = (rng.standard_normal(r) * 1e-3).astype(np.float32)
    return codes, starts, scale_index, scales


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=100_000_000)
    parser.add_argument("--parts", action="store_true")
    parser.add_argument("--float32", action="store_true")
    args = parser.parse_args()
    from bandwidth import Reference

    n = args.n
    codes, starts, scale_index, scales = case(n)
    r = scale_index.size
    kind = "float32" if args.float32 else "bfloat16"
    out = dequant_loops.empty_out(n, kind)
    out[:] = 1  # faulted in
    plain = np.ones(n, out.dtype)
    counted = n + r * (4 + 8 + 8) + n * out.itemsize
    call = lambda: dequant_loops.fp8_runs(codes, starts, scale_index, scales, out, kind,  # noqa: E731
                                          "e4m3fn")
    unaligned = lambda: dequant_loops.fp8_runs(codes, starts, scale_index, scales,  # noqa: E731
                                               plain, kind, "e4m3fn")
    call()  # compile / load from the cache
    variants = {f"fp8_runs -> {kind}": (call, counted),
                "unaligned output": (unaligned, counted)}
    if args.parts:
        wide = np.ones(n, np.uint16)
        variants.update({
            "read only (codes as uint64, np.sum)": (lambda: codes.view(np.uint64).sum(), n),
            "ordinary stores (np.copyto u8->u16)": (lambda: np.copyto(wide, codes), 3 * n),
        })
    ref = Reference()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        ref.sample()
        for name, (fn, nbytes) in variants.items():
            samples[name].append(nbytes / timed(fn) / 1e9)
    ref.sample()
    best_name, best = ref.best()
    print(f"load {os.getloadavg()[0]:.2f}; N = {n:,} codes, R = {r:,} runs of 128; "
          f"{args.rounds} rounds alternated with the reference")
    print(ref.summary())
    for name, s in samples.items():
        med = statistics.median(s)
        print(f"  {name:>36}: {med:6.1f} GB/s ({min(s):.1f}-{max(s):.1f}, n={len(s)}), "
              f"ratio {med / best:.2f}")
    fp8 = dequant_loops.fp8_runs.__name__
    print(f"{fp8} bytes counted: {counted:,} ({counted / n:.4f} a code); reference: "
          f"{best_name} {best:.1f} GB/s")
    ref.close()


if __name__ == "__main__":
    main()
