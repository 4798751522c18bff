"""Two processes x 4 CPU devices joined by `jax.distributed` (gloo collectives on 127.0.0.1)
build one 8-device mesh, shard trees, run ops over it and gather the same values as one process.

Each process (`two_processes.py`) asserts its gathered results against NumPy itself; here both
must succeed, agree with each other, and agree bit for bit with this process's one-device sum.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import inspector
from tests.serving import free_port

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


@pytest.mark.slow
def test_two_processes_share_one_mesh():
    port = free_port()
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(
                   [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, str(HERE / "two_processes.py"), str(port), str(i)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err[-3000:]
            outputs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for i, seen in enumerate(outputs):
        assert seen["process"] == i
        assert (seen["processes"], seen["devices"], seen["local"]) == (2, 8, 4)
        assert (seen["mesh"], seen["device"]) == ("data=4, model=2", "8 devices")
        assert seen["specs"] == {"b": "P()", "i": "P(('data', 'model'),)",
                                 "w": "P('data', 'model')"}
        assert seen["stack_spec"] == "P(None, 'data', 'model')"
        assert seen["rows"]["['w']"] == "PartitionSpec('data', 'model') over data=4, model=2"
        assert seen["rows"]["['b']"] == "replicated over 8 devices"
        # this process's 4 devices: w 2x3 float32 (24 B) + b replicated (24 B) + i 2 int32 (8 B)
        assert list(seen["device_bytes"].values()) == [56] * 4
    assert set(outputs[0]["device_bytes"]).isdisjoint(outputs[1]["device_bytes"])
    assert outputs[0]["w"] == outputs[1]["w"]

    def tree(seed):  # as two_processes.py builds them
        rng = np.random.default_rng(seed)
        return {"w": rng.normal(size=(8, 6)).astype(np.float32),
                "b": rng.normal(size=(6,)).astype(np.float32)}

    one = inspector.weighted_sum([tree(k) for k in range(3)], [0.5, -1.25, 2.0])
    assert np.asarray(one["w"]).tolist() == outputs[0]["w"]  # bit for bit
