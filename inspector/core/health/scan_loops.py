"""The scan's one pass over a float32 buffer on the CPU: a numba loop that computes every
figure of a segment while reading it once (NumPy has no routine for two of them at a time, so
its five passes per element cost 0.86-1.02 ns of CPU an element here: docs/health-speed.md).

Imported only when a scan runs on the CPU. Vectorised as `core/cpu_loops.py` says: min and
max from the integer extrema of the bits (`host_scan.decode_min_max`), each element loaded
once as uint32 (`as_float` for the sums), zeros counted as a float32 sum where a block has
one. Float32 sums inside
a block of 1,024 elements, float64 between blocks: ~1e-7 relative error or less, as rows of
1,024 in BLAS added in float64 were. NaN and Inf are not flagged here: they make the sums
non-finite, and the caller rescans those segments carefully.
"""

from __future__ import annotations

import numpy as np

from inspector.core.cpu_loops import abs_bits, as_float, as_int32, loop, prefetch, prefetch_l2

BLOCK = 1024
"""Elements a block: float32 sums inside it, float64 between blocks. The lines of the blocks
ahead are asked for between blocks (`AHEAD`, `FAR`). With zeros counted only where a block
holds one, 1,024 took 17.7-17.9 ms against 18.1-18.6 ms with 512 and 20.8-21.3 with 256
(two threads, 400 MB, alternated)."""
AHEAD = 1024
"""Elements (4 KiB of float32) ahead of the block in hand whose cache lines are asked for into
L1 (`prefetch`) while the block is computed."""
FAR = 8192
"""Elements (32 KiB) ahead whose lines are asked for into L2 (`prefetch_l2`). The two levels
together (blocks of 512) against one level (8 KiB ahead into L1, blocks of 256: the pass
before), alternated in one process: 0.57-0.61 against 0.50-0.53 of a 2-thread copy, three
runs (`bench_scan_passes.py` alternates settings; docs/health-speed.md)."""
LINE = 16  # float32 elements in a 64-byte cache line
BITS = 3  # per segment: the bits' uint32 max, least |x| bits, int32 max (as uint32)
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
def segment_pass(u, starts, bits, sums, block=BLOCK, ahead=AHEAD, far=FAR):
    """For each segment `k` of a float32 buffer, `[starts[k], starts[k + 1])` (`u`: its bits as
    uint32), writes `bits[k] = (uint32 max, least |x| bits, int32 max)` and
    `sums[k] = (sum d, sum d^2, zeros, shift)`. Zeros are counted only in a block whose least
    |x| bits are 0 (a second look at the block, in L1): the least |x| bits also stand for the
    uint32 minimum `decode_min_max` needs, so a block costs one extremum fewer (12-14% less
    time on data without zeros, the same with zeros in every block: docs/health-speed.md).
    The shift is 0 unless the segment's mean is large against its spread (`sum x^2 > 4 M2`,
    where `M2 = sum x^2 - (sum x)^2 / n` would lose digits): then the segment (still in
    cache) is summed again about its mean, rounded to float32. `block`, `ahead` and `far` (0:
    no prefetch into L2) are `BLOCK`, `AHEAD` and `FAR` unless a benchmark compares others
    (`bench_scan_passes.py`)."""
    fetched, fetched_far = 0, 0  # the lines before these are asked for, into L1 / into L2
    for k in range(starts.size - 1):
        a, b = starts[k], starts[k + 1]
        us = u[a:b]
        umax, amin, imax = np.uint32(0), np.uint32(0xFFFFFFFF), np.int32(-2147483648)
        s, ss, zeros = 0.0, 0.0, 0.0
        for i in range(0, us.size, block):
            end = min(a + i + ahead + block, u.size)
            for p in range(max(fetched, a + i + ahead), end, LINE):
                prefetch(u, p)
            fetched = max(fetched, end)
            if far:
                end = min(a + i + far + block, u.size)
                for p in range(max(fetched_far, a + i + far), end, LINE):
                    prefetch_l2(u, p)
                fetched_far = max(fetched_far, end)
            ub = us[i:i + block]
            s32, ss32 = np.float32(0), np.float32(0)
            low = np.uint32(0xFFFFFFFF)  # the block's least |x| bits
            for j in range(ub.size):
                w = ub[j]
                v = as_float(w)
                umax = max(umax, w)
                imax = max(imax, as_int32(w))
                low = min(low, abs_bits(w))
                s32 += v
                ss32 += v * v
            if low == 0:  # a zero (+0.0 or -0.0) in the block: counted
                z32 = np.float32(0)
                for j in range(ub.size):
                    z32 += np.float32(abs_bits(ub[j]) == np.uint32(0))
                zeros += z32
            amin = min(amin, low)
            s += s32
            ss += ss32
        bits[k, 0], bits[k, 1], bits[k, 2] = umax, amin, np.uint32(imax)
        shift = np.float32(0)
        n = b - a
        if n > 0 and np.isfinite(s) and np.isfinite(ss) and ss > 4 * (ss - s * s / n):
            shift = np.float32(s / n)
            s, ss = _moments(us, shift)
        sums[k, 0], sums[k, 1], sums[k, 2], sums[k, 3] = s, ss, zeros, shift
