"""HDF5 / Keras `.h5`: files written by h5py, groups as dicts, bfloat16 by Keras' attribute."""

from __future__ import annotations

import h5py
import ml_dtypes
import numpy as np

from inspector.io import load, sniff
from tests.io.io_assertions import assert_load_error, assert_tree_equal


def _write_keras_like(path):
    rng = np.random.default_rng(4)
    arrays = {
        "kernel": rng.standard_normal((3, 4)).astype(np.float32),
        "bias": np.zeros(4, np.float32),
        "moving_mean": rng.standard_normal(4),
        "count": np.asarray(7, np.int64),
        "bf16": np.linspace(-1, 1, 5).astype(ml_dtypes.bfloat16),
    }
    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = "3.0.0"
        weights = f.create_group("model_weights")
        weights.attrs["layer_names"] = [b"dense", b"batch_norm"]
        dense = weights.create_group("dense/dense")
        dense["kernel:0"] = arrays["kernel"]
        dense.create_dataset("bias:0", data=arrays["bias"], chunks=(2,), compression="gzip")
        norm = weights.create_group("batch_norm/batch_norm")
        norm["moving_mean:0"] = arrays["moving_mean"]
        f["optimizer_weights/iterations:0"] = arrays["count"]
        # Keras' convention: h5py stores bfloat16 as opaque 2-byte data, the attribute names it
        norm.create_dataset("gamma:0", data=arrays["bf16"]).attrs["dtype"] = "bfloat16"
        f["names"] = ["dense", "batch_norm"]
        f["dangling"] = h5py.SoftLink("/nowhere")
    expected = {
        "model_weights": {
            "dense": {"dense": {"kernel:0": arrays["kernel"], "bias:0": arrays["bias"]}},
            "batch_norm": {
                "batch_norm": {"moving_mean:0": arrays["moving_mean"], "gamma:0": arrays["bf16"]}
            },
        },
        "optimizer_weights": {"iterations:0": arrays["count"]},
    }
    return expected


def test_file_written_by_h5py(tmp_path):
    path = tmp_path / "model.weights.h5"
    expected = _write_keras_like(path)
    assert sniff(path) == "hdf5"
    tree = load(path)
    names = tree.pop("names")
    assert names.tolist() == ["dense", "batch_norm"]
    assert_tree_equal(tree, expected)


def test_suffix_does_not_matter(tmp_path):
    path = tmp_path / "weights.bin"
    expected = _write_keras_like(path)
    tree = load(path)
    tree.pop("names")
    assert_tree_equal(tree, expected)


def test_leaves_are_read_when_used(tmp_path):
    path = tmp_path / "lazy.h5"
    with h5py.File(path, "w") as f:
        f["w"] = np.zeros(4, np.float32)
        offset = f["w"].id.get_offset()
    tree = load(path)
    with open(path, "r+b") as f:  # change the dataset's bytes after loading
        f.seek(offset)
        f.write(np.arange(4, dtype=np.float32).tobytes())
    np.testing.assert_array_equal(np.asarray(tree["w"]), np.arange(4, dtype=np.float32))


def test_truncated_file(tmp_path):
    path = tmp_path / "truncated.h5"
    _write_keras_like(path)
    path.write_bytes(path.read_bytes()[:1200])
    assert_load_error(path, "h5py cannot read it")
