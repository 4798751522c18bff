"""flax msgpack checkpoints (`flax.serialization.msgpack_serialize`): read lazily.

flax writes a msgpack tree whose arrays are msgpack ext objects: code 1 (ndarray) or 3 (NumPy
scalar) holding a msgpack-packed `(shape, dtype name, raw bytes)` tuple; code 2 is a Python
complex `(real, imag)`. Arrays above 1 GiB are split into
`{"__msgpack_chunked_array__": True, "shape": {...}, "chunks": {"0": ..., ...}}`.

`msgpack.unpackb` would copy every array; instead `walk` steps over the mapped file, reading only
type markers and lengths, and records where each array's raw bytes start. Every length is
checked against the bytes left, so a damaged file fails fast instead of allocating.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from typing import Any

import numpy as np

from inspector.core.lazy import LazyArray
from inspector.io.dtypes import dtype_from_name
from inspector.io.file_error import file_error
from inspector.io.locate import locate
from inspector.io.location import Location

EXT_NDARRAY, EXT_COMPLEX, EXT_NPSCALAR = 1, 2, 3
CHUNKED = "__msgpack_chunked_array__"
MAX_DEPTH = 256  # deeper nesting is damage (or an attack), not a checkpoint

_FIXED = {0xC0: None, 0xC2: False, 0xC3: True}
_NUMBERS = {  # marker -> struct format of the number that follows
    0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
    0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q",
}  # fmt: skip
_SIZED = {  # marker -> (kind, width of the length field)
    0xC4: ("bin", 1), 0xC5: ("bin", 2), 0xC6: ("bin", 4),
    0xD9: ("str", 1), 0xDA: ("str", 2), 0xDB: ("str", 4),
    0xDC: ("array", 2), 0xDD: ("array", 4), 0xDE: ("map", 2), 0xDF: ("map", 4),
    0xC7: ("ext", 1), 0xC8: ("ext", 2), 0xC9: ("ext", 4),
}  # fmt: skip
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_WIDTH_FORMAT = {1: ">B", 2: ">H", 4: ">I"}


def load(path: str | os.PathLike | Location) -> Any:
    """Returns the tree of a flax msgpack file with `LazyArray` leaves (no array data read).

    Args:
        path: a file written by `flax.serialization.msgpack_serialize` (or `to_bytes`).

    Returns:
        Nested dicts (and lists) as flax wrote them; arrays are memory-mapped leaves; Python
        numbers, strings and None are kept as they are.

    Raises:
        LoadError: the msgpack is truncated or malformed, nests deeper than `MAX_DEPTH`, has
            bytes after its end, or an array's payload does not match its shape and dtype.
    """
    location = path = locate(path)
    if location.local_path is None:
        # msgpack has no index: the walk needs every marker, so a URL is read whole
        tree = _walk(location.read_all(), location)
    else:
        with open(location.local_path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise file_error(path, "the file is empty")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                tree = _walk(data, location)
    return _join_chunks(tree, path)


def _walk(data, path) -> Any:
    if len(data) == 0:
        raise file_error(path, "the file is empty")
    walker = _Walker(data, path)
    tree = walker.value(0)
    if walker.pos != len(data):
        raise file_error(
            path,
            f"{len(data) - walker.pos} bytes follow the end of the msgpack data",
            "The file is damaged, or is not a flax msgpack checkpoint.",
        )
    return tree


class _ArrayRef:
    """Where a flax array's bytes are; becomes a `LazyArray` once the walk is done."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, offset: int):
        self.shape, self.dtype, self.offset = shape, dtype, offset


class _Walker:
    """Reads msgpack values from a buffer, skipping array payloads; `pos` is the next byte."""

    def __init__(self, data, path):
        self.data, self.path, self.pos = data, path, 0

    def fail(self, problem: str):
        return file_error(
            self.path,
            f"{problem} (at byte {self.pos})",
            "The file is truncated or damaged, or is not a flax msgpack checkpoint.",
        )

    def take(self, n: int) -> int:
        """Advances over `n` bytes and returns where they start."""
        if n > len(self.data) - self.pos:
            raise self.fail(f"{n} bytes are needed but only {len(self.data) - self.pos} remain")
        start, self.pos = self.pos, self.pos + n
        return start

    def unpack(self, fmt: str):
        return struct.unpack_from(fmt, self.data, self.take(struct.calcsize(fmt)))[0]

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.fail(f"the data nests deeper than {MAX_DEPTH} levels")
        marker = self.unpack(">B")
        if marker <= 0x7F:
            return marker
        if marker >= 0xE0:
            return marker - 0x100
        if 0x80 <= marker <= 0x8F:
            return self.map(marker & 0x0F, depth)
        if 0x90 <= marker <= 0x9F:
            return self.array(marker & 0x0F, depth)
        if 0xA0 <= marker <= 0xBF:
            return self.text(marker & 0x1F)
        if marker in _FIXED:
            return _FIXED[marker]
        if marker in _NUMBERS:
            return self.unpack(_NUMBERS[marker])
        if marker in _FIXEXT:
            return self.ext(self.unpack(">b"), _FIXEXT[marker])
        if marker in _SIZED:
            kind, width = _SIZED[marker]
            length = self.unpack(_WIDTH_FORMAT[width])
            if kind == "bin":
                return bytes(self.data[self.take(length) : self.pos])
            if kind == "str":
                return self.text(length)
            if kind == "array":
                return self.array(length, depth)
            if kind == "map":
                return self.map(length, depth)
            return self.ext(self.unpack(">b"), length)
        raise self.fail(f"byte 0x{marker:02x} is not a msgpack type marker")

    def text(self, length: int) -> str:
        raw = self.data[self.take(length) : self.pos]
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"a string is not UTF-8 ({exc})") from exc

    def array(self, count: int, depth: int) -> list:
        self.check_count(count, "an array", 1)
        return [self.value(depth + 1) for _ in range(count)]

    def map(self, count: int, depth: int) -> dict:
        self.check_count(count, "a map", 2)
        result = {}
        for _ in range(count):
            key = self.value(depth + 1)
            if not isinstance(key, (str, int, float, bool, type(None), bytes)):
                raise self.fail(f"a map key is a {type(key).__name__}, not a string or number")
            if key in result:
                raise self.fail(f"the map key {key!r} is repeated")
            result[key] = self.value(depth + 1)
        return result

    def check_count(self, count: int, what: str, bytes_each: int) -> None:
        # each element takes at least one byte: a larger count is damage, refused before looping
        remaining = len(self.data) - self.pos
        if count * bytes_each > remaining:
            raise self.fail(f"{what} declares {count} entries but only {remaining} bytes remain")

    def ext(self, code: int, length: int) -> Any:
        start = self.take(length)
        if code == EXT_COMPLEX:
            pair = _Walker(self.data[start : self.pos], self.path).value(0)
            if not (
                isinstance(pair, list)
                and len(pair) == 2
                and all(isinstance(x, (int, float)) for x in pair)
            ):
                raise self.fail("a complex number is not a (real, imag) pair")
            return complex(*pair)
        if code not in (EXT_NDARRAY, EXT_NPSCALAR):
            raise self.fail(f"msgpack ext type {code} is not one flax writes")
        end, self.pos = self.pos, start
        ref = self.array_payload(end)  # a NumPy scalar is read as a 0-d array
        self.pos = end
        return ref

    def array_payload(self, end: int) -> _ArrayRef:
        # (shape, dtype name, bytes), msgpack-packed inside the ext; only the bytes are skipped
        marker = self.unpack(">B")
        if marker != 0x93:
            raise self.fail("an array payload is not a (shape, dtype, data) triple")
        shape = self.value(MAX_DEPTH - 1)
        name = self.value(MAX_DEPTH)
        if isinstance(name, bytes):
            name = name.decode("ascii", "replace")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise self.fail(f"an array shape {shape!r} is not a list of non-negative integers")
        try:
            dtype = dtype_from_name(name)
        except (ValueError, TypeError) as exc:
            raise self.fail(f"an array has unsupported dtype {name!r} ({exc})") from exc
        marker = self.unpack(">B")
        if marker not in (0xC4, 0xC5, 0xC6):
            raise self.fail("an array's data is not a msgpack bin")
        length = self.unpack(_WIDTH_FORMAT[{0xC4: 1, 0xC5: 2, 0xC6: 4}[marker]])
        expected = math.prod(shape) * dtype.itemsize
        if length != expected:
            raise self.fail(f"an array of {dtype}{shape} needs {expected} bytes but holds {length}")
        offset = self.take(length)
        if self.pos != end:
            raise self.fail("an array payload does not fill its ext object")
        return _ArrayRef(tuple(shape), dtype, offset)


def _join_chunks(tree: Any, path, keys: tuple = ()) -> Any:
    if isinstance(tree, dict):
        if tree.get(CHUNKED) is True:
            return _chunked_leaf(tree, path, keys)
        return {k: _join_chunks(v, path, (*keys, k)) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_join_chunks(v, path, (*keys, i)) for i, v in enumerate(tree)]
    if isinstance(tree, _ArrayRef):
        return _leaf(tree, path, keys)
    return tree


def _leaf(ref: _ArrayRef, path, keys: tuple) -> LazyArray:
    reader = path.array_reader(ref.offset, ref.dtype, ref.shape)
    return LazyArray(ref.shape, ref.dtype, reader, source=f"{path}:{_keystr(keys)}")


def _chunked_leaf(node: dict, path, keys: tuple) -> LazyArray:
    # flax's _chunk: the flattened array split into 1 GiB pieces; shape and chunks are dicts
    # keyed "0", "1", ...
    try:
        shape = tuple(node["shape"][str(i)] for i in range(len(node["shape"])))
        chunks = [node["chunks"][str(i)] for i in range(len(node["chunks"]))]
    except (KeyError, TypeError) as exc:
        raise file_error(
            path, f"the chunked array at {_keystr(keys)} is malformed ({exc})"
        ) from exc
    dtypes = {c.dtype for c in chunks if isinstance(c, _ArrayRef)}
    sizes = sum(math.prod(c.shape) for c in chunks if isinstance(c, _ArrayRef))
    if (
        not all(isinstance(c, _ArrayRef) and len(c.shape) == 1 for c in chunks)
        or len(dtypes) != 1
        or sizes != math.prod(shape)
    ):
        raise file_error(
            path, f"the chunks of the array at {_keystr(keys)} do not make up its shape {shape}"
        )
    (dtype,) = dtypes
    readers = [path.array_reader(c.offset, c.dtype, c.shape) for c in chunks]

    def read() -> np.ndarray:
        return np.concatenate([r() for r in readers]).reshape(shape)

    return LazyArray(shape, dtype, read, source=f"{path}:{_keystr(keys)}")


def _keystr(keys: tuple) -> str:
    return "".join(f"[{k!r}]" for k in keys)
