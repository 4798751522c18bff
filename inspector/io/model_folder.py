"""A tree written as a Hugging Face model folder: `model.safetensors`, or shards and an index.

Up to `max_shard_bytes` of arrays go into one `model.safetensors`; beyond, into
`model-00001-of-0000N.safetensors` files of at most that size each (a larger single array
gets a shard of its own) and `model.safetensors.index.json` naming each tensor's shard, the
layout `transformers` and `inspector.load` read. Leaves are read one at a time as they are
written (a tree of lazy results is computed while it is written), each file under a temporary
name and renamed into place; model files of an earlier write left in the folder are removed
once the new ones are complete.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from inspector.io import nesting, safetensors_format
from inspector.io.replacing import replacing

SHARD_BYTES = 5_000_000_000  # mergekit's and transformers' default shard size (5 GB)
INDEX = "model.safetensors.index.json"
_OURS = re.compile(r"^model(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?$")


def save_model_folder(tree, folder: str | os.PathLike, max_shard_bytes: int = SHARD_BYTES,
                      metadata: dict[str, str] | None = None) -> list[Path]:
    """Writes `tree` into `folder` (created if needed); returns the files written, in order.

    Args:
        tree: nested dicts / lists of arrays or `LazyArray`s (flat names joined with ".").
        folder: the model folder.
        max_shard_bytes: the most array bytes per file before the tree is sharded.
        metadata: each file's safetensors `__metadata__` (e.g. `{"format": "pt"}`).

    Raises:
        InspectorError: as `inspector.save` (keys with "." or "/", dtypes safetensors lacks).

    >>> import tempfile, numpy as np
    >>> folder = tempfile.mkdtemp()
    >>> tree = {"a": np.zeros(4, np.float32), "b": np.ones(4, np.float32)}
    >>> [p.name for p in save_model_folder(tree, folder, max_shard_bytes=16)]
    ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', \
'model.safetensors.index.json']
    """
    if max_shard_bytes <= 0:
        raise ValueError(f"max_shard_bytes must be positive, got {max_shard_bytes}.")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    flat = nesting.flatten(tree)
    shards: list[list[str]] = [[]]
    size = total = 0
    for name, leaf in flat.items():
        nbytes = int(leaf.nbytes) if hasattr(leaf, "nbytes") else 0
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
        total += nbytes
    if len(shards) == 1:
        path = folder / "model.safetensors"
        safetensors_format.save(flat, path, metadata)
        written = [path]
    else:
        written, weight_map = [], {}
        for i, names in enumerate(shards, 1):
            path = folder / f"model-{i:05d}-of-{len(shards):05d}.safetensors"
            safetensors_format.save({n: flat[n] for n in names}, path, metadata)
            weight_map.update(dict.fromkeys(names, path.name))
            written.append(path)
        with replacing(folder / INDEX) as f:
            f.write(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                               indent=2).encode())
        written.append(folder / INDEX)
    keep = {p.name for p in written}
    for old in folder.iterdir():
        if _OURS.match(old.name) and old.name not in keep and old.is_file():
            old.unlink()
    return written
