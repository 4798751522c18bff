"""The scan's one pass over a float32 buffer on the CPU: a numba loop that computes every
figure of a segment while reading it once (NumPy has no routine for two of them at a time, so
its five passes per element cost 0.86-1.02 ns of CPU an element here; this loop 0.17-0.2 ns
from cache, ~0.6 ns from memory in one thread: docs/health-speed.md).

Imported only when a scan runs on the CPU (numba takes ~0.35 s to import and compiles each
kernel once, cached on disk: `cache=True`).

How the loop stays vectorised (AVX2/AVX-512, checked in `inspect_asm`): no float min/max
(they need `nnan`, which would also drop the NaN the caller looks for), but the integer
maxima and minima of the bits (`host_scan.decode_min_max`); counts as float32 sums inside a
block (numba widens integer sums to 64 bits, which the vectoriser will not pack 8 to a
register); blocks of 1,024 elements as slices (a `range(i, min(i + 1024, n))` loop is
emitted with gathers). Float32 sums inside a block, float64 between blocks: ~1e-7 relative
error, as rows of 1,024 in BLAS added in float64 were. NaN and Inf are not flagged here: they
make the sums non-finite, and the caller rescans those segments carefully.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

FAST = {"reassoc", "contract", "nsz", "arcp"}  # never nnan/ninf: NaN must reach the sums
BLOCK = 1024
AHEAD = 4096
"""Elements read ahead of the pass (16 KiB of float32): the pass fetches each cache line
there (`_prefetch`) while it computes on the block in hand. Measured on 400 MB in two threads:
27-28 ms against 32 ms without (2-16 KiB ahead alike)."""
LINE = 16  # float32 elements in a 64-byte cache line


@intrinsic
def _prefetch(typingctx, array, index):
    """`llvm.prefetch` (read, keep in every cache level) of `array[index]`: numba has no
    prefetch of its own."""
    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        byte = ir.PointerType(ir.IntType(8))
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]),
            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(builder.gep(data, [args[1]]), byte), i32(0), i32(3),
                          i32(1)])
        return context.get_dummy_value()
    return numba.types.void(array, index), codegen


@intrinsic
def _float(typingctx, bits):
    """The float32 whose bits are uint32 `bits` (numba has no scalar bit cast): the pass loads
    each element once, as an integer, for the integer extrema and the float sums alike."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return numba.types.float32(bits), codegen


@intrinsic
def _signed(typingctx, bits):
    """uint32 `bits` as int32 (a bit cast: no widening to 64 bits, as numba's int32() of a
    uint32 would not vectorise)."""
    def codegen(context, builder, signature, args):
        return args[0]
    return numba.types.int32(bits), codegen
BITS = 3  # per segment: the bits' uint32 max, uint32 min, int32 max (as uint32)
SUMS = 4  # per segment: sum d, sum d^2, zeros, shift (d = x - shift)


@numba.njit(nogil=True, cache=True, boundscheck=False, fastmath=FAST)
def _moments(u, c):
    """`(sum d, sum d^2)` of `d = x - c`, `u` the bits of float32 `x` (float32 in each block,
    float64 between blocks)."""
    s, ss = 0.0, 0.0
    for i in range(0, u.size, BLOCK):
        ub = u[i:i + BLOCK]
        s32, ss32 = np.float32(0), np.float32(0)
        for j in range(ub.size):
            d = _float(ub[j]) - c
            s32 += d
            ss32 += d * d
        s += s32
        ss += ss32
    return s, ss


@numba.njit(nogil=True, cache=True, boundscheck=False, fastmath=FAST)
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
                _prefetch(u, p)
            fetched = max(fetched, end)
            ub = us[i:i + BLOCK]
            s32, ss32, z32 = np.float32(0), np.float32(0), np.float32(0)
            for j in range(ub.size):
                w = ub[j]
                v = _float(w)
                umax = max(umax, w)
                umin = min(umin, w)
                imax = max(imax, _signed(w))
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
