"""The streaming writer: a tree written to a file leaf by leaf, then opened lazily.

Ops whose result may not fit in memory (`weighted_sum(..., out=path)`, and any other op that
can give its result as a tree of `LazyArray`s computed on read; see
`inspector.core.lazy_result`) hand that tree to `write_streamed`. Each leaf is read (computed)
only as it is written, so memory holds one output leaf and its inputs at a time; the file is
written beside its final name and renamed into place, so a failure mid-way leaves no partial
file under that name (and an older file there untouched).
"""

from __future__ import annotations

import os
from typing import Any

from inspector.io import formats


def write_streamed(tree: Any, path: str | os.PathLike, format: str | None = None,
                   pieces=None) -> Any:
    """Writes `tree` into `path` one leaf at a time and returns `inspector.load(path)`.

    Args:
        tree: nested dicts / lists / tuples of arrays or `LazyArray`s (read, i.e. computed,
            one at a time, in order, while the file is written).
        path: a `.safetensors` or `.npz` file (or give `format`); replaced only on success.
        format: "safetensors" or "npz"; by default taken from the suffix.
        pieces: for a safetensors file, `pieces(leaves)` may give the data section as
            `(offset, array)` chunks spanning leaves instead (see
            `inspector.core.chunked_stream.chunk_pieces`; None from it: leaf by leaf).

    Returns:
        The written tree, loaded back lazily (nothing of it held in memory).

    Raises:
        InspectorError: as `inspector.save` (unknown format, keys, dtypes); any error raised
            while computing a leaf propagates, and `path` is left as it was.
    """
    written = formats.save(tree, path, format=format, pieces=pieces)
    return formats.load(written)
