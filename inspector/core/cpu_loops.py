"""What the CPU's numba loops share (`health/scan_loops.py`, `health/step_loops.py`,
`quant/dequant_loops.py`): the decorator and the LLVM operations numba does not offer
(`stream_copy` / `store_fence`: non-temporal stores). Imported only with them (numba
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

import os
import platform
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

FAST = {"reassoc", "contract", "nsz", "arcp"}
OPTIONS = dict(nogil=True, boundscheck=False, fastmath=FAST)


def loop(fn, **options):
    """`numba.njit` with `OPTIONS` (`options` replace some: `fastmath=False` for a loop whose
    rounding must be IEEE's, step by step), cached on disk (a compile takes ~1 s; loading it
    from the cache ~0.1 s). Where numba finds no writable cache location (a read-only install
    and no writable home or `NUMBA_CACHE_DIR`), compiled in each process instead of failing."""
    options = {**OPTIONS, **options}
    try:
        return numba.njit(cache=True, **options)(fn)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(**options)(fn)


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


STREAMING = platform.machine().lower() in ("x86_64", "amd64")
"""Whether `stream_copy` writes with non-temporal stores (x86-64: `vmovntdq`); elsewhere its
stores are ordinary ones."""
LINE_BYTES = 64


@intrinsic
def stream_copy(typingctx, dst, dst_start, src, count):
    """`dst[dst_start:dst_start + count] = src[:count]` (1-D contiguous arrays of one item
    size), the destination's whole 64-byte lines written by non-temporal stores where
    `STREAMING`: a store that skips the read of the line a cached store makes first
    (write-allocate), as glibc's `memcpy` does for large copies. The head up to the first
    64-byte boundary and the tail after the last are copied by `llvm.memcpy`.

    Meant for a block computed into a small scratch array in L1 and streamed out (LLVM's
    vectoriser leaves a `!nontemporal` store scalar where it cannot prove its alignment, so
    the loop that computes cannot stream itself). The stores are weakly ordered: end the
    writing with `store_fence()` before another thread reads the result."""
    if dst.dtype.bitwidth != src.dtype.bitwidth:
        return None

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        byte = ir.PointerType(ir.IntType(8))
        vector = ir.VectorType(ir.IntType(32), LINE_BYTES // 4)
        item = dst.dtype.bitwidth // 8
        start = context.cast(builder, args[1], signature.args[1], numba.types.int64)
        n = context.cast(builder, args[3], signature.args[3], numba.types.int64)
        d_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        s_data = context.make_array(signature.args[2])(context, builder, args[2]).data
        d = builder.bitcast(builder.gep(d_data, [start]), byte)
        s = builder.bitcast(s_data, byte)
        nbytes = builder.mul(n, i64(item))
        head = builder.and_(builder.sub(i64(0), builder.ptrtoint(d, i64)), i64(LINE_BYTES - 1))
        head = builder.select(builder.icmp_unsigned("<", head, nbytes), head, nbytes)
        with builder.if_then(builder.icmp_unsigned("!=", head, i64(0))):
            cgutils.raw_memcpy(builder, d, s, head, 1)
        lines = builder.udiv(builder.sub(nbytes, head), i64(LINE_BYTES))
        flag = builder.module.add_metadata([ir.IntType(32)(1)])
        with cgutils.for_range(builder, lines) as line:
            at = builder.add(head, builder.mul(line.index, i64(LINE_BYTES)))
            value = builder.load(builder.bitcast(builder.gep(s, [at]), vector.as_pointer()),
                                 align=1)
            store = builder.store(value, builder.bitcast(builder.gep(d, [at]),
                                                         vector.as_pointer()), align=LINE_BYTES)
            if STREAMING:
                store.set_metadata("nontemporal", flag)
        done = builder.add(head, builder.mul(lines, i64(LINE_BYTES)))
        with builder.if_then(builder.icmp_unsigned("!=", done, nbytes)):
            cgutils.raw_memcpy(builder, builder.gep(d, [done]), builder.gep(s, [done]),
                               builder.sub(nbytes, done), 1)
        return context.get_dummy_value()
    return numba.types.void(dst, dst_start, src, count), codegen


@intrinsic
def store_fence(typingctx):
    """`sfence` where `STREAMING` (orders the non-temporal stores before what follows: call it
    at the end of a thread's writing); nothing elsewhere."""
    def codegen(context, builder, signature, args):
        if STREAMING:
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence")
            builder.call(fn, [])
        return context.get_dummy_value()
    return numba.types.void(), codegen


THREADS = max(1, min(2, os.cpu_count() or 1))
"""Threads the loops' jobs share: one per core, at most two (what helped here)."""
_POOL: list[ThreadPoolExecutor] = []


def pool() -> ThreadPoolExecutor:
    """The thread pool of the loops' jobs (`dequant_loops`, `sum_loops`), made on first use.
    A job must not wait on another job of the pool."""
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(THREADS, thread_name_prefix="inspector-loops"))
    return _POOL[0]


def aligned_empty(n: int, dtype) -> np.ndarray:
    """An uninitialised 1-D array of `n` elements whose first one lies on a 64-byte boundary
    (NumPy's own large arrays start 16 bytes past a page): whole lines can be streamed."""
    dtype = np.dtype(dtype)
    raw = np.empty(n + LINE_BYTES // dtype.itemsize, dtype)
    skip = (-raw.__array_interface__["data"][0] % LINE_BYTES) // dtype.itemsize
    return raw[skip:skip + n]
