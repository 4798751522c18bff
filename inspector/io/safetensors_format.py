"""safetensors files: read lazily, written (sharded checkpoints: `sharded_index`).

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
from typing import Any

import numpy as np

from inspector.core import caches
from inspector.core.errors import InspectorError, bullet_list
from inspector.core.gc_pause import gc_paused
from inspector.core.lazy import LazyArray
from inspector.io import nesting, safetensors_tree, subbyte
from inspector.io.locate import locate
from inspector.io.location import LocalFile, Location
from inspector.io.positioned_writer import PositionedWriter
from inspector.io.replacing import replacing
from inspector.io.safetensors_header import (  # noqa: F401 (read_header: this module's API too)
    CODES,
    LOADED_AS,
    MAX_HEADER_BYTES,
    TensorEntry,
    bits_of,
    header_bytes,
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
        raw = header_bytes(location)
        if isinstance(location, LocalFile):
            tree = safetensors_tree.load_tree(location, raw)  # one pass, or None: careful path
            if tree is not None:
                return tree
        entries = read_header(location, raw)
        return nesting.unflatten(_leaves(location, entries), location)


def save(flat: dict[str, Any], path: str | os.PathLike,
         metadata: dict[str, str] | None = None, pieces=None) -> None:
    """Writes `{name: array}` as a safetensors file, one leaf in memory at a time.

    Args:
        flat: flat names (see `nesting.flatten`) to arrays, scalars or `LazyArray`.
        path: the file to write; written beside it first, then renamed into place.
        metadata: the header's `__metadata__` (strings to strings), e.g. `{"format": "pt"}`,
            which Hugging Face transformers looks for.
        pieces: optional; `pieces(leaves)` (the values of `flat`, in order) returns the data
            section as `(offset, array)` chunks spanning leaves (a streamed op computed in
            chunks: `inspector.core.chunked_stream`), or None to write leaf by leaf.

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
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
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
        f.flush()
        # each leaf's bytes go to its offset from a writer thread while the next leaf is
        # read (a streamed op's output: computed) here
        offset = 8 + len(text)
        chunks = None if pieces is None else pieces(list(flat.values()))
        with PositionedWriter(f.fileno()) as writer:
            for at, data in chunks or ():
                writer.put(offset + at, data.reshape(-1).view(np.uint8))
            for name, leaf in flat.items() if chunks is None else ():
                data = _little_endian_bytes(leaf, specs[name])
                writer.put(offset, data)
                offset += data.nbytes


def _leaves(location: Location, entries: Iterable[TensorEntry]):
    prefix = f"{location}:"  # str(location) once, not once per tensor
    return [(entry.name, lazy_leaf(location, entry, prefix)) for entry in entries]


_NATIVE: dict[np.dtype, tuple[np.dtype, int | None]] = {}
caches.register_mapping("safetensors native dtypes", _NATIVE)


def _native(dtype: np.dtype) -> tuple[np.dtype, int | None]:
    """The stored dtype in native order, and its bits when packed (F4/F6); once per dtype."""
    found = _NATIVE.get(dtype)
    if found is None:
        native = dtype.newbyteorder("=")
        found = _NATIVE[dtype] = (native, subbyte.BITS.get(native.name))
    return found


def lazy_leaf(location: Location, entry: TensorEntry, prefix: str | None = None) -> LazyArray:
    """The tensor `entry` of the file at `location` as a `LazyArray` (its `source` is
    `prefix` + the tensor's name, `prefix` defaulting to `"<location>:"`)."""
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
