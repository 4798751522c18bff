"""One of two processes (4 CPU devices each) joined by `jax.distributed` into one 8-device mesh.

    python two_processes.py COORDINATOR_PORT PROCESS_ID

Run by `test_multihost.py` (XLA_FLAGS gives each process 4 devices). Each process shards the
same trees over data=4 x model=2, runs a weighted sum, a stack and an index as SPMD programs
over all 8 devices, gathers the results with JAX's multihost utilities and asserts them
against NumPy float64 and exact values; then prints one JSON line of what it saw.
"""

import json
import sys

import jax
import numpy as np
from jax.experimental import multihost_utils

import inspector


def tree(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"w": rng.normal(size=(8, 6)).astype(np.float32),
            "b": rng.normal(size=(6,)).astype(np.float32),
            "i": np.arange(16, dtype=np.int32).reshape(8, 2) * (seed + 1)}


def gathered(t) -> dict:
    return {k: np.asarray(v) for k, v in multihost_utils.process_allgather(t, tiled=True).items()}


def main(port: int, process_id: int) -> None:
    # before anything touches a JAX backend
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id,
                               initialization_timeout=120)
    m = inspector.mesh({"data": 4, "model": 2})
    hosts = [tree(k) for k in range(3)]
    specs = {"w": "data, model", "b": None, "i": "(data, model)"}
    sharded = [inspector.shard(t, m, specs) for t in hosts]
    weights = [0.5, -1.25, 2.0]
    run = inspector.run(inspector.weighted_sum, sharded, weights, repeats=2)
    out = gathered(run.result)
    for key in ("w", "b", "i"):
        ref = sum(w * hosts[k][key].astype(np.float64) for k, w in enumerate(weights))
        np.testing.assert_allclose(out[key], ref, rtol=1e-6, atol=1e-6)
    exact = gathered(inspector.weighted_sum(sharded, [1, 2, 3]))
    np.testing.assert_array_equal(exact["i"], hosts[0]["i"] * 14)
    stacked = inspector.stack(sharded)
    np.testing.assert_array_equal(gathered(stacked)["w"], np.stack([t["w"] for t in hosts]))
    indexed = gathered(inspector.index(sharded[1], {"w": "2:6, 1", "b": "::2", "i": None}))
    np.testing.assert_array_equal(indexed["w"], hosts[1]["w"][2:6, 1])
    np.testing.assert_array_equal(indexed["b"], hosts[1]["b"][::2])
    rows = {r.path: r.sharding for r in inspector.describe(run.result)}
    print(json.dumps({
        "process": jax.process_index(), "processes": jax.process_count(),
        "devices": len(jax.devices()), "local": len(jax.local_devices()),
        "mesh": run.mesh, "device": run.device,
        "specs": {k: str(v.sharding.spec) for k, v in run.result.items()},
        "stack_spec": str(stacked["w"].sharding.spec),
        "rows": rows, "device_bytes": inspector.device_bytes(sharded[0]),
        "w": out["w"].tolist(),
    }))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
