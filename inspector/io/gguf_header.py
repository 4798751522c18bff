"""The header of a GGUF file (llama.cpp), walked here with every count bounded by the file.

A GGUF file is `GGUF`, a version, a tensor count and a key/value count, the key/values (typed
scalars, strings, arrays), one info per tensor (name, ggml `ne` dims, ggml type, offset into
the data section), padding to `general.alignment`, then the data. `gguf`'s own `GGUFReader`
trusts the counts (an array of 2^63 scalars past the end of the file loops for ever) and
builds a NumPy view per array item (a 150k-token vocabulary costs seconds), so the header is
read here: each count, length, dimension product and offset is checked against the bytes left
in the file *before* anything is built, with the rules of llama.cpp's own reader (`gguf.cpp`).
Long arrays (token vocabularies) are skipped over, keeping their first items for display.
"""

from __future__ import annotations

import math
import mmap
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from inspector.io.file_error import file_error
from inspector.io.gguf_strings import skip_strings
from inspector.io.location import Location

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NAME = 64  # GGML_MAX_NAME: llama.cpp refuses tensor names this long or longer
DEFAULT_ALIGNMENT = 32
ARRAY_HEAD = 8
"""Items of a long metadata array kept for display (the rest is skipped, never decoded)."""
ARRAY_KEPT = 64
"""Arrays this long or shorter are kept whole."""
_INT64_MAX = 2**63 - 1
_PAGE = mmap.PAGESIZE
_CHUNK = 1 << 16  # the first read; each further one doubles what is held (a request, remotely)
_BATCH = 4096  # strings skipped between checks
_VECTOR_MIN = 2048  # string arrays longer than this are skipped by `gguf_strings`

_UINT32, _STRING, _ARRAY = 4, 8, 9
_SCALARS = {  # GGUF value type -> (name, struct format)
    0: ("uint8", "<B"), 1: ("int8", "<b"), 2: ("uint16", "<H"), 3: ("int16", "<h"),
    4: ("uint32", "<I"), 5: ("int32", "<i"), 6: ("float32", "<f"), 7: ("bool", "<?"),
    10: ("uint64", "<Q"), 11: ("int64", "<q"), 12: ("float64", "<d"),
}  # fmt: skip
_STRUCTS = {code: struct.Struct(fmt) for code, (_, fmt) in _SCALARS.items()}
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


@dataclass(frozen=True)
class GGUFArray:
    """A metadata array: its item type, length and first items (all of them when short)."""

    item_type: str
    length: int
    head: tuple

    def __str__(self) -> str:
        items = ", ".join(repr(v) if isinstance(v, str) else str(v) for v in self.head)
        more = ", …" if self.length > len(self.head) else ""
        return f"[{self.length:,} × {self.item_type}: {items}{more}]"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF header: logical shape (NumPy order), ggml type, bytes in the file."""

    name: str
    shape: tuple[int, ...]  # NumPy order: ggml's ne reversed
    ggml_type: int
    type_name: str
    offset: int  # from the start of the file
    nbytes: int


@dataclass(frozen=True)
class GGUFHeader:
    """What a GGUF header declares, checked against the file."""

    version: int
    metadata: Mapping[str, Any]  # read-only: `gguf_format.read` shares headers it keeps
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_start: int
    bytes_read: int = field(default=0, compare=False)


class _Cursor:
    """Reads the header front to back in growing chunks; past the file's end is a LoadError."""

    def __init__(self, location: Location, size: int):
        self.location, self.size, self.pos = location, size, 0
        self.seen = 0  # the furthest byte looked at ahead of `pos` (a window of strings)
        self._map = None
        if location.local_path is not None and size:
            # a local file is mapped: the walk touches only the header's pages, and no buffer
            # grows (a 10 MB llama-3 tokenizer would be copied several times)
            with open(location.local_path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self.buffer = self._map
            self.size = min(size, len(self._map))
        else:
            self.buffer = location.read(0, min(size, _CHUNK))

    @property
    def bytes_read(self) -> int:
        """Bytes of the file read so far (mapped: the pages the walk touched)."""
        if self._map is None:
            return len(self.buffer)
        return min(self.size, -(-max(self.pos, self.seen) // _PAGE) * _PAGE)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()

    def need(self, n: int, what: str) -> int:
        """Makes `n` bytes at the cursor available; returns their start."""
        if n > self.size - self.pos:
            raise file_error(
                self.location,
                f"{what} at byte {self.pos} needs {n} bytes, but the file ends "
                f"{self.size - self.pos} bytes later",
                "The file is truncated or damaged; download or convert it again.",
            )
        end = self.pos + n
        if end > len(self.buffer):
            self.grow(end)
        start, self.pos = self.pos, end
        return start

    def grow(self, end: int) -> None:
        """Holds at least the file's first `end` bytes (at most its size), doubling at least."""
        grow = min(self.size, max(end, 2 * len(self.buffer)))
        if grow > len(self.buffer):
            self.buffer += self.location.read(len(self.buffer), grow)

    def u32(self, what: str) -> int:
        start = self.need(4, what)  # first: it may grow the buffer
        return _U32.unpack_from(self.buffer, start)[0]

    def u64(self, what: str) -> int:
        start = self.need(8, what)
        return _U64.unpack_from(self.buffer, start)[0]

    def raw_string(self, what: str) -> bytes:
        n = self.u64(f"the length of {what}")
        start = self.need(n, what)
        return bytes(self.buffer[start : start + n])

    def string(self, what: str) -> str:
        return self.raw_string(what).decode("utf-8", errors="replace")


def read_header(location: Location, ggml_types: dict[int, tuple[str, int, int]]) -> GGUFHeader:
    """Returns the header of the GGUF file at `location`, every count checked against its size.

    Args:
        location: the file.
        ggml_types: ggml type code -> (name, values per block, bytes per block), from `gguf`.

    Raises:
        LoadError: bad magic or version, a count, length, dimension or offset that the file
            cannot hold, an unknown value or ggml type, a repeated key or tensor name, a bad
            `general.alignment`, or tensor data past the end of the file.
    """
    cursor = _Cursor(location, location.size())
    try:
        return _walk(cursor, location, ggml_types)
    finally:
        cursor.close()


def _walk(cursor: _Cursor, location: Location, ggml_types) -> GGUFHeader:
    size = cursor.size
    magic = bytes(cursor.buffer[:4])
    if magic != MAGIC:
        raise file_error(location, f"it does not start with the GGUF magic (it starts {magic!r})")
    cursor.pos = 4
    version = cursor.u32("the version")
    if version & 0xFFFF == 0 and version:
        raise file_error(
            location,
            "it is a big-endian GGUF file",
            "Convert it with gguf's script: gguf-convert-endian FILE little.",
        )
    if version not in VERSIONS:
        raise file_error(
            location,
            f"its GGUF version is {version}; versions {' and '.join(map(str, VERSIONS))} are read",
            "Convert it with a current llama.cpp (version 1 files predate 2023-08).",
        )
    n_tensors = cursor.u64("the tensor count")
    n_kv = cursor.u64("the key/value count")
    left = size - cursor.pos
    # the smallest key/value is 13 bytes (key length, type, one byte), a tensor info 24
    if n_kv > left // 13 or n_tensors > left // 24:
        raise file_error(
            location,
            f"it declares {n_tensors} tensors and {n_kv} key/values, more than its "
            f"{left} header bytes can hold",
            "The file is damaged or is not a GGUF file.",
        )
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        key = _key(cursor, i, location)
        if key in metadata:
            raise file_error(location, f"the key {key!r} appears twice", "The file is damaged.")
        kind = cursor.u32(f"the type of key {key!r}")
        metadata[key] = value = _value(cursor, kind, key, location)
        if key == "general.alignment" and kind != _UINT32:
            raise file_error(location, f"general.alignment is {value!r}, not a uint32")
    alignment = _alignment(metadata, location)
    infos = [_tensor_info(cursor, location, ggml_types) for _ in range(n_tensors)]
    data_start = -(-cursor.pos // alignment) * alignment
    tensors = _place(infos, data_start, alignment, size, location)
    return GGUFHeader(
        version,
        MappingProxyType(metadata),
        tuple(tensors),
        alignment,
        data_start,
        cursor.bytes_read,
    )


def _key(cursor: _Cursor, i: int, location) -> str:
    raw = cursor.raw_string(f"key {i}")
    if not raw:
        raise file_error(location, f"key {i} is empty", "The file is damaged.")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise file_error(location, f"key {i} is not UTF-8 ({raw[:40]!r})") from None


def _value(cursor: _Cursor, kind: int, key: str, location) -> Any:
    if kind == _STRING:
        return cursor.string(f"the value of {key!r}")
    if kind in _STRUCTS:
        unpack = _STRUCTS[kind]
        start = cursor.need(unpack.size, f"{key!r}")
        return unpack.unpack_from(cursor.buffer, start)[0]
    if kind != _ARRAY:
        raise file_error(location, f"the key {key!r} has unknown value type {kind}")
    item = cursor.u32(f"the item type of {key!r}")
    n = cursor.u64(f"the length of {key!r}")
    if item in _STRUCTS:
        unpack = _STRUCTS[item]
        start = cursor.need(_checked_length(cursor, n, unpack.size, key, location), repr(key))
        kept = n if n <= ARRAY_KEPT else ARRAY_HEAD
        head = tuple(
            unpack.unpack_from(cursor.buffer, start + j * unpack.size)[0] for j in range(kept)
        )
        return GGUFArray(_SCALARS[item][0], n, head)
    if item != _STRING:
        raise file_error(
            location,
            f"the array {key!r} has item type {item}, which GGUF "
            "does not allow in arrays (nested arrays or an unknown type)",
        )
    _checked_length(cursor, n, 8, key, location)
    kept = n if n <= ARRAY_KEPT else ARRAY_HEAD
    head = tuple(cursor.string(f"item {j} of {key!r}") for j in range(kept))
    if n - kept > _VECTOR_MIN:
        skip_strings(cursor, n - kept, f"a string of {key!r}",
                     lambda c, m: _skip_strings(c, m, key))
    else:
        _skip_strings(cursor, n - kept, key)
    return GGUFArray("string", n, head)


def _checked_length(cursor: _Cursor, n: int, item_size: int, key: str, location) -> int:
    left = cursor.size - cursor.pos
    if n > left // item_size:
        raise file_error(
            location,
            f"the array {key!r} declares {n} items of at least {item_size} bytes, more than "
            f"the {left} bytes left in the file",
            "The file is damaged.",
        )
    return n * item_size


def _skip_strings(cursor: _Cursor, n: int, key: str) -> None:
    # A tokenizer's vocabulary and merges: 32k-400k strings whose lengths must be walked (the
    # layout has no index). Batches run unchecked on local names; one that leaves the buffer
    # grows it (a remote file) and runs again, or, past the file's end, is walked again with
    # checked reads, which name the string the file cannot hold.
    unpack, what = _U64.unpack_from, f"a string of {key!r}"
    done = 0
    while done < n:
        batch = min(_BATCH, n - done)
        buffer, pos, crossed = cursor.buffer, cursor.pos, False
        try:
            for _ in range(batch):
                pos += 8 + unpack(buffer, pos)[0]
        except (struct.error, OverflowError):  # the length at `pos` is past the buffer
            crossed = True
        if not crossed and pos <= len(buffer):
            cursor.pos = pos
            done += batch
            continue
        end = pos + 8 if crossed else pos
        if end <= cursor.size and len(buffer) < cursor.size:
            cursor.grow(end)
            continue
        for _ in range(batch):
            cursor.need(cursor.u64(what), what)
        done += batch


def _alignment(metadata: dict, location) -> int:
    value = metadata.get("general.alignment", DEFAULT_ALIGNMENT)  # a uint32 (checked)
    if value <= 0 or value & (value - 1):
        raise file_error(location, f"general.alignment is {value}, not a power of two")
    return value


def _tensor_info(cursor: _Cursor, location, ggml_types) -> TensorInfo:
    raw = cursor.raw_string("a tensor name")
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise file_error(location, f"a tensor name is not UTF-8 ({raw[:40]!r})") from None
    if len(raw) >= MAX_NAME:
        raise file_error(
            location,
            f"tensor {name[:80]!r}: its name is {len(raw)} bytes long, "
            f"llama.cpp's limit is {MAX_NAME - 1}",
        )
    n_dims = cursor.u32(f"the dimension count of {name!r}")
    if n_dims > MAX_DIMS:
        raise file_error(
            location, f"tensor {name!r} has {n_dims} dimensions, more than ggml's {MAX_DIMS}"
        )
    ne = [cursor.u64(f"a dimension of {name!r}") for _ in range(n_dims)]
    if any(d > _INT64_MAX for d in ne) or math.prod(ne) > _INT64_MAX:
        raise file_error(
            location,
            f"tensor {name!r}: dimensions {ne} (ggml order) overflow a 64-bit element count",
        )
    code = cursor.u32(f"the ggml type of {name!r}")
    offset = cursor.u64(f"the offset of {name!r}")
    if code not in ggml_types:
        raise file_error(
            location,
            f"tensor {name!r} has unknown ggml type {code}",
            "It may need a newer gguf package: pip install -U gguf.",
        )
    type_name, block, block_bytes = ggml_types[code]
    if ne and ne[0] % block:
        raise file_error(
            location,
            f"tensor {name!r}: its rows of {ne[0]} values are not whole "
            f"{type_name} blocks of {block}",
        )
    nbytes = math.prod(ne) // block * block_bytes
    return TensorInfo(name, tuple(reversed(ne)), code, type_name, offset, nbytes)


def _place(infos, data_start, alignment, size, location) -> list[TensorInfo]:
    tensors, names = [], set()
    for info in infos:
        if info.name in names:
            raise file_error(
                location, f"tensor {info.name!r} appears twice", "The file is damaged."
            )
        names.add(info.name)
        if info.offset % alignment:
            raise file_error(
                location,
                f"tensor {info.name!r} starts at data offset "
                f"{info.offset}, not a multiple of the alignment {alignment}",
            )
        start = data_start + info.offset
        if info.nbytes > size - min(start, size):
            raise file_error(
                location,
                f"tensor {info.name!r} ({info.type_name}, {info.nbytes} bytes at data offset "
                f"{info.offset}) ends past the file's {size} bytes",
                "The file is truncated; download or convert it again.",
            )
        tensors.append(
            TensorInfo(info.name, info.shape, info.ggml_type, info.type_name, start, info.nbytes)
        )
    spans = sorted((t for t in tensors if t.nbytes), key=lambda t: t.offset)
    for before, after in zip(spans, spans[1:], strict=False):
        if before.offset + before.nbytes > after.offset:
            raise file_error(
                location,
                f"tensors {before.name!r} and {after.name!r}: their data overlap",
                "The file is damaged.",
            )
    return tensors
