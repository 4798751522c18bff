"""NumPy `.npy` and `.npz` files: read lazily (headers only), and `.npz` written.

An `.npz` is a zip of `.npy` members. Each member's `.npy` header (dtype, shape, order) is read
on its own; stored members are then memory-mapped in place, compressed ones
(`np.savez_compressed`) are decompressed when read. A compressed member's size, as the zip
declares it, must match its `.npy` header, and all of them together fit the load's inflate
budget (`limits`), both checked before anything is inflated. Keys nest on "." and "/" (see
`nesting`).

NumPy has no bfloat16 (or other ml_dtypes types): `np.save` writes them as raw void (`V2`).
`save` therefore writes each such array as unsigned integers of its width (bfloat16 as uint16,
so plain `np.load` still reads the bits) and adds one member, `__inspector_dtypes__.npy`, a
string array holding the JSON object `{"key": "bfloat16", ...}`. `load` views those members
as the named dtype again. Without the marker (files from other writers) such arrays stay void.
"""

from __future__ import annotations

import ast
import json
import math
import os
import struct
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from inspector.core.errors import InspectorError
from inspector.core.lazy import LazyArray
from inspector.io import nesting
from inspector.io.dtypes import dtype_from_name, ml_dtype_name
from inspector.io.file_error import file_error
from inspector.io.limits import InflateBudget
from inspector.io.locate import locate
from inspector.io.location import Location
from inspector.io.replacing import replacing
from inspector.io.zip_members import ZIP_ERRORS, data_offset, open_archive

DTYPES_MEMBER = "__inspector_dtypes__"
"""The npz member (without `.npy`) naming the ml_dtypes dtype of members NumPy cannot type."""

MAGIC = b"\x93NUMPY"
_MAX_HEADER_BYTES = 1_000_000  # a shape and a dtype; NumPy itself stops at 10 kB by default


@dataclass(frozen=True)
class NpyHeader:
    """What an `.npy` header declares, and how many bytes the header takes."""

    descr: Any
    fortran_order: bool
    shape: tuple[int, ...]
    size: int


def load_npy(path: str | os.PathLike | Location) -> LazyArray:
    """Returns the array of an `.npy` file as one lazily read `LazyArray`.

    Args:
        path: the `.npy` file (a path, or a `Location`).

    Returns:
        The leaf (a bare leaf: an `.npy` holds one array, no keys).

    Raises:
        LoadError: the header is damaged, the dtype needs pickle, or the data is truncated.
    """
    location = locate(path)
    size = location.size()
    with location.open() as f:
        header = _read_header(f, location, "the file")
    dtype = _dtype(header.descr, location, "the array")
    _check_size(location, "the array", header, dtype, size)
    order = "F" if header.fortran_order else "C"
    reader = location.array_reader(header.size, dtype, header.shape, order)
    return LazyArray(header.shape, dtype.newbyteorder("="), reader, source=str(location))


def load_npz(path: str | os.PathLike | Location) -> dict:
    """Returns the arrays of an `.npz` file as nested dicts of `LazyArray`.

    Structure costs the zip's central directory and each member's local and `.npy` headers
    (fetched together, for a URL); stored members' data is read in place when used.

    Args:
        path: the `.npz` file (a path, or a `Location`).

    Returns:
        Nested dicts (member names split on "." and "/"), leaves read on first use.

    Raises:
        LoadError: the zip or a member's `.npy` header is damaged, a member holds an object
            array (which needs pickle), or keys clash when nested.
    """
    location = locate(path)
    archive, f = open_archive(location, _RESAVE)
    with archive, f:
        members = [i for i in archive.infolist() if i.filename.endswith(".npy")]
        budget = InflateBudget(location, location.size())
        location.prefetch(f, [_header_span(info) for info in members])
        marked = _marked_dtypes(archive, location, budget)
        pairs = []
        for info in members:
            key = info.filename[: -len(".npy")]
            if key != DTYPES_MEMBER:
                leaf = _member_leaf(location, archive, f, info, marked.get(key), budget)
                pairs.append((key, leaf))
    return nesting.unflatten(pairs, location, separators=(".", "/"))


def _header_span(info: zipfile.ZipInfo) -> tuple[int, int]:
    # local header (30 bytes), name, extra field (as long as the central one, give or take),
    # then the .npy header: NumPy pads it to a multiple of 64 bytes, usually 128
    start = info.header_offset
    return start, start + 30 + len(info.orig_filename.encode()) + len(info.extra) + 64 + 512


def save(flat: dict[str, Any], path: str | os.PathLike) -> None:
    """Writes `{name: array}` as an uncompressed `.npz`, one leaf in memory at a time.

    ml_dtypes arrays (bfloat16, float8...) are written as unsigned integers of the same width
    and named in the `__inspector_dtypes__` member, so `load` restores them.

    Args:
        flat: flat names (see `nesting.flatten`) to arrays, scalars or `LazyArray`.
        path: the file to write; written beside it first, then renamed into place.

    Raises:
        InspectorError: a name is the reserved `__inspector_dtypes__`.
    """
    if DTYPES_MEMBER in flat:
        raise InspectorError(f"Cannot save key {DTYPES_MEMBER!r}: the npz writer reserves it.")
    marked: dict[str, str] = {}
    with replacing(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as archive:
        for name, leaf in flat.items():
            array = np.asarray(leaf)
            ml_name = ml_dtype_name(array.dtype)
            if ml_name is not None:
                marked[name] = ml_name
                array = array.view(f"u{array.dtype.itemsize}")
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array, order="C"), allow_pickle=False)
        if marked:
            with archive.open(f"{DTYPES_MEMBER}.npy", "w") as member:
                np.lib.format.write_array(member, np.asarray(json.dumps(marked)))


def _member_leaf(
    path,
    archive: zipfile.ZipFile,
    f,
    info: zipfile.ZipInfo,
    marked: str | None,
    budget: InflateBudget,
):
    key = info.filename[: -len(".npy")]
    what = f"member {info.filename!r}"
    try:
        offset = data_offset(f, info)
    except ValueError as exc:
        raise file_error(path, str(exc), _RESAVE) from exc
    if offset is None:
        try:
            with archive.open(info) as member:
                header = _read_header(member, path, what)
        except ZIP_ERRORS as exc:
            raise file_error(path, f"{what} cannot be inflated ({exc})", _RESAVE) from exc
    else:
        f.seek(offset)
        header = _read_header(f, path, what)
    stored = _dtype(header.descr, path, what, marked)
    _check_size(path, what, header, stored, info.file_size)
    if offset is None:
        budget.charge(info.file_size, what)
    dtype = dtype_from_name(marked) if marked else stored.newbyteorder("=")
    order = "F" if header.fortran_order else "C"
    if offset is not None:
        reader = path.array_reader(offset + header.size, stored, header.shape, order)
    else:
        reader = _inflating_reader(path, info, header, stored)
    source = f"{path}:{key}"
    return LazyArray(header.shape, dtype, _viewed_as(reader, dtype) if marked else reader, source)


def _inflating_reader(location: Location, info: zipfile.ZipInfo, header: NpyHeader, dtype):
    def read() -> np.ndarray:
        count = math.prod(header.shape)
        member = info.filename
        try:
            with location.open() as raw, zipfile.ZipFile(raw) as archive:
                start, end = _header_span(info)
                location.prefetch(raw, [(start, end + info.compress_size)])
                with archive.open(member) as f:
                    f.seek(header.size)
                    data = f.read(count * dtype.itemsize)
        except InspectorError:
            raise  # a URL that failed: its own message
        except (*ZIP_ERRORS, KeyError) as exc:
            raise file_error(
                location,
                f"member {member!r} cannot be inflated ({type(exc).__name__}: {exc})",
                "The file is damaged or changed after it was opened; save it again.",
            ) from exc
        if len(data) != count * dtype.itemsize:
            raise file_error(
                location,
                f"member {member!r} inflates to {len(data)} bytes of data, its .npy header "
                f"declares {count * dtype.itemsize}",
                _RESAVE,
            )
        array = np.frombuffer(data, dtype=dtype, count=count)
        array = array.reshape(header.shape, order="F" if header.fortran_order else "C")
        return array.astype(dtype.newbyteorder("="), copy=False)

    return read


def _viewed_as(reader, dtype: np.dtype):
    return lambda: reader().view(dtype)


def _marked_dtypes(archive: zipfile.ZipFile, path, budget: InflateBudget) -> dict[str, str]:
    name = f"{DTYPES_MEMBER}.npy"
    if name not in archive.namelist():
        return {}
    budget.charge(archive.getinfo(name).file_size, f"member {name!r}")
    try:
        with archive.open(name) as f:
            marked = json.loads(str(np.lib.format.read_array(f, allow_pickle=False)))
        for value in marked.values():
            dtype_from_name(value)
    except (*ZIP_ERRORS, AttributeError, TypeError, RecursionError) as exc:
        raise file_error(
            path, f"the {name} member is not a JSON object of dtype names ({exc})", _RESAVE
        ) from exc
    return marked


def _read_header(f, path, what: str) -> NpyHeader:
    prefix = f.read(len(MAGIC) + 2)
    if len(prefix) < len(MAGIC) + 2 or prefix[: len(MAGIC)] != MAGIC:
        raise file_error(path, f"{what} does not start with the .npy magic bytes", _RESAVE)
    major = prefix[len(MAGIC)]
    if major not in (1, 2, 3):
        raise file_error(path, f"{what} has unknown .npy format version {major}", _RESAVE)
    length_format = "<H" if major == 1 else "<I"
    raw_length = f.read(struct.calcsize(length_format))
    if len(raw_length) < struct.calcsize(length_format):
        raise file_error(path, f"{what} is truncated inside its .npy header", _RESAVE)
    (length,) = struct.unpack(length_format, raw_length)
    if length > _MAX_HEADER_BYTES:
        raise file_error(path, f"{what} declares a {length}-byte .npy header", _RESAVE)
    text = f.read(length)
    if len(text) < length:
        raise file_error(path, f"{what} is truncated inside its .npy header", _RESAVE)
    try:
        header = ast.literal_eval(text.decode("utf-8" if major == 3 else "latin1"))
        descr, fortran, shape = header["descr"], header["fortran_order"], header["shape"]
        if not isinstance(shape, tuple) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise ValueError(f"shape {shape!r} is not a tuple of non-negative integers")
        if not isinstance(fortran, bool):
            raise ValueError(f"fortran_order {fortran!r} is not a bool")
    except (
        ValueError,
        SyntaxError,
        KeyError,
        TypeError,
        UnicodeDecodeError,
        MemoryError,
        RecursionError,
    ) as exc:
        raise file_error(path, f"{what} has a damaged .npy header ({exc})", _RESAVE) from exc
    size = len(MAGIC) + 2 + struct.calcsize(length_format) + length
    return NpyHeader(descr, fortran, shape, size)


def _dtype(descr: Any, path, what: str, marked: str | None = None) -> np.dtype:
    try:
        dtype = np.lib.format.descr_to_dtype(descr)
    except (TypeError, ValueError) as exc:
        if marked is None:
            raise file_error(path, f"{what} has an unknown dtype {descr!r}", _RESAVE) from exc
        # NumPy writes some ml_dtypes types with a descr it cannot read back (float8_e5m2
        # as "<f1"); the marker says what they are, the width is all that matters here.
        dtype = np.dtype(f"V{dtype_from_name(marked).itemsize}")
    if dtype.hasobject:
        raise file_error(
            path,
            f"{what} holds Python objects (dtype {descr!r}), which only pickle can read",
            "Object arrays are not loaded, to never run pickle code; save numeric arrays.",
        )
    if marked is not None and dtype.itemsize != dtype_from_name(marked).itemsize:
        raise file_error(path, f"{what} is marked {marked} but stores {dtype}", _RESAVE)
    return dtype


def _check_size(path, what: str, header: NpyHeader, dtype: np.dtype, available: int) -> None:
    needed = header.size + math.prod(header.shape) * dtype.itemsize
    if needed != available:
        raise file_error(
            path,
            f"{what} holds {available} bytes, but its .npy header declares "
            f"{dtype}{list(header.shape)}, which takes {needed}",
            "The file is truncated or damaged; save it again.",
        )


_RESAVE = "The file is damaged or is not a NumPy file; save it again."
