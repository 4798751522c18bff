"""safetensors files, single and sharded (`*.safetensors.index.json`): read lazily, written.

A safetensors file is an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and `[begin, end)` byte range in the data section, then the data. The header is
read and checked here (not by the `safetensors` library) so that structure costs one small
read, every tensor is memory-mapped on its own, and a damaged file is reported precisely.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inspector.core.errors import InspectorError, bullet_list
from inspector.core.lazy import LazyArray
from inspector.io import nesting
from inspector.io.dtypes import dtype_from_name
from inspector.io.file_error import file_error
from inspector.io.limits import confined
from inspector.io.locate import locate
from inspector.io.location import LocalFile, Location
from inspector.io.replacing import replacing

# The safetensors library refuses headers above 100 MB; so do we, before reading one.
MAX_HEADER_BYTES = 100_000_000

_DTYPE_NAMES = {
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
}
_CODES = {name: code for code, name in _DTYPE_NAMES.items()}


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors header: where its bytes are in the file."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int  # from the start of the file
    nbytes: int


def load(path: str | os.PathLike | Location) -> dict:
    """Returns the tensors of a safetensors file as nested dicts of `LazyArray` (keys split on ".").

    Args:
        path: a `.safetensors` file.

    Returns:
        Nested dicts; each leaf memory-maps its own bytes when read.

    Raises:
        LoadError: the header is damaged (see `read_header`) or keys clash when nested.
    """
    location = locate(path)
    entries = read_header(location)
    return nesting.unflatten(_leaves(location, entries), location)


def load_index(path: str | os.PathLike | Location) -> dict:
    """Returns the tensors of a sharded checkpoint (`*.safetensors.index.json`) as one tree.

    The index's `weight_map` names the shard holding each tensor; every shard's header is read
    and checked, no tensor data is. A shard must be a file beside the index (or below it), and
    with a `root` in the load's limits it must resolve, links followed, inside that root.

    Args:
        path: the index file; shards are found beside it.

    Returns:
        Nested dicts of `LazyArray`, in `weight_map` order, keys split on ".".

    Raises:
        LoadError: the index is not valid JSON or has no `weight_map`, a shard is missing or
            damaged, or a tensor is not in the shard the index names (all such are listed).
    """
    location = path = locate(path)
    index = _read_json(path, path.size(), "the index")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise file_error(
            path,
            "the index has no 'weight_map' object of tensor name -> shard file name",
            "Pass a Hugging Face style *.safetensors.index.json, or one of its shards.",
        )
    shards = list(dict.fromkeys(weight_map.values()))
    shard_locations: dict[str, Location] = {}
    for shard in shards:
        if location.local_path is not None:
            folder = location.local_path.parent
            shard_locations[shard] = LocalFile(confined(shard, folder, path, f"shard {shard!r}"))
        elif Path(shard).is_absolute() or ".." in Path(shard).parts:
            raise file_error(
                path, f"shard {shard!r} is outside the index's folder", "Fix the weight_map."
            )
        else:
            shard_locations[shard] = location.sibling(shard)

    def header(shard: str) -> dict[str, TensorEntry]:
        shard_location = shard_locations[shard]
        if not shard_location.exists() or shard_location.is_dir():
            raise file_error(
                path,
                f"shard {shard!r} named in the weight_map does not exist beside the index",
                "Download every shard next to the index.",
            )
        return {entry.name: entry for entry in read_header(shard_location)}

    # remote shards' headers are fetched concurrently (local ones cost microseconds each)
    with ThreadPoolExecutor(max_workers=1 if location.local_path else 8) as pool:
        headers = dict(zip(shards, pool.map(header, shards), strict=True))
    missing = [
        f"{name!r} in {shard}" for name, shard in weight_map.items() if name not in headers[shard]
    ]
    if missing:
        raise file_error(
            path,
            f"{len(missing)} tensor(s) of the weight_map are not in the shard it names",
            "The index does not match its shards; download them again.",
            details=bullet_list(missing),
        )
    pairs = (
        (name, _leaf(shard_locations[shard], headers[shard][name]))
        for name, shard in weight_map.items()
    )
    return nesting.unflatten(pairs, path)


def read_header(path: str | os.PathLike | Location) -> list[TensorEntry]:
    """Returns the tensors a safetensors header declares, after checking it against the file.

    Args:
        path: a `.safetensors` file.

    Returns:
        One entry per tensor, in header order (`__metadata__` is skipped).

    Raises:
        LoadError: the file is shorter than its header length, the header is not UTF-8 JSON
            (or repeats a key), a dtype is unknown, or a tensor's byte range is out of the
            file, overlaps another, or does not match its shape and dtype (all are listed).
    """
    path = locate(path)
    size = path.size()
    prefix = path.read(0, 8)
    if len(prefix) < 8:
        raise file_error(
            path,
            f"the file has {size} bytes, fewer than the 8-byte safetensors header length",
            "The file is truncated; download or save it again.",
        )
    (header_len,) = struct.unpack("<Q", prefix)
    if header_len > size - 8:
        raise file_error(
            path,
            f"the safetensors header length is {header_len} bytes, larger than the "
            f"{size - 8} bytes that follow it",
            "The file is truncated or is not a safetensors file.",
        )
    if header_len > MAX_HEADER_BYTES:
        raise file_error(
            path,
            f"the safetensors header length is {header_len} bytes, above the "
            f"{MAX_HEADER_BYTES}-byte limit",
            "The file is not a safetensors file, or is damaged.",
        )
    header = _read_json(path, header_len, "the safetensors header", path.read(8, 8 + header_len))
    if not isinstance(header, dict):
        raise file_error(path, "the safetensors header is not a JSON object")
    data_start, data_size = 8 + header_len, size - 8 - header_len
    entries, problems = [], []
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        entry = _entry(name, spec, data_start, problems)
        if entry is not None:
            if entry.offset + entry.nbytes > size:
                problems.append(
                    f"{name!r}: data_offsets end at {entry.offset + entry.nbytes - data_start}, "
                    f"beyond the {data_size}-byte data section"
                )
            else:
                entries.append(entry)
    by_offset = sorted((e for e in entries if e.nbytes), key=lambda e: e.offset)
    for before, after in zip(by_offset, by_offset[1:], strict=False):
        if before.offset + before.nbytes > after.offset:
            problems.append(f"{before.name!r} and {after.name!r}: their data ranges overlap")
    if problems:
        raise file_error(
            path,
            f"{len(problems)} problem(s) in the safetensors header",
            "The file is damaged or was written by a faulty tool; save it again.",
            details=bullet_list(problems),
        )
    return entries


def save(flat: dict[str, Any], path: str | os.PathLike,
         metadata: dict[str, str] | None = None) -> None:
    """Writes `{name: array}` as a safetensors file, one leaf in memory at a time.

    Args:
        flat: flat names (see `nesting.flatten`) to arrays, scalars or `LazyArray`.
        path: the file to write; written beside it first, then renamed into place.
        metadata: the header's `__metadata__` (strings to strings), e.g. `{"format": "pt"}`,
            which Hugging Face transformers looks for.

    Raises:
        InspectorError: some dtype has no safetensors code (every such key is named).
    """
    specs = {name: _shape_dtype(leaf) for name, leaf in flat.items()}
    unsupported = [
        f"{name}: {dtype}" for name, (_, dtype) in specs.items() if dtype.name not in _CODES
    ]
    if unsupported:
        raise InspectorError(
            f"Cannot save {os.fspath(path)} as safetensors: {len(unsupported)} array(s) have a "
            f"dtype safetensors cannot store.\n{bullet_list(unsupported)}\n"
            f"Cast them (e.g. complex128 -> complex64), or save as .npz, which stores any dtype."
        )
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, (shape, dtype) in specs.items():
        nbytes = math.prod(shape) * dtype.itemsize
        header[name] = {
            "dtype": _CODES[dtype.name],
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # as the safetensors library does: data stays 8-aligned
    with replacing(path) as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, leaf in flat.items():
            f.write(_little_endian_bytes(leaf, specs[name]))


def _leaves(location: Location, entries: Iterable[TensorEntry]):
    return ((entry.name, _leaf(location, entry)) for entry in entries)


def _leaf(location: Location, entry: TensorEntry) -> LazyArray:
    reader = location.array_reader(entry.offset, entry.dtype, entry.shape)
    native = entry.dtype.newbyteorder("=")
    return LazyArray(entry.shape, native, reader, source=f"{location}:{entry.name}")


def _entry(name: str, spec: Any, data_start: int, problems: list[str]) -> TensorEntry | None:
    if not isinstance(spec, dict):
        problems.append(f"{name!r}: expected an object with dtype, shape and data_offsets")
        return None
    code, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if code not in _DTYPE_NAMES:
        problems.append(f"{name!r}: unknown dtype {code!r}")
        return None
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        problems.append(f"{name!r}: shape {shape!r} is not a list of non-negative integers")
        return None
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_count(o) for o in offsets)
        or offsets[0] > offsets[1]
    ):
        problems.append(f"{name!r}: data_offsets {offsets!r} is not [begin, end] with begin <= end")
        return None
    dtype = dtype_from_name(_DTYPE_NAMES[code])
    expected = math.prod(shape) * dtype.itemsize
    if offsets[1] - offsets[0] != expected:
        problems.append(
            f"{name!r}: data_offsets {offsets} hold {offsets[1] - offsets[0]} bytes, but "
            f"{code}{shape} needs {expected}"
        )
        return None
    return TensorEntry(
        name, dtype.newbyteorder("<"), tuple(shape), data_start + offsets[0], expected
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _read_json(path, nbytes: int, what: str, data: bytes | None = None) -> Any:
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


def _shape_dtype(leaf: Any) -> tuple[tuple[int, ...], np.dtype]:
    if isinstance(leaf, (bool, int, float, complex, np.generic)):
        leaf = np.asarray(leaf)
    return tuple(int(d) for d in leaf.shape), np.dtype(leaf.dtype)


def _little_endian_bytes(leaf: Any, spec: tuple[tuple[int, ...], np.dtype]) -> np.ndarray:
    shape, dtype = spec
    array = np.asarray(leaf)
    if array.shape != shape or array.dtype != dtype:
        raise InspectorError(
            f"A leaf read as {array.dtype}{list(array.shape)} but declared "
            f"{dtype}{list(shape)}; cannot write it."
        )
    if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and not _LITTLE):
        array = array.astype(array.dtype.newbyteorder("<"))
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


_LITTLE = np.little_endian
