"""The persistent compilation cache: a second process serves its kernels from disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = """
import json, jax.monitoring, numpy as np, inspector
from inspector.core import compile_cache
events = []
jax.monitoring.register_event_listener(lambda name, **_: events.append(name))
tree = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float32)}
r = inspector.run(inspector.weighted_sum, [tree, tree], [0.5, 1.5], repeats=1)
print(json.dumps({"hits": events.count("/jax/compilation_cache/cache_hits"),
                  "misses": events.count("/jax/compilation_cache/cache_misses"),
                  "folder": str(compile_cache.enable()),
                  "w": np.asarray(r.result["w"]).tolist()}))
"""


def _run(env_value: str) -> dict:
    env = dict(os.environ, INSPECTOR_COMPILATION_CACHE=env_value)
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, check=True, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing(tmp_path):
    first = _run(str(tmp_path))
    second = _run(str(tmp_path))
    assert first["folder"] == second["folder"] == str(tmp_path)
    # JAX reports a kernel loaded from disk as a hit (its backend-compile event fires alike)
    assert first["misses"] > 0 and first["hits"] == 0
    assert second["misses"] == 0 and second["hits"] == first["misses"]
    assert any(tmp_path.iterdir())
    expected = [[2.0 * v for v in range(3)], [2.0 * v for v in range(3, 6)]]
    assert first["w"] == second["w"] == expected


def test_opt_out_leaves_jax_alone(tmp_path):
    off = _run("0")
    assert off["folder"] == "None" and off["hits"] == off["misses"] == 0
