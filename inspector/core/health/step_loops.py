"""The timeline's figures of float32 leaves on the CPU, one pass: a numba loop that computes
every sum of a chunk of a step (`b`, the leaf at step t, against `a`, the same leaf at t - 1)
while reading each element once (NumPy needed seven passes a chunk, 1.52 ns of CPU an element
here: docs/timeline-speed.md).

Imported only when a timeline reduces float32 leaves on the CPU (numba takes ~0.35 s to
import and compiles the loop once, cached on disk: `cache=True`).

How the loop stays vectorised (AVX2/AVX-512, checked with `inspect_asm`: packed ymm
arithmetic, no gathers): each element is loaded once, as its uint32 bits (`_float` casts them
for the sums, `_abs_bits` clears the sign for the maximum of |b|, an unsigned integer
maximum: float max/min would need `nnan`, which would also drop the NaN the caller looks
for); counts as float32 sums inside a block (numba widens integer sums to 64 bits, which the
vectoriser will not pack 8 to a register); blocks of 1,024 elements as slices (a
`range(i, min(i + 1024, n))` loop is emitted with gathers). Float32 sums inside a block,
float64 between blocks: ~1e-7 relative error against float64. NaN and Inf are not flagged
here: they make the sums non-finite (or the maximum NaN/Inf), and the caller reduces such
pairs again with the careful kernel.
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
"""Elements of `b` fetched ahead of the pass (16 KiB of float32: `_prefetch` of each cache
line while the block in hand is computed; `a`, the step before's chunk, is in cache already).
Measured (a one-off script) on 8 steps of 8.3M random float32 elements, chunk-major in one
thread: 0.47-0.52 ns of CPU an element against 0.56-0.57 without (8-32 KiB ahead alike)."""
LINE = 16  # float32 elements in a 64-byte cache line
SUM_SQ, DIFF_SQ, CHANGED = range(3)  # columns of `sums`
N_SUMS = 3


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
    """The float32 whose bits are uint32 `bits` (numba has no scalar bit cast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return numba.types.float32(bits), codegen


@intrinsic
def _abs_bits(typingctx, bits):
    """uint32 `bits` with the sign bit cleared, as uint32 (numba's `&` would widen it to 64
    bits, and the maximum would not vectorise): the bits of |x|, ordered as |x| (NaN above
    Inf above every finite value)."""
    def codegen(context, builder, signature, args):
        return builder.and_(args[0], ir.Constant(ir.IntType(32), 0x7FFFFFFF))
    return numba.types.uint32(bits), codegen


@numba.njit(nogil=True, cache=True, boundscheck=False, fastmath=FAST)
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
            _prefetch(ub, p)
        fetched = max(fetched, end)
        a, b = xa[i:i + BLOCK], xb[i:i + BLOCK]
        s32, d32, c32 = np.float32(0), np.float32(0), np.float32(0)
        for j in range(b.size):
            wa, wb = a[j], b[j]
            y = _float(wb)
            d = y - _float(wa)
            s32 += y * y
            d32 += d * d
            c32 += np.float32(wa != wb)
            top = max(top, _abs_bits(wb))
        sq += s32
        dsq += d32
        changed += c32
    sums[t, SUM_SQ] += sq
    sums[t, DIFF_SQ] += dsq
    sums[t, CHANGED] += changed
    tops[t] = top

