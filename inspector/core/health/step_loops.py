"""The timeline's figures of float32 leaves on the CPU, one pass: a numba loop that computes
every sum of a chunk of a step (`b`, the leaf at step t, against `a`, the same leaf at t - 1)
while reading each element once (NumPy needed seven passes a chunk, 1.52 ns of CPU an element
here: docs/timeline-speed.md).

Imported only when a timeline reduces float32 leaves on the CPU. Vectorised as
`core/cpu_loops.py` says: each element loaded once, as its uint32 bits (`as_float` for the
sums, `abs_bits` for the maximum of |b|, an unsigned integer maximum), the changed elements
counted as a float32 sum, blocks of 1,024 elements as slices. Float32 sums inside a block,
float64 between blocks: ~1e-7 relative error against float64. NaN and Inf are not flagged
here: they make the sums non-finite (or the maximum NaN/Inf), and the caller reduces such
pairs again with the careful kernel.
"""

from __future__ import annotations

import numpy as np

from inspector.core.cpu_loops import abs_bits, as_float, loop, prefetch

BLOCK = 1024
AHEAD = 4096
"""Elements of `b` fetched ahead of the pass (16 KiB of float32: `prefetch` of each cache
line while the block in hand is computed; `a`, the step before's chunk, is in cache already).
Measured (a one-off script) on 8 steps of 8.3M random float32 elements, chunk-major in one
thread: 0.47-0.52 ns of CPU an element against 0.56-0.57 without (8-32 KiB ahead alike)."""
LINE = 16  # float32 elements in a 64-byte cache line
SUM_SQ, DIFF_SQ, CHANGED = range(3)  # columns of `sums`
N_SUMS = 3


@loop
def pair_sums(ua, ub, lo, hi, sums, tops, t):
    """Adds to `sums[t]` the `(sum b^2, sum (b - a)^2, elements whose bits differ)` of
    elements `[lo, hi)` of float32 leaves `a`, `b` (given as their uint32 bits `ua`, `ub`,
    same size) and raises `tops[t]` to the bits of their `max |b|`. A leaf without a step
    before is passed as both `a` and `b`: its `sum b^2` is then summed in the same order as
    when it is a step's `b` (the same figures whether a run's leaves come in one batch or
    several)."""
    xa, xb = ua[lo:hi], ub[lo:hi]
    sq, dsq, changed = 0.0, 0.0, 0.0
    top = tops[t]
    fetched = lo  # the lines of `b` before this one are fetched (or asked for)
    for i in range(0, xb.size, BLOCK):
        end = min(lo + i + AHEAD + BLOCK, hi)
        for p in range(max(fetched, lo + i + AHEAD), end, LINE):
            prefetch(ub, p)
        fetched = max(fetched, end)
        a, b = xa[i:i + BLOCK], xb[i:i + BLOCK]
        s32, d32, c32 = np.float32(0), np.float32(0), np.float32(0)
        for j in range(b.size):
            wa, wb = a[j], b[j]
            y = as_float(wb)
            d = y - as_float(wa)
            s32 += y * y
            d32 += d * d
            c32 += np.float32(wa != wb)
            top = max(top, abs_bits(wb))
        sq += s32
        dsq += d32
        changed += c32
    sums[t, SUM_SQ] += sq
    sums[t, DIFF_SQ] += dsq
    sums[t, CHANGED] += changed
    tops[t] = top

