"""Which checkpoint format a path holds, told by its content (magic bytes, folder markers).

File suffixes lie (`.bin` is PyTorch, or anything; `.h5` may be Keras or plain HDF5), so each
format is recognised by what its writer puts first. The checks run in an order that keeps them
unambiguous: `.npy` (`\\x93NUMPY`), zip (npz or PyTorch), GGUF, PyTorch legacy pickle and HDF5 have
fixed magic bytes; safetensors has a length then `{` at byte 8; a JSON index starts with `{`;
HDF5 after a user block (its magic at 512, 1024, ... bytes) comes next, since each offset costs
a read (a request, for a URL); flax msgpack, which has no magic, is last: a msgpack map, array
or ext marker. Everything is read through a `Location`, so URLs are sniffed the same way.
"""

from __future__ import annotations

import os
import struct
import zipfile

from inspector.core.errors import InspectorError
from inspector.io.file_error import file_error
from inspector.io.locate import locate
from inspector.io.location import Location
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
    "gguf",
)
"""Every format name `sniff` returns."""

# pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2): the number torch.save's legacy format
# pickles first.
TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
GGUF_MAGIC = b"GGUF"
ORBAX_MARKERS = ("_METADATA", "_CHECKPOINT_METADATA", "manifest.ocdbt", "commit_success.txt")
_SAFETENSORS_MAX_HEADER = 100_000_000
_INDEX_LIMIT = 16_000_000  # an index names tensors and shards; read this much to tell one
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
    "folders, flax msgpack, HDF5 / Keras .h5, PyTorch .pt/.pth/.bin state dicts, GGUF."
)


def sniff(path: str | os.PathLike | Location) -> str:
    """Returns the name of the checkpoint format at `path` (one of `FORMATS`), by content.

    Args:
        path: a file, or an orbax checkpoint folder; a local path or a `Location` (a URL).

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
    location = locate(path)
    if location.is_dir():
        return _sniff_folder(location)
    if not location.exists():
        if location.local_path is None:
            raise file_error(location, "it was not found on the server", "Check the URL.")
        raise file_error(
            location,
            "the path does not exist",
            f"Check the spelling; relative paths start at {os.getcwd()}.",
        )
    size = location.size()
    if size == 0:
        raise file_error(location, "the file is empty", "Save or download it again.")
    head = location.read(0, 64)
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _sniff_zip(location)
    if head.startswith(GGUF_MAGIC):
        return "gguf"
    if head.startswith(TORCH_LEGACY_MAGIC):
        return "torch-legacy"
    if head.startswith(HDF5_MAGIC):
        return "hdf5"
    if len(head) > 8 and head[8:9] == b"{":
        (header_len,) = struct.unpack("<Q", head[:8])
        if header_len <= _SAFETENSORS_MAX_HEADER:
            return "safetensors"
    if head.lstrip()[:1] == b"{" and b'"weight_map"' in location.read(0, min(size, _INDEX_LIMIT)):
        return "safetensors-index"
    # checked after safetensors: each later offset is one more read (a request, remotely)
    if _has_hdf5_user_block(location, size):
        return "hdf5"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        # PROTO opcode: a pickle (an empty msgpack map is the single byte 0x80)
        raise file_error(
            location,
            "it is a Python pickle, not a PyTorch checkpoint",
            "Pickles run code when loaded, so only PyTorch state dicts are read (without running "
            "it); save the arrays as safetensors or npz.",
        )
    if head[0] in _MSGPACK_CONTAINERS:
        return "flax-msgpack"
    raise file_error(
        location, f"the format is not recognised (it starts with {head[:16]!r})", _SUPPORTED
    )


def _sniff_folder(location: Location) -> str:
    if any(location.child(marker).exists() for marker in ORBAX_MARKERS):
        return "orbax"
    hint = "Pass an orbax checkpoint folder (one holding _METADATA) or a checkpoint file."
    path = location.local_path
    if path is not None:
        inner = sorted(
            str(child.relative_to(path))
            for child in [*path.glob("*"), *path.glob("*/*")]
            if child.is_dir() and any((child / marker).exists() for marker in ORBAX_MARKERS)
        )
        files = sorted(
            p.name for p in path.glob("*") if p.name.endswith((".safetensors", ".index.json"))
        )
        if inner:
            hint = f"It holds checkpoints; pass one of: {', '.join(inner[:5])}."
        elif files:
            hint = f"Pass one of its files: {', '.join(files[:5])}."
    raise file_error(
        location,
        f"it is a folder but not an orbax checkpoint (it has none of {', '.join(ORBAX_MARKERS)})",
        hint,
    )


def _sniff_zip(location: Location) -> str:
    try:
        with location.open() as f, zipfile.ZipFile(f) as archive:
            names = archive.namelist()
    except InspectorError:
        raise  # a URL that failed: its own message
    except ZIP_ERRORS as exc:
        raise file_error(
            location,
            f"it starts like a zip file (npz or PyTorch) but its zip directory is unreadable "
            f"({exc})",
            "The file is probably truncated; save or download it again.",
        ) from exc
    if any(name.count("/") == 1 and name.endswith("/data.pkl") for name in names):
        return "torch"
    if not names or any(name.endswith(".npy") for name in names):
        return "npz"
    raise file_error(
        location,
        "it is a zip file with neither .npy members (npz) nor a data.pkl (PyTorch)",
        _SUPPORTED,
    )


def _has_hdf5_user_block(location: Location, size: int) -> bool:
    # HDF5 allows a user block before the superblock: 512, 1024, 2048, ... bytes long.
    offset = 512
    while offset + len(HDF5_MAGIC) <= size:
        if location.read(offset, offset + len(HDF5_MAGIC)) == HDF5_MAGIC:
            return True
        offset *= 2
    return False
