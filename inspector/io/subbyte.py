"""Floats narrower than a byte, as safetensors stores them: `F4` (two per byte), `F6_*` (four per
three bytes).

The safetensors specification counts these tensors in bits (`numel * bits` must be a whole number
of bytes) and leaves the bit order to the element types' convention, which is the one PyTorch's
`float4_e2m1fn_x2` and the OCP microscaling formats use: element `i` occupies bits
`[bits * i, bits * (i + 1))` of the data read as one little-endian bit stream (for F4: the low
nibble first). In memory every element takes a byte, as ml_dtypes holds them.
"""

from __future__ import annotations

import numpy as np

BITS = {"float4_e2m1fn": 4, "float6_e2m3fn": 6, "float6_e3m2fn": 6}
"""The element width in bits of each sub-byte type, by its ml_dtypes name."""


def unpack(raw: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Returns `count` codes (uint8, one per element) from the packed bytes `raw`.

    >>> unpack(np.array([0x21, 0x43], np.uint8), 4, 4).tolist()
    [1, 2, 3, 4]
    >>> unpack(np.array([0b11_000001, 0b0011_0000, 0b000100_00], np.uint8), 6, 4).tolist()
    [1, 3, 3, 4]
    """
    raw = np.asarray(raw, np.uint8).reshape(-1)
    if bits == 4:
        codes = np.empty(raw.size * 2, np.uint8)
        codes[0::2] = raw & 0x0F
        codes[1::2] = raw >> 4
        return codes[:count]
    if bits == 6:
        b = raw[: (raw.size // 3) * 3].reshape(-1, 3)
        codes = np.empty((b.shape[0], 4), np.uint8)
        codes[:, 0] = b[:, 0] & 0x3F
        codes[:, 1] = (b[:, 0] >> 6) | ((b[:, 1] & 0x0F) << 2)
        codes[:, 2] = (b[:, 1] >> 4) | ((b[:, 2] & 0x03) << 4)
        codes[:, 3] = b[:, 2] >> 2
        return codes.reshape(-1)[:count]
    raise ValueError(f"no packing of {bits}-bit elements")


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Returns the packed bytes of `codes` (uint8, one per element); the inverse of `unpack`.

    >>> pack(np.array([1, 2, 3, 4], np.uint8), 4).tolist()
    [33, 67]
    """
    codes = np.asarray(codes, np.uint8).reshape(-1)
    if (codes.size * bits) % 8:
        raise ValueError(f"{codes.size} elements of {bits} bits are not a whole number of bytes")
    if bits == 4:
        return (codes[0::2] & 0x0F) | ((codes[1::2] & 0x0F) << 4)
    if bits == 6:
        c = (codes & 0x3F).reshape(-1, 4)
        out = np.empty((c.shape[0], 3), np.uint8)
        out[:, 0] = c[:, 0] | (c[:, 1] << 6)
        out[:, 1] = (c[:, 1] >> 2) | (c[:, 2] << 4)
        out[:, 2] = (c[:, 2] >> 4) | (c[:, 3] << 2)
        return out.reshape(-1)
    raise ValueError(f"no packing of {bits}-bit elements")
