"""`file_info(path)`: what a checkpoint file says about itself, beside its tensors.

A tree holds tensors; some files also carry file-level facts that belong to no leaf: a GGUF
file's key/values (architecture, context length, quantization version, tokenizer), a
safetensors header's `__metadata__`, a sharded index's `metadata` and the ways its shards
disagree with it. `load` returns the tree only (trees stay plain pytrees); `file_info` reads
those facts from the header again (headers only: milliseconds), and the app shows them above
the tree.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from inspector.io import limits
from inspector.io.locate import locate
from inspector.io.location import Location
from inspector.io.sniff import sniff

_KEY = b'"__metadata__"'


@dataclass(frozen=True)
class FileInfo:
    """File-level facts of a checkpoint.

    Attributes:
        format: the sniffed format (`"gguf"`, `"safetensors"`, ...).
        metadata: key -> value as the file states it (str, numbers, or `GGUFArray` summaries
            of long arrays), read-only; empty when the format has none.
        problems: what is wrong with the checkpoint that did not stop it loading (a sharded
            index's `IndexProblem`s), one line each.
    """

    format: str
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    problems: tuple[str, ...] = ()

    def lines(self, limit: int = 40) -> list[str]:
        """`key: value` lines of the metadata (long values cut), at most `limit` of them."""
        out = []
        for key, value in list(self.metadata.items())[:limit]:
            text = str(value)
            out.append(f"{key}: {text if len(text) <= 160 else text[:157] + '…'}")
        if len(self.metadata) > limit:
            out.append(f"… and {len(self.metadata) - limit} more keys")
        return out


def file_info(
    path: str | os.PathLike | Location, *, root: str | os.PathLike | None = None
) -> FileInfo:
    """Returns the file-level metadata and load problems of the checkpoint at `path`.

    Args:
        path: a checkpoint file or folder, local or a `Location`.
        root: as for `load`: every file the checkpoint refers to (a sharded index's shards)
            must resolve inside it.

    Raises:
        LoadError: the file is unreadable (as `load` would say).

    >>> import tempfile, numpy as np, inspector
    >>> path = inspector.save({"w": np.ones(2, np.float32)}, f"{tempfile.mkdtemp()}/m.safetensors")
    >>> file_info(path)
    FileInfo(format='safetensors', metadata=mappingproxy({}), problems=())
    """
    location = locate(path)
    fmt = sniff(location)
    with limits.applied(limits.LoadLimits(None if root is None else Path(root))):
        return _read(location, fmt)


def _read(location: Location, fmt: str) -> FileInfo:
    metadata: dict[str, Any] = {}
    problems: tuple[str, ...] = ()
    if fmt == "gguf":
        from inspector.io import gguf_format

        metadata = gguf_format.metadata(location)
    elif fmt == "safetensors":
        metadata = _safetensors_metadata(location)
    elif fmt == "safetensors-index":
        from inspector.io import sharded_index

        metadata, found = sharded_index.index_facts(location)
        problems = tuple(str(p) for p in found)
    return FileInfo(fmt, MappingProxyType(dict(metadata)), problems)


def _safetensors_metadata(location: Location) -> dict[str, Any]:
    from inspector.io import safetensors_format

    (n,) = struct.unpack("<Q", location.read(0, 8))
    if n > min(location.size() - 8, safetensors_format.MAX_HEADER_BYTES):
        return {}  # `load` says what is wrong with the header
    raw = location.read(8, 8 + n)
    # A 100k-tensor header is megabytes of JSON; `__metadata__` is one flat object of
    # strings (the safetensors format says so), so decode that object alone. As a key it is
    # the only `"__metadata__"` followed by a colon: tensor names never equal it.
    start = 0
    while (at := raw.find(_KEY, start)) >= 0:
        start = at + len(_KEY)
        rest = raw[start:start + 64].lstrip()
        if rest.startswith(b":"):
            text = raw.decode("utf-8", errors="replace")
            colon = text.index(":", len(raw[:start].decode("utf-8", errors="replace")))
            try:
                meta, _ = json.JSONDecoder().raw_decode(text, colon + 1 + _spaces(text, colon))
            except ValueError:
                return {}
            return meta if isinstance(meta, dict) else {}
    return {}


def _spaces(text: str, colon: int) -> int:
    """How many blanks follow the colon at `colon` (raw_decode does not skip them)."""
    n = 0
    while colon + 1 + n < len(text) and text[colon + 1 + n] in " \t\r\n":
        n += 1
    return n
