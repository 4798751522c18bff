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
import os, sys
# a checkpoint's lazy leaves of three shapes, read (not mapped, as `run` would on the CPU:
# then one batched kernel): a kernel each, compiled side by side (`plan._compile_missing`),
# the path that once never switched the cache on
from inspector.core.runner import PlannedRun
tree = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float32),
        "s": np.ones((4, 1, 2), np.float32)}
path = os.path.join(sys.argv[1], "t.safetensors")
inspector.save(tree, path)
lazy = inspector.load(path)
result, _ = PlannedRun(inspector.weighted_sum, [lazy, lazy], [0.5, 1.5]).execute()
print(json.dumps({"hits": events.count("/jax/compilation_cache/cache_hits"),
                  "misses": events.count("/jax/compilation_cache/cache_misses"),
                  "folder": str(compile_cache.enable()),
                  "w": np.asarray(result["w"]).tolist()}))
"""


def _run(env_value: str, work) -> dict:
    # JAX's cache alone: the inspector's own kernel files (tests/core/test_executable_cache.py)
    # would serve the second process before JAX's cache is asked
    env = dict(os.environ, INSPECTOR_COMPILATION_CACHE=env_value, INSPECTOR_EXECUTABLE_CACHE="0")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(work)], env=env,
                          capture_output=True, text=True, check=True, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing(tmp_path):
    first = _run(str(tmp_path / "cache"), tmp_path)
    second = _run(str(tmp_path / "cache"), tmp_path)
    assert first["folder"] == second["folder"] == str(tmp_path / "cache")
    # JAX reports a kernel loaded from disk as a hit (its backend-compile event fires alike)
    assert first["misses"] > 0 and first["hits"] == 0
    assert second["misses"] == 0 and second["hits"] == first["misses"]
    assert first["misses"] >= 3  # one kernel per leaf shape, none of them missed
    assert any((tmp_path / "cache").iterdir())
    expected = [[2.0 * v for v in range(3)], [2.0 * v for v in range(3, 6)]]
    assert first["w"] == second["w"] == expected


def test_opt_out_leaves_jax_alone(tmp_path):
    off = _run("0", tmp_path)
    assert off["folder"] == "None" and off["hits"] == off["misses"] == 0
