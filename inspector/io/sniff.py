"""Which checkpoint format a path holds, told by its content (magic bytes, folder markers).

File suffixes lie (`.bin` is PyTorch, or anything; `.h5` may be Keras or plain HDF5), so each
format is recognised by what its writer puts first. The checks run in an order that keeps them
unambiguous: `.npy` (`\\x93NUMPY`), zip (npz or PyTorch), PyTorch legacy pickle and HDF5 have
fixed magic bytes; safetensors has a length then `{` at byte 8; a JSON index starts with `{`;
flax msgpack, which has no magic, is last: a msgpack map, array or ext marker.
"""

from __future__ import annotations

import os
import struct
import zipfile
from pathlib import Path

from inspector.io.file_error import file_error
from inspector.io.zip_members import ZIP_ERRORS

FORMATS = (
    "safetensors",
    "safetensors-index",
    "npy",
    "npz",
    "orbax",
    "flax-msgpack",
    "hdf5",
    "torch",
    "torch-legacy",
)
"""Every format name `sniff` returns."""

# pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2): the number torch.save's legacy format
# pickles first.
TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ORBAX_MARKERS = ("_METADATA", "_CHECKPOINT_METADATA", "manifest.ocdbt", "commit_success.txt")
_SAFETENSORS_MAX_HEADER = 100_000_000
_MSGPACK_CONTAINERS = {
    *range(0x80, 0xA0),
    0xDC,
    0xDD,
    0xDE,
    0xDF,
    *range(0xC7, 0xCA),
    *range(0xD4, 0xD9),
}  # maps, arrays, ext (a bare array)

_SUPPORTED = (
    "Supported: safetensors (and *.safetensors.index.json), .npy, .npz, orbax checkpoint "
    "folders, flax msgpack, HDF5 / Keras .h5, PyTorch .pt/.pth/.bin state dicts."
)


def sniff(path: str | os.PathLike) -> str:
    """Returns the name of the checkpoint format at `path` (one of `FORMATS`), by content.

    Args:
        path: a file, or an orbax checkpoint folder.

    Returns:
        The format name, e.g. `"safetensors"`, `"orbax"`, `"torch"`.

    Raises:
        LoadError: the path does not exist, is empty, is a folder that is no checkpoint, or
            holds no format the inspector reads.

    >>> import tempfile, numpy as np
    >>> folder = tempfile.mkdtemp()
    >>> with open(f"{folder}/weights.bin", "wb") as f:  # the suffix does not matter
    ...     np.save(f, np.zeros(3))
    >>> sniff(f"{folder}/weights.bin")
    'npy'
    """
    path = Path(path)
    if not path.exists():
        raise file_error(
            path,
            "the path does not exist",
            f"Check the spelling; relative paths start at {os.getcwd()}.",
        )
    if path.is_dir():
        return _sniff_folder(path)
    size = path.stat().st_size
    if size == 0:
        raise file_error(path, "the file is empty", "Save or download it again.")
    with open(path, "rb") as f:
        head = f.read(64)
        if head.startswith(b"\x93NUMPY"):
            return "npy"
        if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
            return _sniff_zip(path)
        if head.startswith(TORCH_LEGACY_MAGIC):
            return "torch-legacy"
        if _has_hdf5_signature(f, size):
            return "hdf5"
    if len(head) > 8 and head[8:9] == b"{":
        (header_len,) = struct.unpack("<Q", head[:8])
        if header_len <= _SAFETENSORS_MAX_HEADER:
            return "safetensors"
    if head.lstrip()[:1] == b"{" and _mentions(path, b'"weight_map"'):
        return "safetensors-index"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        # PROTO opcode: a pickle (an empty msgpack map is the single byte 0x80)
        raise file_error(
            path,
            "it is a Python pickle, not a PyTorch checkpoint",
            "Pickles run code when loaded, so only PyTorch state dicts are read (without running "
            "it); save the arrays as safetensors or npz.",
        )
    if head[0] in _MSGPACK_CONTAINERS:
        return "flax-msgpack"
    raise file_error(
        path, f"the format is not recognised (it starts with {head[:16]!r})", _SUPPORTED
    )


def _sniff_folder(path: Path) -> str:
    if any((path / marker).exists() for marker in ORBAX_MARKERS):
        return "orbax"
    inner = sorted(
        str(child.relative_to(path))
        for child in [*path.glob("*"), *path.glob("*/*")]
        if child.is_dir() and any((child / marker).exists() for marker in ORBAX_MARKERS)
    )
    files = sorted(
        p.name for p in path.glob("*") if p.name.endswith((".safetensors", ".index.json"))
    )
    hint = "Pass an orbax checkpoint folder (one holding _METADATA) or a checkpoint file."
    if inner:
        hint = f"It holds checkpoints; pass one of: {', '.join(inner[:5])}."
    elif files:
        hint = f"Pass one of its files: {', '.join(files[:5])}."
    raise file_error(
        path,
        f"it is a folder but not an orbax checkpoint (it has none of {', '.join(ORBAX_MARKERS)})",
        hint,
    )


def _sniff_zip(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except ZIP_ERRORS as exc:
        raise file_error(
            path,
            f"it starts like a zip file (npz or PyTorch) but its zip directory is unreadable "
            f"({exc})",
            "The file is probably truncated; save or download it again.",
        ) from exc
    if any(name.count("/") == 1 and name.endswith("/data.pkl") for name in names):
        return "torch"
    if not names or any(name.endswith(".npy") for name in names):
        return "npz"
    raise file_error(
        path,
        "it is a zip file with neither .npy members (npz) nor a data.pkl (PyTorch)",
        _SUPPORTED,
    )


def _has_hdf5_signature(f, size: int) -> bool:
    # HDF5 allows a user block before the superblock: 0, 512, 1024, 2048, ... bytes long.
    offset = 0
    while offset + len(HDF5_MAGIC) <= size:
        f.seek(offset)
        if f.read(len(HDF5_MAGIC)) == HDF5_MAGIC:
            return True
        offset = 512 if offset == 0 else offset * 2
    return False


def _mentions(path: Path, needle: bytes, limit: int = 16_000_000) -> bool:
    with open(path, "rb") as f:
        return needle in f.read(limit)
