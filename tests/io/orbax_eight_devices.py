"""Run in a subprocess with 8 fake CPU devices: orbax checkpoints of sharded trees.

Saves a tree sharded over data=4 x model=2 with orbax, opens it with `inspector.load` (with its
array data deleted, so the saved shardings can only come from metadata), and restores it
straight into a mesh; prints one JSON record for `test_orbax_sharding.py`.
"""

import json
import sys
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding

import inspector


def spec_of(leaf):
    return str(leaf.sharding.spec) if isinstance(leaf.sharding, NamedSharding) else None


def main(folder: Path) -> None:
    m = inspector.mesh({"data": 4, "model": 2})
    host = {"w": np.arange(32.0, dtype=np.float32).reshape(8, 4),
            "b": np.arange(4, dtype=np.int32),
            "layers": [np.ones((4, 8), np.float32), np.full((8,), 2.0, np.float32)]}
    sharded = inspector.shard(host, m, {"w": "data, model", "b": None,
                                        "layers": ["model, (data)", "(data, model)"]})
    sharded["plain"] = np.zeros(3, np.float32)  # saved from the host: no sharding recorded
    saved = {}
    for name, ocdbt in (("files", False), ("ocdbt", True)):
        saved[name] = folder / name
        with ocp.PyTreeCheckpointer(use_ocdbt=ocdbt) as checkpointer:
            checkpointer.save(saved[name], sharded)
    # delete every chunk of array data: only metadata is left to open the checkpoint from
    chunks = [f for f in saved["files"].rglob("*") if f.is_file() and f.parent != saved["files"]
              and not f.name.startswith((".z", "zarr.json"))]
    for f in chunks:
        f.unlink()
    record = {"deleted_chunks": len(chunks)}
    opened = inspector.load(saved["files"])
    record["rows"] = {r.path: r.sharding for r in inspector.describe(opened)}
    # zarr reads a missing chunk as its fill value: the data really is gone
    record["w_after_deleting"] = float(np.abs(np.asarray(opened["w"])).sum())

    restored = inspector.load(saved["ocdbt"], mesh=m)
    record["restored"] = {
        jax.tree_util.keystr(p): [spec_of(x), np.asarray(x).tolist()]
        for p, x in jax.tree_util.tree_flatten_with_path(restored)[0]}
    replicated = inspector.load(saved["ocdbt"], mesh=m, specs={"w": "model", "b": None,
                                                                "layers": None, "plain": None})
    record["respecified"] = {jax.tree_util.keystr(p): spec_of(x)
                             for p, x in jax.tree_util.tree_flatten_with_path(replicated)[0]}
    data8 = inspector.mesh({"data": 8})  # saved axes the mesh lacks: replicated
    record["other_mesh"] = {jax.tree_util.keystr(p): spec_of(x) for p, x in
                            jax.tree_util.tree_flatten_with_path(
                                inspector.load(saved["ocdbt"], mesh=data8))[0]}
    print(json.dumps(record))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
