"""What each quantization scheme looks like in a checkpoint: member names, dtypes, shapes.

Read from the producers' own code (see docs/quantized.md for the sources):

- **fp8** (DeepSeek-V3, Qwen3-FP8, compressed-tensors, ComfyUI "scaled fp8"): `X` float8
  codes beside a float scale `X_scale_inv`, `X_scale` or `scale_X` (X ending in `weight`).
  `w = float(code) * scale`, the scale broadcast per tensor, per output channel, or per block
  (`scale[i // b0, j // b1]`, the last block of a dimension possibly partial: ceil division).
- **mxfp4** (gpt-oss, OCP microscaling): `X_blocks` uint8 (..., G, 16) and `X_scales` uint8
  (..., G): two e2m1 codes per byte, low nibble first, 32 values per block, each block times
  2^(s - 127). The weight is (..., G * 32).
- **gptq** (AutoGPTQ): `qweight` int32 (in / 8, out), eight 4-bit codes per word along the
  input dimension, lowest bits first; `qzeros` int32 (groups, out / 8) packed the same way
  along the output dimension and stored minus one; `scales` (groups, out); `g_idx` (in,)
  the group of each input row. `w[o, i] = scales[g, o] * (q[i, o] - (z[g, o] + 1))`,
  `g = g_idx[i]`. The weight is (out, in), as the `nn.Linear` it replaced.
- **awq** (AutoAWQ GEMM): `qweight` int32 (in, out / 8) and `qzeros` int32 (groups, out / 8),
  packed along the output dimension in the order [0, 2, 4, 6, 1, 3, 5, 7] (nibble k holds
  column `ORDER[k]`); `scales` (groups, out); `w[o, i] = scales[g, o] * (q[i, o] - z[g, o])`,
  `g = i // (in / groups)`. The weight is (out, in).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

FP8 = "fp8"
MXFP4 = "mxfp4"
GPTQ = "gptq"
AWQ = "awq"
SCHEMES = (FP8, MXFP4, GPTQ, AWQ)

FP8_TYPES = {
    ml_dtypes.float8_e4m3fn: "e4m3",
    ml_dtypes.float8_e5m2: "e5m2",
    ml_dtypes.float8_e4m3fnuz: "e4m3fnuz",
    ml_dtypes.float8_e5m2fnuz: "e5m2fnuz",
}
"""The float8 element types whose leaves are quantized codes, by NumPy scalar type."""

FLOAT_SCALE = frozenset(np.dtype(t) for t in ("float32", "float16", "bfloat16", "float64"))

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
"""The e2m1 (fp4) value of each 4-bit code: the sign is bit 3."""

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
"""AutoAWQ's packing order: nibble k of a word holds output column `8 * word + AWQ_ORDER[k]`."""

PACK = 8  # 4-bit codes per int32 word (GPTQ, AWQ)
MX_BLOCK = 32  # values per MXFP4 block (16 bytes)


def fp8_scale_names(name: str) -> tuple[str, ...]:
    """The names a float8 weight `name`'s scale goes by, in the order they are looked for."""
    if name.endswith("weight"):
        return (name + "_scale_inv", name + "_scale", name[:-6] + "scale_weight")
    return (name + "_scale_inv", name + "_scale")


def fp8_weight_name(scale: str) -> str | None:
    """The weight a scale named `scale` belongs to, for the three weight-scale spellings;
    None for other names (activation scales such as `input_scale` are not weight scales)."""
    if scale.endswith("weight_scale_inv"):
        return scale[:-10]
    if scale.endswith("weight_scale"):
        return scale[:-6]
    if scale.endswith("scale_weight"):
        return scale[:-12] + "weight"
    return None


def block_of(n: int, s: int) -> int | None:
    """The block length b along a dimension of `n` elements tiled by `s` scales
    (`ceil(n / b) == s`), preferring 128 and then powers of two; None if none fits."""
    if s < 1 or n < 1:
        return None
    if s == 1:
        return n
    low, high = -(-n // s), (-(-n // (s - 1))) - 1  # every b with ceil(n / b) == s
    if low > high:
        return None
    if low <= 128 <= high:
        return 128
    power = 1 << (high.bit_length() - 1)
    return power if power >= low else low


def fp8_blocks(weight: tuple[int, ...], scale: tuple[int, ...]) -> tuple[str, tuple] | None:
    """How a scale of shape `scale` covers a float8 weight of shape `weight`: `(kind, block)`
    with kind "per-tensor", "per-channel" or "block" and the block shape (one length per
    weight dimension); None when it does not tile the weight."""
    if math.prod(scale) == 1:
        return "per-tensor", tuple(weight)
    if len(scale) == 1 and weight and scale[0] == weight[0]:  # (out,): one per output row
        scale = (scale[0],) + (1,) * (len(weight) - 1)
    if len(scale) != len(weight):
        return None
    block = tuple(block_of(n, s) for n, s in zip(weight, scale, strict=True))
    if None in block:
        return None
    if len(weight) >= 2 and all(b == 1 for b in block[:-1]) and block[-1] == weight[-1]:
        return "per-channel", block
    return "block", block


def fp8_text(code_dtype, kind: str, block: tuple) -> str:
    """`fp8 e4m3 · 128x128 block scales` (the words shown beside the weight)."""
    name = FP8_TYPES.get(np.dtype(code_dtype).type, str(code_dtype))
    if kind == "block":
        return f"fp8 {name} · {'x'.join(str(b) for b in block)} block scales"
    return f"fp8 {name} · {kind} scale"
