"""safetensors files, single and sharded (`*.safetensors.index.json`): read lazily, written.

A safetensors file is an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and `[begin, end)` byte range in the data section, then the data. The header is
read and checked by `safetensors_header` (not by the `safetensors` library) so that structure
costs one small read, every tensor is memory-mapped on its own, and a damaged file is reported
precisely. Packed F4 / F6 tensors are unpacked on read (`subbyte`) into float32 leaves.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from inspector.core import caches
from inspector.core.errors import InspectorError, bullet_list
from inspector.core.lazy import LazyArray
from inspector.io import nesting, subbyte
from inspector.io.file_error import file_error
from inspector.io.gc_pause import gc_paused
from inspector.io.limits import confined
from inspector.io.locate import locate
from inspector.io.location import LocalFile, Location
from inspector.io.replacing import replacing
from inspector.io.safetensors_header import (  # noqa: F401 (read_header: this module's API too)
    CODES,
    LOADED_AS,
    MAX_HEADER_BYTES,
    TensorEntry,
    bits_of,
    read_header,
    read_json,
)


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
    with gc_paused():  # 100k tensors make ~1M objects: no collector passes over them meanwhile
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
    index = read_json(path, path.size(), "the index")
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


def save(flat: dict[str, Any], path: str | os.PathLike) -> None:
    """Writes `{name: array}` as a safetensors file, one leaf in memory at a time.

    Args:
        flat: flat names (see `nesting.flatten`) to arrays, scalars or `LazyArray`.
        path: the file to write; written beside it first, then renamed into place.

    Raises:
        InspectorError: some dtype has no safetensors code (every such key is named).
    """
    specs = {name: _shape_dtype(leaf) for name, leaf in flat.items()}
    unsupported = [
        f"{name}: {dtype}" for name, (_, dtype) in specs.items() if dtype.name not in CODES
    ] + [
        f"{name}: {dtype}{list(shape)} is {math.prod(shape)} elements of {bits_of(dtype)} bits, "
        f"not a whole number of bytes" for name, (shape, dtype) in specs.items()
        if (math.prod(shape) * bits_of(dtype)) % 8
    ]
    if unsupported:
        raise InspectorError(
            f"Cannot save {os.fspath(path)} as safetensors: {len(unsupported)} array(s) have a "
            f"dtype safetensors cannot store.\n{bullet_list(unsupported)}\n"
            f"Cast them (e.g. complex128 -> complex64), or save as .npz, which stores any dtype."
        )
    header: dict[str, Any] = {}
    offset = 0
    for name, (shape, dtype) in specs.items():
        nbytes = math.prod(shape) * bits_of(dtype) // 8
        header[name] = {
            "dtype": CODES[dtype.name],
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
    prefix = f"{location}:"  # str(location) once, not once per tensor
    return [(entry.name, _leaf(location, entry, prefix)) for entry in entries]


_NATIVE: dict[np.dtype, tuple[np.dtype, int | None]] = {}
caches.register_mapping("safetensors native dtypes", _NATIVE)


def _native(dtype: np.dtype) -> tuple[np.dtype, int | None]:
    """The stored dtype in native order, and its bits when packed (F4/F6); once per dtype."""
    found = _NATIVE.get(dtype)
    if found is None:
        native = dtype.newbyteorder("=")
        found = _NATIVE[dtype] = (native, subbyte.BITS.get(native.name))
    return found


def _leaf(location: Location, entry: TensorEntry, prefix: str | None = None) -> LazyArray:
    native, bits = _native(entry.dtype)
    source = (f"{location}:" if prefix is None else prefix) + entry.name
    if bits is None:
        reader = location.array_reader(entry.offset, entry.dtype, entry.shape)
        return LazyArray(entry.shape, native, reader, source=source)
    packed = location.array_reader(entry.offset, np.dtype(np.uint8), (entry.nbytes,))
    loaded = LOADED_AS.get(native.name, native)

    def read() -> np.ndarray:
        codes = subbyte.unpack(packed(), bits, math.prod(entry.shape))
        return codes.view(native).reshape(entry.shape).astype(loaded)

    return LazyArray(entry.shape, loaded, read, source=source)


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
    raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    bits = subbyte.BITS.get(dtype.name)
    return raw if bits is None else subbyte.pack(raw, bits)


_LITTLE = np.little_endian
