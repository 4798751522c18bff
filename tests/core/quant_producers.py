"""NumPy re-implementations of how producers pack quantized weights, and float64 references.

The packing loops follow the producers' own code line by line (AutoGPTQ's
`qlinear_cuda_old.QuantLinear.pack`, AutoAWQ's `WQLinear_GEMM.from_linear`, gpt-oss's MXFP4
layout, DeepSeek-V3's `weight_scale_inv`); the references dequantize from each scheme's
definition in float64, independently of the inspector's kernels.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def fp8_reference(codes: np.ndarray, scale: np.ndarray, block=None) -> np.ndarray:
    """`w[i, j] = float(code[i, j]) * scale[i // b0, j // b1]` with ceil-division blocks
    (`block`, else 128 where 128 fits the scale's shape, else ceil(n / s))."""
    x = codes.astype(np.float64)
    s = np.asarray(scale, np.float64)
    if s.size == 1:
        return x * s.reshape(())
    if s.ndim == 1:
        s = s[:, None]
    b0 = -(-x.shape[0] // s.shape[0])
    b1 = -(-x.shape[1] // s.shape[1])
    b0 = 128 if -(-x.shape[0] // 128) == s.shape[0] else b0
    b1 = 128 if -(-x.shape[1] // 128) == s.shape[1] else b1
    if block is not None:
        b0, b1 = block
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        for jb in range(s.shape[1]):
            out[i, jb * b1:(jb + 1) * b1] = x[i, jb * b1:(jb + 1) * b1] * s[i // b0, jb]
    return out


def mxfp4_reference(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Each byte: low nibble first; each block of 32 values times 2^(s - 127)."""
    lo = np.take(E2M1, blocks & 0x0F)
    hi = np.take(E2M1, blocks >> 4)
    values = np.stack([lo, hi], axis=-1).reshape(*blocks.shape[:-1], 32)
    values = values * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return values.reshape(*blocks.shape[:-2], blocks.shape[-2] * 32)


def gptq_pack(intweight_oi: np.ndarray, zeros_go: np.ndarray, bits: int = 4):
    """AutoGPTQ's `QuantLinear.pack` on integer codes: `intweight_oi` (out, in) codes and
    `zeros_go` (groups, out) zero points -> (qweight (in/8, out), qzeros (groups, out/8))."""
    intweight = intweight_oi.T.copy().astype(np.uint32)  # intweight.t().contiguous()
    i = row = 0
    qweight = np.zeros((intweight.shape[0] // 32 * bits, intweight.shape[1]), dtype=np.uint32)
    while row < qweight.shape[0]:
        for j in range(i, i + (32 // bits)):
            qweight[row] |= intweight[j] << (bits * (j - i))
        i += 32 // bits
        row += 1
    zeros = (zeros_go - 1).astype(np.uint32)  # zeros -= 1 (the old GPTQ convention)
    qzeros = np.zeros((zeros.shape[0], zeros.shape[1] // 32 * bits), dtype=np.uint32)
    i = col = 0
    while col < qzeros.shape[1]:
        for j in range(i, i + (32 // bits)):
            qzeros[:, col] |= zeros[:, j] << (bits * (j - i))
        i += 32 // bits
        col += 1
    return qweight.astype(np.int32), qzeros.astype(np.int32)


def awq_pack(intweight_oi: np.ndarray, zeros_go: np.ndarray, bits: int = 4):
    """AutoAWQ's `WQLinear_GEMM.from_linear` packing -> (qweight (in, out/8), qzeros)."""
    intweight = intweight_oi.T.copy().astype(np.int64)  # (in, out)
    pack_num = 32 // bits
    qweight = np.zeros((intweight.shape[0], intweight.shape[1] // 32 * bits), dtype=np.int64)
    for col in range(intweight.shape[1] // pack_num):
        for i in range(pack_num):
            qweight[:, col] |= intweight[:, col * pack_num + AWQ_ORDER[i]] << (i * bits)
    zeros = zeros_go.astype(np.int64)
    qzeros = np.zeros((zeros.shape[0], zeros.shape[1] // 32 * bits), dtype=np.int64)
    for col in range(zeros.shape[1] // pack_num):
        for i in range(pack_num):
            qzeros[:, col] |= zeros[:, col * pack_num + AWQ_ORDER[i]] << (i * bits)
    return qweight.astype(np.uint32).view(np.int32), qzeros.astype(np.uint32).view(np.int32)


def int4_reference(intweight_oi, zeros_go, scales_go, g_idx) -> np.ndarray:
    """`w[o, i] = scales[g_idx[i], o] * (q[o, i] - zeros[g_idx[i], o])` in float64."""
    s = scales_go.astype(np.float64)[g_idx].T  # (out, in)
    z = zeros_go.astype(np.float64)[g_idx].T
    return s * (intweight_oi.astype(np.float64) - z)


def int4_layer(rng, n_out: int, n_in: int, group: int):
    """Random 4-bit codes, zero points (1..15) and float16 scales of one linear layer."""
    groups = n_in // group
    q = rng.integers(0, 16, (n_out, n_in))
    zeros = rng.integers(1, 16, (groups, n_out))
    scales = rng.uniform(0.001, 0.02, (groups, n_out)).astype(np.float16)
    return q, zeros, scales, np.arange(n_in) // group


def fp8_codes(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(ml_dtypes.float8_e4m3fn)
