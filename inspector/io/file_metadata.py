"""What a checkpoint file says about itself besides its arrays: its format and metadata.

A safetensors header may carry `__metadata__` (string keys and values: `{"format": "pt"}`,
a training step, a license); a sharded index carries a `metadata` object (`total_size`). The
command line's `show` prints them above the tree. Formats without such a record give `{}`.
"""

from __future__ import annotations

import json
import os
import struct

from inspector.io import safetensors_format
from inspector.io.locate import locate
from inspector.io.location import Location
from inspector.io.sniff import sniff

_KEY = b'"__metadata__"'


def file_metadata(path: str | os.PathLike | Location) -> tuple[str, dict]:
    """Returns `(format, metadata)` of the checkpoint at `path` (a path or URL).

    Call it on a file `inspector.load` has read: a damaged header is reported there, and here
    gives `{}`.

    >>> import tempfile, numpy as np, inspector
    >>> path = inspector.save({"w": np.ones(2)}, tempfile.mkdtemp() + "/m.safetensors")
    >>> file_metadata(path)
    ('safetensors', {})
    """
    location = locate(path)
    fmt = sniff(location)
    if fmt == "safetensors":
        return fmt, _safetensors_metadata(location)
    if fmt == "safetensors-index":
        try:
            index = json.loads(location.read_all())
        except ValueError:
            return fmt, {}
        meta = index.get("metadata") if isinstance(index, dict) else None
        return fmt, meta if isinstance(meta, dict) else {}
    return fmt, {}


def _safetensors_metadata(location: Location) -> dict:
    (n,) = struct.unpack("<Q", location.read(0, 8))
    if n > min(location.size() - 8, safetensors_format.MAX_HEADER_BYTES):
        return {}
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
