"""The LLVM pieces of the CPU's FP8 dequantize loop (`dequant_loops.py`): float8 decoders and
float32 -> bfloat16 / float16 rounding as `@intrinsic`s, so that their arithmetic stays in 32 or
16 bits (numba widens integer arithmetic to 64 bits, and the vectoriser then packs half as
many lanes), and `bf16_table_e4m3fn`, a block of 32 codes a step by explicit vector
operations. Bit for bit NumPy's `astype` with ml_dtypes' types (tests/core/test_dequant_loops.py).

Imported only with the loops (numba). numba's disk cache keys the loops on the source of
`dequant_loops.py` alone: after editing this file, touch that one (or its `__pycache__`'s
`*.nbi` files go stale unnoticed).
"""

from __future__ import annotations

import functools
import platform

import numba
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic


def _has_feature(name: str) -> bool:
    """Whether LLVM's host CPU (x86-64 only) has feature `name`: elsewhere these loops take
    their portable forms (LLVM would call runtime routines for float16, and the table path
    is x86's `vpermw`)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    from llvmlite import binding
    return bool(binding.get_host_cpu_features().get(name, False))


HARD_HALF = _has_feature("f16c")
"""float16 conversions in hardware: the short decoders (`e4m3fn_over_256`, `e5m2_half`) and
`f16_bits` by `vcvtps2ph`; else the integer decoders and rounding."""

_I32 = ir.IntType(32)
_F32 = ir.FloatType()


def _u32(value: int) -> ir.Constant:
    return ir.Constant(_I32, value & 0xFFFFFFFF)


def _fp8_ir(builder, code, mantissa: int, bias: int, ieee: bool):
    """The float32 value of uint8 `code` (a float8 with `mantissa` bits and `bias`; `ieee`:
    e5m2's inf and NaNs, else e4m3fn's NaN at magnitude 0x7F and no inf)."""
    b = builder.zext(code, _I32)
    sign = builder.shl(builder.and_(b, _u32(0x80)), _u32(24))
    mag = builder.and_(b, _u32(0x7F))
    normal = builder.add(builder.shl(mag, _u32(23 - mantissa)), _u32((127 - bias) << 23))
    tiny = builder.bitcast(builder.fmul(builder.uitofp(mag, _F32),
                                        ir.Constant(_F32, 2.0 ** (1 - bias - mantissa))), _I32)
    body = builder.select(builder.icmp_unsigned("<", mag, _u32(1 << mantissa)), tiny, normal)
    if ieee:
        special = builder.select(builder.icmp_unsigned("==", mag, _u32(0x7C)),
                                 _u32(0x7F800000), _u32(0x7FC00000))
        body = builder.select(builder.icmp_unsigned(">=", mag, _u32(0x7C)), special, body)
    else:
        body = builder.select(builder.icmp_unsigned("==", mag, _u32(0x7F)),
                              _u32(0x7FC00000), body)
    return builder.bitcast(builder.or_(sign, body), _F32)


@intrinsic
def e4m3fn_value(typingctx, code):
    """float32 of a float8_e4m3fn code (uint8): exact, NaN at 0x7F / 0xFF."""
    def codegen(context, builder, signature, args):
        return _fp8_ir(builder, args[0], 3, 7, False)
    return numba.types.float32(code), codegen


@intrinsic
def e5m2_value(typingctx, code):
    """float32 of a float8_e5m2 code (uint8): exact, inf and NaN as IEEE's."""
    def codegen(context, builder, signature, args):
        return _fp8_ir(builder, args[0], 2, 15, True)
    return numba.types.float32(code), codegen


_I16 = ir.IntType(16)


def _half_ir(builder, h, nan):
    """float32 of float16 bits `h` (i16), the quiet NaN of its sign where `nan` (i1)."""
    quiet = builder.or_(builder.and_(h, ir.Constant(_I16, 0x8000)), ir.Constant(_I16, 0x7E00))
    h = builder.select(nan, quiet, h)
    return builder.fpext(builder.bitcast(h, ir.HalfType()), _F32)


@intrinsic
def e4m3fn_over_256(typingctx, code):
    """float32 of a float8_e4m3fn code times 2^-8, exact (the quiet NaN of its sign at 0x7F /
    0xFF), by way of float16: the code's exponent and mantissa bits placed in float16's fields
    (whose bias is 8 more) give the value times 2^-8, subnormal codes included, and the
    hardware widens float16 (`vcvtph2ps`). Fewer operations than `e4m3fn_value`: multiply by
    256 x the scale (exact where that is finite) for the value times the scale."""
    def codegen(context, builder, signature, args):
        w = builder.sext(args[0], _I16)  # the sign in bits 8-15
        h = builder.and_(builder.shl(w, ir.Constant(_I16, 7)), ir.Constant(_I16, 0xBF80))
        nan = builder.icmp_unsigned("==", builder.and_(h, ir.Constant(_I16, 0x7FFF)),
                                    ir.Constant(_I16, 0x3F80))
        return _half_ir(builder, h, nan)
    return numba.types.float32(code), codegen


@intrinsic
def e5m2_half(typingctx, code):
    """float32 of a float8_e5m2 code, exact, by way of float16 (the code is float16's high
    byte); a NaN code gives the quiet NaN of its sign, as ml_dtypes does."""
    def codegen(context, builder, signature, args):
        h = builder.shl(builder.zext(args[0], _I16), ir.Constant(_I16, 8))
        nan = builder.icmp_unsigned(">", builder.and_(h, ir.Constant(_I16, 0x7FFF)),
                                    ir.Constant(_I16, 0x7C00))
        return _half_ir(builder, h, nan)
    return numba.types.float32(code), codegen


@intrinsic
def bf16_bits(typingctx, value):
    """The bfloat16 bits (uint16) of float32 `value`: round to nearest even, a NaN becomes the
    quiet NaN of its sign (ml_dtypes' and XLA's rule; `kernels.bf16_bits` in XLA)."""
    def codegen(context, builder, signature, args):
        u = builder.bitcast(args[0], _I32)
        high = builder.lshr(u, _u32(16))
        odd = builder.and_(high, _u32(1))
        rounded = builder.lshr(builder.add(u, builder.add(_u32(0x7FFF), odd)), _u32(16))
        quiet = builder.or_(builder.and_(high, _u32(0xFF80)), _u32(0x40))
        nan = builder.fcmp_unordered("uno", args[0], args[0])
        return builder.trunc(builder.select(nan, quiet, rounded), _I16)
    return numba.types.uint16(value), codegen


@intrinsic
def bf16_bits_quiet(typingctx, value):
    """`bf16_bits` for a `value` whose NaNs are quiet NaNs with no payload (0x7FC00000 and
    0xFFC00000: those of the decoders, and x86's default NaN), which the rounding itself
    maps to 0x7FC0 / 0xFFC0: no select."""
    def codegen(context, builder, signature, args):
        u = builder.bitcast(args[0], _I32)
        odd = builder.and_(builder.lshr(u, _u32(16)), _u32(1))
        rounded = builder.lshr(builder.add(u, builder.add(_u32(0x7FFF), odd)), _u32(16))
        return builder.trunc(rounded, _I16)
    return numba.types.uint16(value), codegen


@intrinsic
def f16_bits(typingctx, value):
    """The float16 bits (uint16) of float32 `value` as NumPy's `astype(np.float16)` gives them:
    round to nearest even, overflow to inf, subnormals rounded, a NaN keeps its sign and its
    payload's top 10 bits (a quiet NaN: the only kind a multiply gives). Where the CPU
    converts in hardware (`HARD_HALF`) that instruction (`vcvtps2ph`, the same results),
    else integer ops and a float add of 0.5 (whose rounding is the hardware's)."""
    def codegen(context, builder, signature, args):
        if HARD_HALF:
            return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), _I16)
        u = builder.bitcast(args[0], _I32)
        sign = builder.and_(builder.lshr(u, _u32(16)), _u32(0x8000))
        a = builder.and_(u, _u32(0x7FFFFFFF))
        odd = builder.and_(builder.lshr(a, _u32(13)), _u32(1))
        normal = builder.lshr(builder.add(a, builder.add(_u32(0xC8000FFF), odd)), _u32(13))
        half = builder.fadd(builder.bitcast(a, _F32), ir.Constant(_F32, 0.5))
        tiny = builder.sub(builder.bitcast(half, _I32), _u32(0x3F000000))
        nan = builder.or_(_u32(0x7C00), builder.lshr(builder.and_(a, _u32(0x7FFFFF)), _u32(13)))
        nan = builder.select(builder.icmp_unsigned("==", nan, _u32(0x7C00)), _u32(0x7C01), nan)
        h = builder.select(builder.icmp_unsigned("<", a, _u32(0x38800000)), tiny, normal)
        h = builder.select(builder.icmp_unsigned(">=", a, _u32(0x47800000)), _u32(0x7C00), h)
        h = builder.select(builder.icmp_unsigned(">", a, _u32(0x7F800000)), nan, h)
        return builder.trunc(builder.or_(h, sign), _I16)
    return numba.types.uint16(value), codegen


TABLES = _has_feature("avx512bw")
"""`bf16_table_e4m3fn` usable (it permutes 16-bit lanes with `vpermw`, AVX-512BW)."""
TABLE_SCALES = (2.0 ** -118, 2.0 ** 110)
"""|scale| range where `bf16_table_e4m3fn` is exact: every product of a normal code is a
normal float32 (>= 2^-126) and its bfloat16 no inf (448 x 2^110 < 2^128)."""


def _table_inputs(context, builder, signature, args):
    """What both table kernels start from: the codes' and the output's data pointers, the
    offsets `c0`, `s0` and the step count as int64, and the 16 products of the scale (lanes of
    int32 bits): 1.mmm x 2^-7 x s for m = 0..7, then m x 2^-9 x s (the subnormal codes)."""
    codes = context.make_array(signature.args[0])(context, builder, args[0]).data
    out = context.make_array(signature.args[2])(context, builder, args[2]).data
    c0, s0, count = (context.cast(builder, args[k], signature.args[k], numba.types.int64)
                     for k in (1, 3, 4))
    x = ir.Constant(ir.VectorType(_F32, 16), [(1 + m / 8) * 2.0 ** -7 for m in range(8)]
                    + [m * 2.0 ** -9 for m in range(8)])
    s = builder.insert_element(ir.Constant(ir.VectorType(_F32, 16), None), args[5],
                               ir.Constant(_I32, 0))
    s = builder.shuffle_vector(s, s, ir.Constant(ir.VectorType(_I32, 16), [0] * 16))
    return codes, out, c0, s0, count, builder.bitcast(builder.fmul(x, s),
                                                      ir.VectorType(_I32, 16))


def _store_line(builder, value, pointer, stream: bool, align: int) -> None:
    """Stores one line of results: by a non-temporal store (64-byte aligned) when `stream`."""
    store = builder.store(value, pointer, align=64 if stream else align)
    if stream:
        store.set_metadata("nontemporal", builder.module.add_metadata([_I32(1)]))


def _table_ir(context, builder, signature, args, stream=False):
    i64, i8 = ir.IntType(64), ir.IntType(8)
    v16, v32 = ir.VectorType(_I16, 16), ir.VectorType(_I16, 32)

    def splat16(value: int):
        return ir.Constant(v32, [value & 0xFFFF] * 32)

    codes, scratch, c0, s0, count, u = _table_inputs(context, builder, signature, args)
    # the 16 products rounded to bfloat16
    v32i = ir.VectorType(_I32, 16)
    odd = builder.and_(builder.lshr(u, ir.Constant(v32i, [16] * 16)), ir.Constant(v32i, [1] * 16))
    rounded = builder.lshr(builder.add(u, builder.add(ir.Constant(v32i, [0x7FFF] * 16), odd)),
                           ir.Constant(v32i, [16] * 16))
    b16 = builder.trunc(rounded, v16)
    # table k = 8 e + m (e: the code's exponent mod 4): 1.mmm x 2^(e - 7) x s; subnormal codes'
    # table: entry m
    normal = builder.shuffle_vector(b16, b16, ir.Constant(ir.VectorType(_I32, 32),
                                                          [k & 7 for k in range(32)]))
    normal = builder.add(normal, ir.Constant(v32, [(k >> 3) << 7 for k in range(32)]))
    tiny = builder.shuffle_vector(b16, b16, ir.Constant(ir.VectorType(_I32, 32),
                                                        [8 + (k & 7) for k in range(32)]))
    permute = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v32, [v32, v32]),
                                             "llvm.x86.avx512.permvar.hi.512")
    byte = ir.PointerType(i8)
    src = builder.bitcast(builder.gep(codes, [c0]), byte)
    dst = builder.bitcast(builder.gep(scratch, [s0]), ir.PointerType(_I16))
    with cgutils.for_range(builder, count) as step:
        at = builder.mul(step.index, i64(32))
        w = builder.zext(builder.load(builder.bitcast(builder.gep(src, [at]),
                                                      ir.PointerType(ir.VectorType(i8, 32))),
                                      align=1), v32)
        r = builder.call(permute, [normal, w])  # vpermw: the low 5 bits index
        # the exponent's high 2 bits: 4 x eh added to the bfloat16 exponent
        r = builder.add(r, builder.and_(builder.shl(w, splat16(4)), splat16(0x600)))
        mag = builder.and_(w, splat16(0x7F))
        r = builder.select(builder.icmp_unsigned("<", mag, splat16(8)),
                           builder.call(permute, [tiny, w]), r)
        r = builder.select(builder.icmp_unsigned("==", mag, splat16(0x7F)), splat16(0x7FC0), r)
        r = builder.xor(r, builder.and_(builder.shl(w, splat16(8)), splat16(0x8000)))
        _store_line(builder, r, builder.bitcast(builder.gep(dst, [at]), ir.PointerType(v32)),
                    stream, 2)
    return context.get_dummy_value()


@intrinsic
def bf16_table_e4m3fn(typingctx, codes, c0, out, s0, count, scale):
    """`out[s0:s0 + 32 count] = bfloat16 bits of e4m3fn(codes[c0:c0 + 32 count]) x scale`,
    32 codes a step, for a finite `scale` within `TABLE_SCALES` (where `TABLES`).

    The 8 mantissas' products with the scale are rounded once per call; a code's result is
    then a table entry chosen by its low 5 bits (`vpermw`: exponent mod 4 and mantissa),
    with 4 x (exponent // 4) added to the bfloat16 exponent (exact: every result is a normal
    float32 and bfloat16 there, and rounding commutes with powers of two), the subnormal
    codes' entries and the NaN selected, the code's sign applied last. ~14 operations per 32
    codes, against ~16 per 16 for the decoders and the rounding."""
    return numba.types.void(codes, c0, out, s0, count, scale), _table_ir


@intrinsic
def bf16_table_e4m3fn_stream(typingctx, codes, c0, out, s0, count, scale):
    """`bf16_table_e4m3fn` writing by non-temporal stores, each 32 results (64 bytes) a whole
    cache line: `out[s0]` must lie on a 64-byte boundary (a store there would fault
    otherwise). x86-64 only (where `TABLES`); end the writing with `store_fence()`."""
    return (numba.types.void(codes, c0, out, s0, count, scale),
            functools.partial(_table_ir, stream=True))


def _f32_table_ir(context, builder, signature, args, stream=False):
    """`_table_ir` for float32 results: 16 codes a step (a line), the two tables as 32-bit
    lanes (`vpermi2d` over 32 entries, `vpermd` over the subnormal codes' 8)."""
    i64, i8 = ir.IntType(64), ir.IntType(8)
    v16 = ir.VectorType(_I32, 16)

    def splat(value: int):
        return ir.Constant(v16, [value & 0xFFFFFFFF] * 16)

    codes, out, c0, s0, count, u = _table_inputs(context, builder, signature, args)
    # entries k = 8 e + m, e the exponent mod 4 (two registers), and the subnormal codes' m
    low = builder.add(builder.shuffle_vector(u, u, ir.Constant(v16, [k & 7 for k in range(16)])),
                      ir.Constant(v16, [(k >> 3) << 23 for k in range(16)]))
    high = builder.add(low, splat(2 << 23))
    tiny = builder.shuffle_vector(u, u, ir.Constant(v16, [8 + (k & 7) for k in range(16)]))
    pick2 = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16, [v16] * 3),
                                           "llvm.x86.avx512.vpermi2var.d.512")
    pick = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16, [v16] * 2),
                                          "llvm.x86.avx512.permvar.si.512")
    src = builder.bitcast(builder.gep(codes, [c0]), ir.PointerType(i8))
    dst = builder.bitcast(builder.gep(out, [s0]), ir.PointerType(_I32))
    with cgutils.for_range(builder, count) as step:
        at = builder.mul(step.index, i64(16))
        w = builder.zext(builder.load(builder.bitcast(builder.gep(src, [at]),
                                                      ir.PointerType(ir.VectorType(i8, 16))),
                                      align=1), v16)
        r = builder.call(pick2, [low, w, high])  # the low 5 bits index
        r = builder.add(r, builder.and_(builder.shl(w, splat(20)), splat(0x06000000)))
        mag = builder.and_(w, splat(0x7F))
        r = builder.select(builder.icmp_unsigned("<", mag, splat(8)),
                           builder.call(pick, [tiny, w]), r)  # vpermd: the low 4 bits
        r = builder.select(builder.icmp_unsigned("==", mag, splat(0x7F)), splat(0x7FC00000), r)
        r = builder.xor(r, builder.and_(builder.shl(w, splat(24)), splat(0x80000000)))
        _store_line(builder, r, builder.bitcast(builder.gep(dst, [at]), v16.as_pointer()),
                    stream, 4)
    return context.get_dummy_value()


@intrinsic
def f32_table_e4m3fn(typingctx, codes, c0, out, s0, count, scale):
    """`bf16_table_e4m3fn` for float32 `out`: 16 codes a step."""
    return numba.types.void(codes, c0, out, s0, count, scale), _f32_table_ir


@intrinsic
def f32_table_e4m3fn_stream(typingctx, codes, c0, out, s0, count, scale):
    """`f32_table_e4m3fn` by non-temporal stores: `out[s0]` on a 64-byte boundary."""
    return (numba.types.void(codes, c0, out, s0, count, scale),
            functools.partial(_f32_table_ir, stream=True))
