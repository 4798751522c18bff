"""The safetensors header: read, and checked against the file as the reference checks it.

The header is an 8-byte little-endian length, then that many bytes of UTF-8 JSON naming each
tensor's dtype, shape and `[begin, end)` byte range in the data section. As the safetensors
reference (`safetensors/src/tensor.rs`, `read_metadata` and `Metadata::validate`) requires,
the tensors ordered by offsets tile the data section exactly: no gap, no overlap, no byte after
the last tensor, each range exactly `numel * bits / 8` bytes (a whole number of bytes for the
sub-byte F4 / F6 types). Every problem is listed, each naming its tensor and byte counts.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from inspector.core.errors import bullet_list
from inspector.io import subbyte
from inspector.io.dtypes import dtype_from_name
from inspector.io.file_error import file_error
from inspector.io.locate import locate
from inspector.io.location import Location

# The safetensors library refuses headers above 100 MB; so do we, before reading one.
MAX_HEADER_BYTES = 100_000_000

DTYPE_NAMES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "F16": "float16",
    "BF16": "bfloat16",
    "U32": "uint32",
    "I32": "int32",
    "F32": "float32",
    "C64": "complex64",
    "U64": "uint64",
    "I64": "int64",
    "F64": "float64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F4": "float4_e2m1fn",  # packed two per byte (`subbyte`)
    "F6_E2M3": "float6_e2m3fn",  # packed four per three bytes
    "F6_E3M2": "float6_e3m2fn",
}
# XLA (jax 0.10) cannot compute on sub-byte floats held one per byte: F4 and F6 tensors load as
# float32 holding their exact values (every one of them is a float32)
LOADED_AS = dict.fromkeys(("float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"), np.dtype(np.float32))
CODES = {name: code for code, name in DTYPE_NAMES.items()}


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors header: where its bytes are in the file.

    `dtype` is the element type as stored; `nbytes` counts the file's bytes (packed for F4/F6).
    """

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int  # from the start of the file
    nbytes: int


def read_header(path: str | os.PathLike | Location,
                raw: tuple[bytes, int, int] | None = None) -> list[TensorEntry]:
    """Returns the tensors a safetensors header declares, after checking it against the file.

    Args:
        path: a `.safetensors` file.
        raw: `header_bytes(path)` when the caller read it already.

    Returns:
        One entry per tensor, in header order (`__metadata__` is skipped).

    Raises:
        LoadError: the file is shorter than its header length, the header is not UTF-8 JSON
            (or repeats a key), a dtype is unknown, or a tensor's byte range is out of the
            file, overlaps another, or does not match its shape and dtype (all are listed).
    """
    path = locate(path)
    data, data_start, size = header_bytes(path) if raw is None else raw
    header_len = data_start - 8
    header = read_json(path, header_len, "the safetensors header", data)
    if not isinstance(header, dict):
        raise file_error(path, "the safetensors header is not a JSON object")
    data_size = size - data_start
    entries, problems = [], []
    codes: dict[str, tuple[np.dtype, int]] = {}  # per header: a missing ml_dtypes still raises
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        entry = _entry(name, spec, data_start, problems, codes)
        if entry is not None:
            if entry.offset + entry.nbytes > size:
                problems.append(
                    f"{name!r}: data_offsets end at {entry.offset + entry.nbytes - data_start}, "
                    f"beyond the {data_size}-byte data section"
                )
            else:
                entries.append(entry)
    if not problems:
        problems = _coverage(entries, data_start, data_size)
    if problems:
        raise file_error(
            path,
            f"{len(problems)} problem(s) in the safetensors header",
            "The file is damaged or was written by a faulty tool; save it again.",
            details=bullet_list(problems),
        )
    return entries


def header_bytes(path: Location) -> tuple[bytes, int, int]:
    """The header's JSON bytes, where the data section starts, and the file's size.

    Raises:
        LoadError: the file is shorter than 8 bytes or than its header length, or the length
            is above `MAX_HEADER_BYTES`.
    """
    size = path.size()
    prefix = path.read(0, 8)
    if len(prefix) < 8:
        raise file_error(
            path,
            f"the file has {size} bytes, fewer than the 8-byte safetensors header length",
            "The file is truncated; download or save it again.",
        )
    (header_len,) = struct.unpack("<Q", prefix)
    if header_len > MAX_HEADER_BYTES:  # checked first, as the reference does
        raise file_error(
            path,
            f"the safetensors header length is {header_len} bytes, above the "
            f"{MAX_HEADER_BYTES}-byte limit",
            "The file is not a safetensors file, or is damaged.",
        )
    if header_len > size - 8:
        raise file_error(
            path,
            f"the safetensors header length is {header_len} bytes, larger than the "
            f"{size - 8} bytes that follow it",
            "The file is truncated or is not a safetensors file.",
        )
    return path.read(8, 8 + header_len), 8 + header_len, size


def _coverage(entries: list[TensorEntry], data_start: int, data_size: int) -> list[str]:
    """The reference's rule: the tensors, ordered by offsets, tile the data section exactly."""
    problems = []
    position, last = 0, None
    for e in sorted(entries, key=lambda e: (e.offset, e.offset + e.nbytes)):
        begin, end = e.offset - data_start, e.offset - data_start + e.nbytes
        if begin < position:
            problems.append(f"{last.name!r} and {e.name!r}: their data ranges overlap "
                            f"({last.name!r} ends at byte {position}, {e.name!r} starts at "
                            f"{begin})")
        elif begin > position:
            problems.append(f"{e.name!r}: data_offsets start at {begin}, but the tensors before "
                            f"it end at {position}: {begin - position} bytes belong to no tensor")
        if end >= position:
            position, last = end, e
    if not problems and position != data_size:
        problems.append(f"the data section has {data_size} bytes but the tensors cover "
                        f"{position}: {data_size - position} bytes after the data section")
    return problems


def bits_of(dtype: np.dtype) -> int:
    return subbyte.BITS.get(dtype.name, dtype.itemsize * 8)


def _entry(name: str, spec: Any, data_start: int, problems: list[str],
           codes: dict | None = None) -> TensorEntry | None:
    if not isinstance(spec, dict):
        problems.append(f"{name!r}: expected an object with dtype, shape and data_offsets")
        return None
    code, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if code not in DTYPE_NAMES:
        problems.append(f"{name!r}: unknown dtype {code!r}")
        return None
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        problems.append(f"{name!r}: shape {shape!r} is not a list of non-negative integers")
        return None
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int and o >= 0 for o in offsets)  # JSON ints, never bools
        or offsets[0] > offsets[1]
    ):
        problems.append(f"{name!r}: data_offsets {offsets!r} is not [begin, end] with begin <= end")
        return None
    dtype, bits = _code_info(code, {} if codes is None else codes)
    numel = math.prod(shape)
    if numel * bits >= 8 << 64:
        problems.append(f"{name!r}: {code}{shape} needs more than 2**64 bytes: its shape "
                        f"overflows the byte count")
        return None
    if (numel * bits) % 8:
        problems.append(f"{name!r}: {code}{shape} is {numel} elements of {bits} bits, not a "
                        f"whole number of bytes")
        return None
    expected = numel * bits // 8
    if offsets[1] - offsets[0] != expected:
        problems.append(
            f"{name!r}: data_offsets {offsets} hold {offsets[1] - offsets[0]} bytes, but "
            f"{code}{shape} needs {expected}"
        )
        return None
    return TensorEntry(name, dtype, tuple(shape), data_start + offsets[0], expected)


def _code_info(code: str, codes: dict) -> tuple[np.dtype, int]:
    """A header dtype code's stored (little-endian) dtype and bits per element: asked once per
    code and header, not once per tensor (NumPy's dtype names cost ~10 us; a header has 100k
    tensors)."""
    found = codes.get(code)
    if found is None:
        dtype = dtype_from_name(DTYPE_NAMES[code])
        found = codes[code] = (dtype.newbyteorder("<"), bits_of(dtype))
    return found


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_json(path, nbytes: int, what: str, data: bytes | None = None) -> Any:
    if data is None:
        if nbytes > MAX_HEADER_BYTES:
            raise file_error(path, f"{what} is {nbytes} bytes, above the {MAX_HEADER_BYTES} limit")
        data = path.read_all()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise file_error(
            path,
            f"{what} is not UTF-8 text ({exc})",
            "The file is damaged or is not a safetensors file.",
        ) from exc
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        raise file_error(
            path,
            f"{what} repeats the key {exc.key!r}",
            "Each tensor may appear once; the file is damaged.",
        ) from None
    except (ValueError, RecursionError) as exc:
        raise file_error(
            path,
            f"{what} is not valid JSON ({exc})",
            "The file is damaged or is not a safetensors file.",
        ) from exc


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    # json keeps the last of repeated keys silently; a repeated tensor name means corruption.
    result = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result
