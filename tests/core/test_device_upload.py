"""The pipelined upload behind `read_packed` off the CPU (driven here on the CPU device, with
staging buffers small enough that leaves span several of them)."""

import jax
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

import inspector
from inspector.core import device_upload, host_read
from inspector.core.errors import LoadError
from inspector.core.packed import plan_layout


@pytest.fixture
def small_staging(monkeypatch):
    monkeypatch.setattr(device_upload, "_STAGING_BYTES", 4000)  # 1000 float32 per buffer
    monkeypatch.setattr(device_upload, "_PIECE_BYTES", 400)  # a leaf read in 100-float parts


def uploaded(tree):
    layout, leaves = plan_layout(tree)
    out = {}
    for group, size in layout.sizes.items():
        items = [(leaf, s) for leaf, s in zip(leaves, layout.slots, strict=True)
                 if s.group == group]
        out[group] = np.asarray(device_upload.upload(items, size, np.dtype(group),
                                                     jax.devices("cpu")[0]))
    return layout, out


def expected(tree, layout):
    leaves, _ = jax.tree_util.tree_flatten(tree)
    out = {g: [] for g in layout.sizes}
    for leaf, slot in zip(leaves, layout.slots, strict=True):
        out[slot.group].append(np.asarray(leaf).astype(np.float64).reshape(-1))
    return {g: np.concatenate(v) if v else np.zeros(0) for g, v in out.items()}


def test_lazy_leaves_spanning_staging_buffers_read_once(tmp_path, small_staging):
    rng = np.random.default_rng(0)
    values = {"big": rng.normal(size=(37, 101)).astype(np.float32),  # 3737: four buffers
              "small": rng.normal(size=(5,)).astype(np.float32),
              "empty": np.zeros((0, 3), np.float32),
              "mid": rng.normal(size=(999,)).astype(np.float32),
              "half": rng.normal(size=(300,)).astype(ml_dtypes.bfloat16)}
    save_file(values, str(tmp_path / "a.safetensors"))
    tree = inspector.load(tmp_path / "a.safetensors")
    before = host_read.stats()["bytes"]
    layout, got = uploaded(tree)
    want = expected(values, layout)
    assert got.keys() == want.keys()
    for g in want:
        np.testing.assert_array_equal(got[g].astype(np.float64), want[g])
    read = host_read.stats()["bytes"] - before
    assert read == sum(v.nbytes for v in values.values())  # each byte read once, in place


def test_leaves_read_by_their_reader_and_a_shared_leaf(small_staging):
    rng = np.random.default_rng(1)
    shared = rng.normal(size=(1500,)).astype(np.float32)
    wide = rng.normal(size=(2100,))  # float64: JAX holds float32, so no in-place read
    tree = {"a": shared, "b": shared, "c": wide, "d": np.arange(7, dtype=np.int32)}
    layout, got = uploaded(tree)
    want = expected(tree, layout)
    for g in want:
        np.testing.assert_allclose(got[g].astype(np.float64), want[g], rtol=1e-7)


def test_a_file_that_shrank_raises_and_does_not_hang(tmp_path, small_staging):
    values = {"w": np.arange(5000, dtype=np.float32)}
    save_file(values, str(tmp_path / "a.safetensors"))
    tree = inspector.load(tmp_path / "a.safetensors")
    with open(tmp_path / "a.safetensors", "r+b") as f:
        f.truncate(f.seek(0, 2) - 8000)
    with pytest.raises(LoadError, match="the file ended after"):
        uploaded(tree)


def test_staging_buffers_are_kept_for_the_next_upload(small_staging):
    tree = {"w": np.arange(5000, dtype=np.float32)}  # five staging buffers' worth
    uploaded(tree)
    kept = [b.ctypes.data for b in device_upload._POOL]
    assert len(kept) == device_upload._DEPTH
    for _ in range(3):
        _, got = uploaded(tree)
        np.testing.assert_array_equal(got["float32"], tree["w"])
        assert sorted(b.ctypes.data for b in device_upload._POOL) == sorted(kept)
