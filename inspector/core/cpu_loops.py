"""What the CPU's numba loops share (`health/scan_loops.py`, `health/step_loops.py`): the
decorator and the LLVM operations numba does not offer. Imported only with them (numba
takes ~0.45 s to import).

What keeps such a loop vectorised here (AVX2/AVX-512, checked with `inspect_asm`):
- fast-math `FAST`, never `nnan`/`ninf`: NaN and Inf must reach the sums the caller checks;
- no float `min`/`max` (without `nnan` they stay scalar): integer extrema of the bits;
- counts as float32 sums inside a block (numba widens integer sums to 64 bits, which the
  vectoriser packs 4 to a register, not 8);
- blocks as slices, `xb = x[i:i + 1024]`: a loop over `range(i, min(i + 1024, n))` is emitted
  with gathers.
"""

from __future__ import annotations

import numba
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

FAST = {"reassoc", "contract", "nsz", "arcp"}
OPTIONS = dict(nogil=True, boundscheck=False, fastmath=FAST)


def loop(fn):
    """`numba.njit` with `OPTIONS`, cached on disk (a compile takes ~1 s; loading it from the
    cache ~0.1 s). Where numba finds no writable cache location (a read-only install and no
    writable home or `NUMBA_CACHE_DIR`), compiled in each process instead of failing."""
    try:
        return numba.njit(cache=True, **OPTIONS)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(**OPTIONS)(fn)


def _prefetcher(locality: int, doc: str):
    """An intrinsic `f(array, index)`: `llvm.prefetch` (read) of `array[index]` at `locality`
    (3: into L1 and every level below; 2: into L2, not L1)."""
    @intrinsic
    def fetch(typingctx, array, index):
        def codegen(context, builder, signature, args):
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            byte = ir.PointerType(ir.IntType(8))
            i32 = ir.IntType(32)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]),
                "llvm.prefetch.p0")
            builder.call(fn, [builder.bitcast(builder.gep(data, [args[1]]), byte), i32(0),
                              i32(locality), i32(1)])
            return context.get_dummy_value()
        return numba.types.void(array, index), codegen
    fetch.__doc__ = doc
    return fetch


prefetch = _prefetcher(3, "`llvm.prefetch` (read, keep in every cache level) of `array[index]`.")
prefetch_l2 = _prefetcher(2, """`llvm.prefetch` of `array[index]` into L2, not L1 (x86
`prefetcht1`). A pass that asks for lines far ahead into L2 and near ahead into L1 read
faster here than with either alone (`health/scan_loops.py`).""")


@intrinsic
def as_float(typingctx, bits):
    """The float32 whose bits are uint32 `bits` (a loop can then load each element once, as
    an integer, for integer extrema and float sums alike)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return numba.types.float32(bits), codegen


@intrinsic
def as_int32(typingctx, bits):
    """uint32 `bits` as int32, the same bits (numba's `np.int32()` of a uint32 goes through
    64 bits and stays scalar)."""
    def codegen(context, builder, signature, args):
        return args[0]
    return numba.types.int32(bits), codegen


@intrinsic
def abs_bits(typingctx, bits):
    """uint32 `bits` with the sign bit cleared, as uint32 (numba's `&` would widen it to 64
    bits, and the maximum would not vectorise): the bits of |x|, ordered as |x| (NaN above
    Inf above every finite value)."""
    def codegen(context, builder, signature, args):
        return builder.and_(args[0], ir.Constant(ir.IntType(32), 0x7FFFFFFF))
    return numba.types.uint32(bits), codegen
