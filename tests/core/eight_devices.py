"""Run in a subprocess with 8 fake CPU devices (XLA_FLAGS set by the caller before JAX loads).

Shards trees over a data=4 x model=2 mesh, runs every op on them and on the same trees held on
one device, and prints one JSON record of what came out (values, specs, texts) for
`test_sharding.py` to assert against NumPy float64 and the single-device results.
"""

import json

import jax
import ml_dtypes
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import inspector
from inspector.core.packed import PackedTree, pack


def tree(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.normal(size=(8, 4)).astype(np.float32),
        "b": rng.normal(size=(4,)).astype(np.float32),
        "e": rng.normal(size=(8, 2)).astype(ml_dtypes.bfloat16),
        "i": rng.integers(-50, 50, size=(8,)).astype(np.int32),
        "s": np.float32(seed + 0.5),
        "n": None,
    }


SPECS = {"w": "data, model", "b": None, "e": PartitionSpec("data"), "i": "(data, model)",
         "s": None, "n": None}


def values(t) -> dict:
    """Leaf path -> [dtype, shape, spec text or None, values as float lists]."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(t)[0]:
        sharding = getattr(leaf, "sharding", None)
        spec = sharding.spec if isinstance(sharding, NamedSharding) else None
        out[jax.tree_util.keystr(path)] = [
            str(leaf.dtype), list(np.shape(leaf)), None if spec is None else str(spec),
            np.asarray(leaf).astype(np.float64).tolist()]
    return out


def main() -> None:
    record: dict = {"devices": [str(d) for d in jax.devices()]}
    m = inspector.mesh({"data": 4, "model": 2})
    record["mesh"] = [list(m.axis_names), [int(s) for s in m.devices.shape],
                      [d.id for d in m.devices.flat]]
    hosts = [tree(k) for k in range(3)]
    sharded = [inspector.shard(t, m, SPECS) for t in hosts]
    record["rows"] = {r.path: [r.device, r.sharding] for r in inspector.describe(sharded[0])}
    record["device_bytes"] = inspector.device_bytes(sharded[0])
    record["device_bytes_host"] = inspector.device_bytes(hosts[0])
    record["inputs"] = [values(t) for t in sharded]

    # weighted sum: sharded + host + sharded, float weights; and on one device
    weights = [0.5, -1.25, 2.0]
    mixed = [sharded[0], hosts[1], sharded[2]]
    record["wsum_mesh"] = values(inspector.weighted_sum(mixed, weights))
    record["wsum_one"] = values(inspector.weighted_sum(hosts, weights))
    run = inspector.run(inspector.weighted_sum, sharded, weights, repeats=2)
    record["run"] = [run.device, run.mesh, values(run.result)["['w']"][2]]

    # S1 on the model axis (the leaves' leading sizes are 2)
    def s1_tree(w0, b0, w1, b1):
        return [[np.array(w0, np.int32), np.array(b0, np.int32)],
                [np.array(w1, np.int32), np.array(b1, np.int32)]]

    s1 = [s1_tree([[1, 2], [3, 4]], [2, 3], [[1, 2], [3, 4]], [2, 3]),
          s1_tree([[2, 3], [3, 4]], [5, 3], [[2, 3], [3, 4]], [5, 3]),
          s1_tree([[7, 1], [4, 4]], [6, 2], [[6, 4], [3, 7]], [7, 3])]
    s1_sharded = [inspector.shard(t, m, "model") for t in s1]
    out = inspector.weighted_sum(s1_sharded, [1, 2, 3])
    record["s1"] = [jax.tree.map(lambda x: np.asarray(x).tolist(), out),
                    sorted({str(x.sharding.spec) for x in jax.tree.leaves(out)}),
                    sorted({str(x.dtype) for x in jax.tree.leaves(out)})]

    # stack / unstack
    stacked = inspector.stack(sharded)
    record["stack_mesh"] = values(stacked)
    record["stack_one"] = values(inspector.stack(hosts))
    record["unstack_mesh"] = [values(t) for t in inspector.unstack(stacked)]

    # index: a different index per subtree
    index_tree = {"w": "2:6, 0", "b": "1", "e": "::2", "i": "-1", "s": None, "n": None}
    record["index_mesh"] = values(inspector.index(sharded[0], index_tree))
    record["index_one"] = values(inspector.index(hosts[0], index_tree))

    # merges (issue 13) on the mesh: float leaves only
    floats = [{k: t[k] for k in ("w", "b", "e")} for t in sharded]
    floats_host = [{k: t[k] for k in ("w", "b", "e")} for t in hosts]
    record["merge"] = {}
    for method, kwargs in (("ties", {"density": 0.5}), ("dare_linear", {"density": 0.5})):
        on_mesh = inspector.merge(method, floats[1:], base=floats[0], **kwargs)
        on_one = inspector.merge(method, floats_host[1:], base=floats_host[0], **kwargs)
        record["merge"][method] = [values(on_mesh), values(on_one)]

    # packed buffers laid out over the mesh: one kernel per dtype, on the mesh
    flat = [pack({"a": t["w"], "c": t["w"][:, 0]}) for t in hosts[:2]]
    placed = [PackedTree(p.layout, {g: jax.device_put(b, NamedSharding(m, PartitionSpec("data")))
                                    for g, b in p.buffers.items()}) for p in flat]
    packed = inspector.weighted_sum(placed, [1.5, -0.25])
    record["packed"] = [str(packed.buffers["float32"].sharding.spec),
                        np.asarray(packed.buffers["float32"]).astype(np.float64).tolist(),
                        np.asarray(inspector.weighted_sum(flat, [1.5, -0.25]).buffers[
                            "float32"]).astype(np.float64).tolist(),
                        inspector.device_bytes(placed[0]), inspector.device_bytes(flat[0])]

    # any JAX function of sharded trees runs over the mesh
    fn = inspector.run(lambda t: jax.tree.map(lambda x: x * 2, t), {"w": sharded[0]["w"]},
                       repeats=1)
    record["function"] = [fn.mesh, np.asarray(fn.result["w"]).tolist()]

    # errors: every leaf that does not divide; inputs on two meshes
    errors = {}
    try:
        inspector.shard({"a": np.zeros((6, 3)), "b": [np.zeros((4, 3)), np.zeros((8, 5))]}, m,
                        {"a": "data", "b": ["model, data", "data, model"]})
    except inspector.ShardingError as e:
        errors["divide"] = str(e)
    other = inspector.mesh({"data": 8})
    try:
        inspector.weighted_sum([sharded[0], inspector.shard(hosts[1], other, None)], [1, 1])
    except inspector.ShardingError as e:
        errors["two_meshes"] = str(e)
    try:
        inspector.mesh({"data": 3, "model": 2})
    except inspector.ShardingError as e:
        errors["mesh"] = str(e)
    record["errors"] = errors
    print(json.dumps(record))


if __name__ == "__main__":
    main()
