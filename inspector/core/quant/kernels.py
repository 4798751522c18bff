"""The jitted dequantization of each scheme: static shapes in the key, every array traced.

Each `make_*` returns the function to jit for one (scheme, shapes, output dtype) key; codes,
scales, zero points and group indices are its arguments, so a new checkpoint of the same
layout reuses the compiled kernel. The first argument is the output buffer, donated (XLA
writes the weight into it instead of fresh pages that fault on first touch), or None when the
call streams from lazy leaves (`dequantize._no_out`).
"""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from inspector.core.quant import schemes as S


def _f32(x):
    return x.astype(jnp.float32)


_FP8_FORMATS = {  # NumPy scalar type -> (mantissa bits, exponent bias, special codes)
    ml_dtypes.float8_e4m3fn: (3, 7, "fn"),  # no inf; 0x7F / 0xFF are NaN
    ml_dtypes.float8_e5m2: (2, 15, "ieee"),  # exponent 31: inf (mantissa 0) or NaN
    ml_dtypes.float8_e4m3fnuz: (3, 8, "fnuz"),  # no inf, no -0: 0x80 is the NaN
    ml_dtypes.float8_e5m2fnuz: (2, 16, "fnuz"),
}
_QNAN, _INF = np.uint32(0x7FC00000), np.uint32(0x7F800000)


def fp8_bits(codes, code_dtype):
    """The float32 value of float8 codes, decoded from their bits: ml_dtypes' own values and
    NaN / inf bit patterns for each of the 256 codes of every float8 type here (tested).

    Integer ops only, all elementwise (they fuse with the scale and the output cast): the
    sign moves to bit 31, exponent and mantissa shift into float32's fields and the exponent
    is rebiased; a subnormal code (exponent 0) is `mantissa x 2^(1 - bias - m)`, an exact
    float product whose result is a normal float32 (no denormal for a CPU to flush); the
    NaN / inf codes are selected. XLA's CPU backend converts float8 element by element in
    software, and a gather from the 256 values is slower than this arithmetic too."""
    m, bias, special = _FP8_FORMATS[np.dtype(code_dtype).type]
    b = jax.lax.bitcast_convert_type(codes, jnp.uint8).astype(jnp.uint32)
    sign = (b & 0x80) << 24
    mag = b & 0x7F
    normal = (mag << (23 - m)) + np.uint32((127 - bias) << 23)
    tiny = jax.lax.bitcast_convert_type(
        mag.astype(jnp.float32) * np.float32(2.0 ** (1 - bias - m)), jnp.uint32)
    body = jnp.where(mag < (1 << m), tiny, normal)
    if special == "fn":
        body = jnp.where(mag == 0x7F, _QNAN, body)
    elif special == "ieee":
        body = jnp.where(mag >= 0x7C, jnp.where(mag == 0x7C, _INF, _QNAN), body)
    else:  # fnuz: the code of "negative zero" is the NaN (sign bit set, as ml_dtypes has it)
        body = jnp.where(b == 0x80, _QNAN, body)
    return jax.lax.bitcast_convert_type(sign | body, jnp.float32)


def bf16_bits(y):
    """float32 -> bfloat16 by integer ops, bit for bit what XLA's own conversion gives
    (round to nearest even; a NaN keeps its sign and becomes the quiet NaN; subnormals are
    rounded, not flushed; tested on every kind of float32).

    On the CPU, XLA expands its float32 -> bfloat16 conversion inline too, but in a form that
    keeps LLVM's loop vectorizer at 8 lanes where this one takes 16 (with `WIDE_VECTORS`):
    `bench_quant.py --compare-cast` gave the FP8 kernel 48.6 -> 40.2 ms of CPU time for 1e8
    parameters (at 256-bit vectors, 48.2 -> 45.7)."""
    u = jax.lax.bitcast_convert_type(y, jnp.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & 1))) >> 16
    quiet = ((u >> 16) & np.uint32(0xFF80)) | np.uint32(0x40)
    half = jnp.where(jnp.isnan(y), quiet, rounded).astype(jnp.uint16)
    return jax.lax.bitcast_convert_type(half, jnp.bfloat16)


WIDE_VECTORS = (("xla_cpu_prefer_vector_width", 512),)
"""The CPU's FP8 kernels are compiled for 512-bit vectors where the CPU has them (AVX-512;
elsewhere LLVM keeps the widest it has): XLA's default of 256 bits left this kernel at 8
lanes. `bench_fp8_formulations.py now now@512`, alternated in one run: 47 -> 37 ms of CPU
time for 1e8 parameters, ratio 0.34 -> 0.39."""


@functools.cache
def cpu_options() -> tuple:
    """`WIDE_VECTORS` where `jax.jit` takes compiler options (jax >= 0.4.36), else ()."""
    return WIDE_VECTORS if "compiler_options" in inspect.signature(jax.jit).parameters else ()


def make_fp8(shape: tuple, block: tuple, kind: str, out_dtype: str,
             code_dtype=None, bits: bool = False):
    """`w = float(code) * scale`, the scale repeated over its block (ceil tiling).

    With `bits` (the CPU), codes are decoded from their bits (`fp8_bits`): XLA's CPU
    conversion from float8 is element by element in software, several times slower; GPUs
    convert float8 in hardware and take `astype`. On the CPU a bfloat16 output is rounded
    by `bf16_bits` (the same bits as `astype`, fewer instructions)."""
    divisible = all(n % b == 0 for n, b in zip(shape, block, strict=True))

    def cast(w):
        return bf16_bits(w) if bits and out_dtype == "bfloat16" else w.astype(out_dtype)

    def kernel(out, codes, scale):
        del out  # donated: the result is written into its memory
        x = fp8_bits(codes, code_dtype) if bits else _f32(codes)
        s = _f32(scale)
        if kind == "per-tensor":
            return cast(x * s.reshape(()))
        s = s.reshape(tuple(-(-n // b) for n, b in zip(shape, block, strict=True)))
        if divisible:  # view the codes as (s0, b0, s1, b1, ...) and broadcast the scales
            split = tuple(d for n, b in zip(shape, block, strict=True) for d in (n // b, b))
            spread = tuple(d for n in s.shape for d in (n, 1))
            return cast((x.reshape(split) * s.reshape(spread)).reshape(shape))
        for axis, (n, b) in enumerate(zip(shape, block, strict=True)):
            if b > 1:
                s = jax.lax.slice_in_dim(jnp.repeat(s, b, axis=axis), 0, n, axis=axis)
        return cast(x * s)

    return kernel


def _e2m1(codes):
    """The e2m1 value of 4-bit codes (sign bit 3, exponent bits 2-1, mantissa bit 0)."""
    e = (codes >> 1) & 3
    m = _f32(codes & 1)
    magnitude = jnp.where(e == 0, m * 0.5, (1.0 + m * 0.5) * jnp.exp2(_f32(e) - 1.0))
    return jnp.where((codes & 8) != 0, -magnitude, magnitude)


def make_mxfp4(blocks_shape: tuple, out_dtype: str):
    """Two e2m1 codes per byte (low nibble first), each block of 32 times 2^(s - 127)."""
    *prefix, groups, width = blocks_shape

    def kernel(out, blocks, scales):
        del out
        lo, hi = _e2m1(blocks & 0xF), _e2m1(blocks >> 4)
        values = jnp.stack([lo, hi], axis=-1).reshape(*prefix, groups, 2 * width)
        s = scales.astype(jnp.int32)
        # e8m0: an exponent only; 0xFF is NaN. (Products below 2^-126 are subnormal: XLA's
        # CPU backend flushes them to zero.)
        scaled = jnp.ldexp(values, (s - 127)[..., None])
        scaled = jnp.where((s == 255)[..., None], jnp.nan, scaled)
        return scaled.reshape(*prefix, groups * 2 * width).astype(out_dtype)

    return kernel


_SHIFTS = np.arange(0, 32, 4, dtype=np.uint32)


def _nibbles(words, axis: int):
    """The eight 4-bit codes of each int32 word, lowest first, as a new axis after `axis`."""
    w = jax.lax.bitcast_convert_type(words, jnp.uint32)
    w = jnp.expand_dims(w, axis + 1)
    shape = [1] * w.ndim
    shape[axis + 1] = 8
    return ((w >> jnp.asarray(_SHIFTS).reshape(shape)) & 0xF).astype(jnp.int32)


def make_gptq(n_in: int, n_out: int, groups: int, has_g_idx: bool, out_dtype: str):
    """AutoGPTQ: codes packed along the input dimension, zeros along the output one,
    stored minus one; `w[o, i] = scales[g, o] * (q[i, o] - (z[g, o] + 1))`."""
    size = n_in // groups if groups else n_in

    def kernel(out, qweight, qzeros, scales, *g_idx):
        del out
        q = _nibbles(qweight, 0).reshape(n_in, n_out)  # row 8r + k: nibble k of word r
        z = _nibbles(qzeros, 1).reshape(groups, n_out) + 1
        g = g_idx[0].astype(jnp.int32) if has_g_idx else jnp.arange(n_in) // size
        w = _f32(scales)[g] * _f32(q - z[g])
        return w.T.astype(out_dtype)

    return kernel


_AWQ_INVERSE = tuple(int(i) for i in np.argsort(S.AWQ_ORDER))


def make_awq(n_in: int, n_out: int, groups: int, out_dtype: str):
    """AutoAWQ GEMM: codes and zeros packed along the output dimension in the order
    [0, 2, 4, 6, 1, 3, 5, 7]; `w[o, i] = scales[g, o] * (q[i, o] - z[g, o])`."""
    size = n_in // groups

    def unpack(words):
        nib = _nibbles(words, 1)  # (rows, out / 8, 8): nibble k holds column ORDER[k]
        return nib[..., jnp.asarray(_AWQ_INVERSE)].reshape(words.shape[0], n_out)

    def kernel(out, qweight, qzeros, scales):
        del out
        q, z = unpack(qweight), unpack(qzeros)
        g = jnp.arange(n_in) // size
        w = _f32(scales)[g] * _f32(q - z[g])
        return w.T.astype(out_dtype)

    return kernel
