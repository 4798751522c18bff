"""Mutated bytes of every format's files: `load` + reading every leaf only ever raises LoadError.

Hypothesis mutates a small, valid file of each format (bytes overwritten with random or
boundary values, inserted, deleted, or the file truncated), biased toward headers and zip
directories where the structure lives. Each mutant is loaded, and every leaf read, by one
worker process (`fuzz_worker.py`) under a memory cap; each must be refused with a LoadError
or load, within 2 s. Runs are derandomized (the same examples every run) and bounded, so the
test takes seconds; set PYTREE_INSPECTOR_FUZZ_EXAMPLES to explore more.
"""

from __future__ import annotations

import json
import os
import pathlib
import select
import shutil
import subprocess
import sys

import h5py
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inspector.io import save

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
REPO = pathlib.Path(__file__).parents[2]
MEMORY_CAP = 3 * 2**30
"""Address space the worker may use: numpy, h5py, tensorstore and the reads themselves."""
SECONDS_EACH = 2.0
EXAMPLES = int(os.environ.get("PYTREE_INSPECTOR_FUZZ_EXAMPLES", "150"))
_BOUNDARY = [b"\x00", b"\xff", b"\x7f", b"\x80", b"\xff\xff\xff\xff", b"\x00\x00\x00\x80",
             b"\xff\xff\xff\xff\xff\xff\xff\x7f", b"{", b"[", b'"', b"9999999999"]  # fmt: skip


def _tensors():
    rng = np.random.default_rng(0)
    return {
        "layer": {
            "w": rng.standard_normal((3, 4)).astype(np.float32),
            "b": np.arange(5, dtype=np.float32).astype(ml_dtypes.bfloat16),
        },
        "ids": np.arange(7, dtype=np.int64),
    }


def _write_seeds(folder: pathlib.Path) -> dict[str, pathlib.Path]:
    """One small valid checkpoint per format (a folder holds every file its format needs)."""
    from flax import serialization

    seeds = {}
    tensors = _tensors()
    w, b, ids = tensors["layer"]["w"], tensors["layer"]["b"], tensors["ids"]

    def seed(name: str) -> pathlib.Path:
        path = folder / name
        path.mkdir()
        seeds[name] = path
        return path

    save(tensors, seed("safetensors") / "m.safetensors")
    shards = seed("safetensors-index")
    save({"layer": {"w": w}}, shards / "s1.safetensors")
    save({"ids": ids}, shards / "s2.safetensors")
    (shards / "m.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"layer.w": "s1.safetensors", "ids": "s2.safetensors"}}))
    np.save(seed("npy") / "m.npy", w)
    save(tensors, seed("npz-stored") / "m.npz")
    np.savez_compressed(seed("npz-compressed") / "m.npz", **{"a/w": w, "ids": ids})
    tree = {"params": {"w": w, "b": b}, "step": 3, "opt": [ids, {"count": np.int32(4)}]}
    (seed("msgpack") / "m.msgpack").write_bytes(serialization.msgpack_serialize(tree))
    with h5py.File(seed("hdf5") / "m.h5", "w") as f:
        f.create_dataset("layer/w", data=w)
        f.create_dataset("layer/z", data=np.zeros(64, np.int16), chunks=(16,), compression="gzip")
        bf16 = f.create_dataset("layer/b", data=b.view(np.uint16))
        bf16.attrs["dtype"] = "bfloat16"
        f.create_dataset("names", data=np.array([b"w", b"b"]))
    _write_gguf(seed("gguf") / "m.gguf", w)
    shutil.copy(FIXTURES / "state_dict_zip.pt", seed("torch") / "m.pt")
    shutil.copy(FIXTURES / "state_dict_legacy.pt", seed("torch-legacy") / "m.pt")
    import orbax.checkpoint as ocp

    with ocp.PyTreeCheckpointer(use_ocdbt=False) as checkpointer:
        checkpointer.save((seed("orbax") / "ckpt").absolute(), tree)
    return seeds


def _write_gguf(path: pathlib.Path, w: np.ndarray) -> None:
    import gguf  # llama.cpp's writer: key/values, a string array, F32 and Q8_0 tensors

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(64)
    writer.add_token_list(["a", "bc", "def"])
    writer.add_tensor("layer.w", w)
    q8 = gguf.quants.quantize(np.tile(w, (1, 8)), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("layer.q", q8, raw_shape=q8.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _checkpoint(seed: pathlib.Path) -> pathlib.Path:
    """The path `load` is given inside a seed folder."""
    if (seed / "ckpt").is_dir():
        return seed / "ckpt"
    (main,) = [p for p in seed.iterdir() if p.name.startswith("m.")]
    return main


class _Worker:
    """One `fuzz_worker` process, fed a path at a time, restarted after a failure."""

    def __init__(self):
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.io.fuzz_worker", str(MEMORY_CAP)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO, env=env,
        )

    def load(self, path: pathlib.Path, timeout: float) -> dict | None:
        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.process.stdout.readline()
        return json.loads(line) if line else {"verdict": "bug", "detail": "the worker died"}

    def close(self):
        self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return _write_seeds(tmp_path_factory.mktemp("seeds"))


@pytest.fixture(scope="module")
def worker():
    worker = _Worker()
    assert worker.load(pathlib.Path("/nonexistent"), 30)["verdict"] == "refused"  # warmed up
    yield worker
    worker.close()


def test_every_seed_loads(seeds, worker):
    for name, seed in seeds.items():
        result = worker.load(_checkpoint(seed), 30)
        assert result["verdict"] == "loaded", (name, result)


@st.composite
def _mutation(draw, size: int):
    kind = draw(st.sampled_from(["overwrite", "overwrite", "boundary", "insert", "delete",
                                 "truncate"]))  # fmt: skip
    near_head = st.integers(0, min(size, 512) - 1)
    near_tail = st.integers(max(size - 512, 0), size - 1)
    position = draw(st.one_of(near_head, near_tail, st.integers(0, size - 1)))
    if kind == "overwrite":
        return kind, position, draw(st.binary(min_size=1, max_size=8))
    if kind == "boundary":
        return kind, position, draw(st.sampled_from(_BOUNDARY))
    if kind == "insert":
        return kind, position, draw(st.binary(min_size=1, max_size=16))
    return kind, position, draw(st.integers(1, 64))


def _mutate(data: bytes, mutations) -> bytes:
    out = bytearray(data)
    for kind, position, value in mutations:
        position = min(position, max(len(out) - 1, 0))
        if kind in ("overwrite", "boundary"):
            out[position : position + len(value)] = value
        elif kind == "insert":
            out[position:position] = value
        elif kind == "delete":
            del out[position : position + value]
        else:
            del out[position:]
    return bytes(out)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])  # fmt: skip
@given(data=st.data())
def test_mutated_files_load_or_fail_with_load_error_fast(seeds, worker, tmp_path, data):
    name = data.draw(st.sampled_from(sorted(seeds)), label="format")
    target = tmp_path / f"case-{name}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(seeds[name], target)
    files = sorted(p for p in target.rglob("*") if p.is_file())
    victim = data.draw(st.sampled_from(files), label="file")
    original = victim.read_bytes()
    if not original:
        return
    mutations = data.draw(st.lists(_mutation(len(original)), min_size=1, max_size=4),
                          label="mutations")
    victim.write_bytes(_mutate(original, mutations))
    result = worker.load(_checkpoint(target), SECONDS_EACH)
    if result is None:
        worker.close()
        worker.__init__()
        pytest.fail(f"loading {victim.relative_to(target)} of {name} took over {SECONDS_EACH} s")
    assert result["verdict"] in ("loaded", "refused"), result["detail"]
    assert result["seconds"] < SECONDS_EACH, result
