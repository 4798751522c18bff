"""The scan's one pass over a float32 buffer on the CPU: a numba loop that computes every
figure of a segment while reading it once (NumPy has no routine for two of them at a time, so
its five passes per element cost 0.86-1.02 ns of CPU an element here; this loop 0.17-0.2 ns
from cache, ~0.6 ns from memory in one thread: docs/health-speed.md).

Imported only when a scan runs on the CPU. Vectorised as `core/cpu_loops.py` says: min and
max from the integer extrema of the bits (`host_scan.decode_min_max`), each element loaded
once as uint32 (`as_float` for the sums), zeros counted as a float32 sum. Float32 sums inside
a block of 256 elements, float64 between blocks: ~1e-7 relative error or less, as rows of
1,024 in BLAS added in float64 were. NaN and Inf are not flagged here: they make the sums
non-finite, and the caller rescans those segments carefully.
"""

from __future__ import annotations

import numpy as np

from inspector.core.cpu_loops import as_float, as_int32, loop, prefetch

BLOCK = 256
"""Elements a block: float32 sums inside it, float64 between blocks. With the lines of the
next blocks asked for between blocks, 256 let the pass overlap reading and computing best:
`bench_health.py --only scan`, alternated, ratio 0.44-0.48 against 0.38-0.39 with 1,024; 128
alike, 64 worse (docs/health-speed.md)."""
AHEAD = 2048
"""Elements read ahead of the pass (8 KiB of float32): the pass fetches each cache line
there (`prefetch`) while it computes on the block in hand. Without: 32 ms for 400 MB in two
threads, against 27-28 ms (blocks of 1,024, 16 KiB ahead). With blocks of 256, 4-8 KiB ahead
gave ratios 0.42-0.50, 16 KiB 0.41-0.43, 32 KiB 0.38-0.40."""
LINE = 16  # float32 elements in a 64-byte cache line
BITS = 3  # per segment: the bits' uint32 max, uint32 min, int32 max (as uint32)
SUMS = 4  # per segment: sum d, sum d^2, zeros, shift (d = x - shift)


@loop
def _moments(u, c):
    """`(sum d, sum d^2)` of `d = x - c`, `u` the bits of float32 `x` (float32 in each block,
    float64 between blocks)."""
    s, ss = 0.0, 0.0
    for i in range(0, u.size, BLOCK):
        ub = u[i:i + BLOCK]
        s32, ss32 = np.float32(0), np.float32(0)
        for j in range(ub.size):
            d = as_float(ub[j]) - c
            s32 += d
            ss32 += d * d
        s += s32
        ss += ss32
    return s, ss


@loop
def segment_pass(u, starts, bits, sums):
    """For each segment `k` of a float32 buffer, `[starts[k], starts[k + 1])` (`u`: its bits as
    uint32), writes `bits[k] = (uint32 max, uint32 min, int32 max)` and
    `sums[k] = (sum d, sum d^2, zeros, shift)`. The shift is 0 unless the segment's mean is
    large against its spread (`sum x^2 > 4 M2`, where `M2 = sum x^2 - (sum x)^2 / n` would
    lose digits): then the segment (still in cache) is summed again about its mean, rounded
    to float32."""
    fetched = 0  # the lines before this one are fetched (or asked for)
    for k in range(starts.size - 1):
        a, b = starts[k], starts[k + 1]
        us = u[a:b]
        umax, umin, imax = np.uint32(0), np.uint32(0xFFFFFFFF), np.int32(-2147483648)
        s, ss, zeros = 0.0, 0.0, 0.0
        for i in range(0, us.size, BLOCK):
            end = min(a + i + AHEAD + BLOCK, u.size)
            for p in range(max(fetched, a + i + AHEAD), end, LINE):
                prefetch(u, p)
            fetched = max(fetched, end)
            ub = us[i:i + BLOCK]
            s32, ss32, z32 = np.float32(0), np.float32(0), np.float32(0)
            for j in range(ub.size):
                w = ub[j]
                v = as_float(w)
                umax = max(umax, w)
                umin = min(umin, w)
                imax = max(imax, as_int32(w))
                s32 += v
                ss32 += v * v
                z32 += np.float32(v == np.float32(0))
            s += s32
            ss += ss32
            zeros += z32
        bits[k, 0], bits[k, 1], bits[k, 2] = umax, umin, np.uint32(imax)
        shift = np.float32(0)
        n = b - a
        if n > 0 and np.isfinite(s) and np.isfinite(ss) and ss > 4 * (ss - s * s / n):
            shift = np.float32(s / n)
            s, ss = _moments(us, shift)
        sums[k, 0], sums[k, 1], sums[k, 2], sums[k, 3] = s, ss, zeros, shift
