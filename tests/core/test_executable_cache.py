"""The inspector's own kernel files: a second fresh process loads its kernels, lowering none."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from inspector.core import executable_cache, kernel_cache
from inspector.core.calls import Call

CHILD = """
import json, os, sys
import numpy as np, inspector
from inspector.core import executable_cache, kernel_cache
work = sys.argv[1]
a, b = os.path.join(work, "a.safetensors"), os.path.join(work, "b.safetensors")
# lazy leaves of three shapes, used in place by `run` (mapped: one batched kernel); "big"
# (128 KiB) is streamed into a donated output slot by `out=`, and donated into a reused
# buffer when resident
if not os.path.exists(b):
    rng = np.random.default_rng(0)
    for i, p in enumerate((a, b)):
        inspector.save({"w": rng.standard_normal((2, 3)).astype(np.float32),
                        "s": rng.standard_normal((4, 1, 2)).astype(np.float32),
                        "big": rng.standard_normal((128, 256)).astype(np.float32)}, p)
lazy = [inspector.load(a), inspector.load(b)]
r = inspector.run(inspector.weighted_sum, lazy, [0.5, 1.5], repeats=1)
out = os.path.join(work, "m.safetensors")
inspector.weighted_sum(lazy, [0.25, 0.75], out=out)
streamed = inspector.load(out)
resident = [{k: np.asarray(v) for k, v in inspector.load(p).items()} for p in (a, b)]
donated = inspector.run(inspector.weighted_sum, resident, [2.0, -1.0], repeats=2)
print(json.dumps({
    "n_compiled": r.n_compiled, "compile_seconds": r.compile_seconds,
    "folder": str(executable_cache.folder()), **kernel_cache.kernel_counts(),
    "run": {k: np.asarray(v).tolist() for k, v in r.result.items()},
    "out": {k: np.asarray(v).tolist() for k, v in streamed.items()},
    "donated": {k: np.asarray(v).tolist() for k, v in donated.result.items()}}))
"""


def _child(work, cache, **settings) -> dict:
    env = dict(os.environ)
    env.pop("INSPECTOR_EXECUTABLE_CACHE", None)
    env.update(INSPECTOR_COMPILATION_CACHE=str(cache), **settings)
    done = subprocess.run([sys.executable, "-c", CHILD, str(work)], env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _reference(work) -> dict:
    from safetensors.numpy import load_file

    a, b = (load_file(str(work / f"{n}.safetensors")) for n in "ab")
    f64 = {k: (a[k].astype(np.float64), b[k].astype(np.float64)) for k in a}
    return {name: {k: (wa * x + wb * y) for k, (x, y) in f64.items()}
            for name, (wa, wb) in (("run", (0.5, 1.5)), ("out", (0.25, 0.75)),
                                   ("donated", (2.0, -1.0)))}


def _check(values: dict, reference: dict) -> None:
    for name, leaves in reference.items():
        for k, expected in leaves.items():
            np.testing.assert_allclose(np.asarray(values[name][k]), expected, rtol=1e-6,
                                       atol=1e-6, err_msg=f"{name}: {k}")


def test_second_process_lowers_nothing_and_garbage_is_replaced(tmp_path):
    cache = tmp_path / "jax"
    first = _child(tmp_path, cache)
    files = sorted((tmp_path / "jax-executables").glob("*.kernel"))
    assert first["folder"] == str(tmp_path / "jax-executables")
    assert first["loaded"] == 0 and first["lowered"] >= 3 and first["n_compiled"] >= 1
    assert len(files) >= 3  # one per kernel whose key is complete (all of these)
    second = _child(tmp_path, cache)
    assert second["lowered"] == 0 and second["n_compiled"] == 0
    assert second["loaded"] == len(files)
    assert second["compile_seconds"] < first["compile_seconds"]
    for name in ("run", "out", "donated"):  # the same kernels: the same bits
        assert second[name] == first[name]
    _check(second, _reference(tmp_path))

    for path in files:  # corrupt files: compiled again, and replaced
        path.write_bytes(b"not a kernel")
    third = _child(tmp_path, cache)
    assert third["loaded"] == 0 and third["lowered"] == first["lowered"]
    assert all(path.read_bytes() != b"not a kernel" for path in files)
    assert third["run"] == first["run"] and third["out"] == first["out"]
    assert _child(tmp_path, cache)["lowered"] == 0  # the replaced files load


def test_opt_out_then_on_over_jax_cache(tmp_path):
    """Off: JAX's cache alone (it keeps the kernels). Then on, over that filled JAX cache: the
    kernels are compiled afresh, not taken from JAX's cache (jaxlib's CPU client serializes a
    kernel JAX loaded without its code), stored, and load and run in the next process."""
    off = _child(tmp_path, tmp_path / "jax", INSPECTOR_EXECUTABLE_CACHE="0")
    assert off["folder"] == "None" and off["loaded"] == 0 and off["lowered"] >= 3
    assert not (tmp_path / "jax-executables").exists()
    assert any((tmp_path / "jax").iterdir())
    _check(off, _reference(tmp_path))
    on = _child(tmp_path, tmp_path / "jax")
    assert on["loaded"] == 0 and on["n_compiled"] == off["n_compiled"]
    again = _child(tmp_path, tmp_path / "jax")
    assert again["lowered"] == 0 and again["loaded"] == on["lowered"]
    for name in ("run", "out", "donated"):
        assert again[name] == on[name] == off[name]


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("INSPECTOR_EXECUTABLE_CACHE", str(tmp_path / "kernels"))
    executable_cache.forget()
    yield tmp_path / "kernels"
    executable_cache.forget()


def test_only_complete_keys_are_stored(cache_on):
    device = jax.devices("cpu")[0]
    x = np.ones(3, np.float32)
    abstract = kernel_cache._abstracts(Call(("k", 3), lambda: None, [x]), device)
    plain = Call(("weighted_sum", 2, (3,), "float32", 1.5, None, b"", True), lambda: None, [x])
    assert executable_cache.key_text(plain, device, abstract) is not None
    # a function object in the key (`run(fn, ...)`): its code is not the key
    function = Call(("function", np.sum, ((3,), "float32")), lambda: None, [x])
    assert executable_cache.key_text(function, device, abstract) is None
    single = jax.sharding.SingleDeviceSharding(device)
    sharded = Call(("k", 3), lambda: None, [x], shardings=(single,))
    assert executable_cache.key_text(sharded, device, abstract) is None
    laid_out = Call(("k", 3), lambda: None, [x], out_shardings=single)
    assert executable_cache.key_text(laid_out, device, abstract) is None
    # the donated positions and the arguments' dtypes are part of the key
    donated = Call(plain.key, lambda: None, [x], donate=(0,))
    assert executable_cache.key_text(donated, device, abstract) != \
        executable_cache.key_text(plain, device, abstract)
    f16 = kernel_cache._abstracts(Call(("k",), lambda: None, [x.astype(np.float16)]), device)
    assert executable_cache.key_text(plain, device, f16) != \
        executable_cache.key_text(plain, device, abstract)


def test_in_process_round_trip_and_clear(cache_on):
    """A stored kernel, loaded, runs as `kernel_cache` calls kernels: the same positional
    arguments, its donated buffer consumed, the same outputs."""
    from inspector import clear_caches

    device = jax.devices("cpu")[0]

    def make():
        return lambda out, w, a: (w[0] * a).astype(out.dtype)

    shape = (64, 32)
    args = [np.zeros(shape, np.float32), np.array([3.0], np.float32),
            np.arange(64 * 32, dtype=np.float32).reshape(shape)]
    call = Call(("test_scale", shape), make, args, donate=(0,))
    compiled, new = kernel_cache._compile(call, device)
    assert new and len(list(cache_on.glob("*.kernel"))) == 1
    lowered = kernel_cache.kernel_counts()["lowered"]
    loaded, new = kernel_cache._compile(call, device)
    assert not new and kernel_cache.kernel_counts()["lowered"] == lowered
    placed = [jax.device_put(a, device) for a in args]
    out = loaded(*placed)
    assert placed[0].is_deleted()  # donated
    np.testing.assert_array_equal(np.asarray(out), 3.0 * args[2].astype(np.float64))
    before = clear_caches()
    assert before["kernel files (on disk; kept)"] >= 2
    assert len(list(cache_on.glob("*.kernel"))) == 1  # the files stay
