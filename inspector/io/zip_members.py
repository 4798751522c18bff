"""Where an uncompressed zip member's bytes start, so they can be memory-mapped in place."""

from __future__ import annotations

import struct
import zipfile
import zlib
from typing import BinaryIO

from inspector.core.errors import InspectorError
from inspector.io.file_error import file_error

ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    OSError,
    EOFError,
    ValueError,  # UnicodeDecodeError of a damaged member name included
    NotImplementedError,  # an unknown zip version or compression method
    RuntimeError,  # an encrypted member
    struct.error,
    zlib.error,
)
"""What `zipfile` raises on a damaged or hostile zip (it has no single error of its own)."""

_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, (fixed fields), name length, extra length


def data_offset(f: BinaryIO, info: zipfile.ZipInfo) -> int | None:
    """Returns the file offset of `info`'s first data byte, or None if it cannot be mapped.

    Only stored (uncompressed, unencrypted) members can be read in place; the central
    directory does not record the local header's extra-field length, so it is read here.

    Args:
        f: the zip file, opened in binary mode.
        info: the member, from `zipfile.ZipFile.infolist()`.

    Returns:
        The offset, or None when the member is compressed or encrypted.

    Raises:
        ValueError: the local header is not where the central directory says, or the member's
            bytes would run past the end of the file.
    """
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
        return None
    if info.header_offset < 0:  # the directory's offsets disagree with where it was found
        raise ValueError(f"the local header of {info.filename!r} would start before the file")
    f.seek(info.header_offset)
    raw = f.read(_LOCAL_HEADER.size)
    if len(raw) < _LOCAL_HEADER.size:
        raise ValueError(f"the local header of {info.filename!r} is past the end of the file")
    signature, name_len, extra_len = _LOCAL_HEADER.unpack(raw)
    if signature != b"PK\x03\x04":
        raise ValueError(f"the local header of {info.filename!r} is damaged")
    offset = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
    size = f.seek(0, 2)
    if info.compress_size != info.file_size or offset + info.file_size > size:
        raise ValueError(
            f"the member {info.filename!r} declares {info.file_size} bytes at byte {offset}, "
            f"beyond the file's {size} bytes"
        )
    return offset


def read_member(archive: zipfile.ZipFile, name: str, location, resave: str) -> bytes:
    """Returns the bytes of member `name`, inflated and checked against its CRC.

    Raises:
        InspectorError: a URL that failed (its own message).
        LoadError: the member is damaged (its local header, its data or its CRC).
    """
    try:
        return archive.read(name)
    except InspectorError:
        raise
    except ZIP_ERRORS as exc:
        raise file_error(location, f"the zip member {name!r} is damaged ({exc})", resave) from exc


def open_archive(location, resave: str) -> tuple[zipfile.ZipFile, BinaryIO]:
    """Opens `location` (a `Location`) as a zip archive; returns `(archive, file)` to close.

    Raises:
        InspectorError: a URL that failed (its own message).
        LoadError: the zip directory is damaged; `resave` says how to write it anew.
    """
    f = location.open()
    try:
        return zipfile.ZipFile(f), f
    except InspectorError:
        f.close()
        raise
    except ZIP_ERRORS as exc:
        f.close()
        raise file_error(location, f"the zip directory is damaged ({exc})", resave) from exc
