"""`inspector.io.load / save / sniff`: format detection, round trips, refusals, import cost."""

from __future__ import annotations

import os
import pathlib
import pickle
import subprocess
import sys

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inspector.core.errors import InspectorError, LoadError
from inspector.core.lazy import LazyArray
from inspector.io import FORMATS, load, save, sniff
from tests.io.io_assertions import assert_load_error, assert_tree_equal

FORMATS_WRITTEN = ["safetensors", "npz"]


def _tree():
    rng = np.random.default_rng(0)
    return {
        "embed": rng.standard_normal((5, 4)).astype(ml_dtypes.bfloat16),
        "layers": {
            "0": {
                "w": rng.standard_normal((4, 4)).astype(np.float32),
                "b": np.zeros(4, np.float16),
            },
            "1": {"w": rng.standard_normal((4, 4)).astype(np.float32), "b": np.ones(4, np.float16)},
        },
        "ids": np.arange(6, dtype=np.int64).reshape(2, 3),
        "mask": np.array([True, False]),
        "step": np.asarray(7, np.int32),
        "nan": np.array([np.nan, -0.0, np.inf], np.float64),
        "empty": np.zeros((0, 3), np.uint8),
    }


@pytest.mark.parametrize("fmt", FORMATS_WRITTEN)
def test_round_trip_is_exact_including_bfloat16(tmp_path, fmt):
    tree = _tree()
    path = save(tree, tmp_path / f"model.{fmt}")
    assert sniff(path) == fmt
    assert_tree_equal(load(path), tree)


@pytest.mark.parametrize("fmt", FORMATS_WRITTEN)
def test_save_accepts_jax_arrays_lazy_leaves_and_python_scalars(tmp_path, fmt):
    first = save(_tree(), tmp_path / f"first.{fmt}")
    tree = {
        "jax": {"w": jnp.arange(6, dtype=jnp.bfloat16).reshape(2, 3)},
        "lazy": load(first)["layers"],  # LazyArray leaves, read while writing
        "lr": 0.5,
        "epochs": 3,
        "flag": True,
    }
    path = save(tree, tmp_path / f"second.{fmt}")
    expected = {
        "jax": {"w": np.asarray(tree["jax"]["w"])},
        "lazy": _tree()["layers"],
        "lr": np.asarray(0.5),
        "epochs": np.asarray(3),
        "flag": np.asarray(True),
    }
    assert_tree_equal(load(path), expected)


@pytest.mark.parametrize("fmt", FORMATS_WRITTEN)
def test_save_reads_each_lazy_leaf_once(tmp_path, fmt):
    reads = []

    def leaf(i):
        def read():
            reads.append(i)
            return np.full(3, i, np.float32)

        return LazyArray((3,), np.float32, read)

    save({"a": leaf(0), "b": [leaf(1), leaf(2)]}, tmp_path / f"m.{fmt}")
    assert sorted(reads) == [0, 1, 2]


@pytest.mark.parametrize("fmt", FORMATS_WRITTEN)
def test_lists_and_tuples_come_back_as_dicts_keyed_by_position(tmp_path, fmt):
    tree = {"layers": [np.ones(2), (np.zeros(1), np.ones(3))], "skip": None, "none": {}}
    loaded = load(save(tree, tmp_path / f"m.{fmt}"))
    assert_tree_equal(
        loaded, {"layers": {"0": np.ones(2), "1": {"0": np.zeros(1), "1": np.ones(3)}}}
    )


leaf_dtypes = st.sampled_from(
    [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int8, np.int32, np.uint16, np.bool_]
)
leaves = st.builds(
    lambda dtype, shape, seed: (np.random.default_rng(seed).standard_normal(shape) * 50).astype(
        dtype
    ),
    leaf_dtypes,
    st.lists(st.integers(0, 3), max_size=3).map(tuple),
    st.integers(0, 2**32 - 1),
)
keys = st.text("abcxyz_019-", min_size=1, max_size=6)
trees = st.recursive(
    st.dictionaries(keys, leaves, min_size=1, max_size=3),
    lambda children: st.dictionaries(keys, children | leaves, min_size=1, max_size=3),
    max_leaves=10,
)


@settings(max_examples=40, deadline=None)
@given(tree=trees, fmt=st.sampled_from(FORMATS_WRITTEN))
def test_round_trip_random_trees(tmp_path_factory, tree, fmt):
    path = save(tree, tmp_path_factory.mktemp("rt") / f"t.{fmt}")
    assert_tree_equal(load(path), tree)


def test_save_names_every_non_array_leaf_and_bad_key(tmp_path):
    tree = {
        "a": {"name": "bert", "w": np.ones(2), "huge": 2**70},
        "b": [object()],
        "c.d": np.ones(1),
        3.5: 1,
    }
    with pytest.raises(InspectorError) as info:
        save(tree, tmp_path / "m.safetensors")
    message = str(info.value)
    assert "2 key(s) cannot be written and 3 leaf/leaves are not arrays" in message
    for path in (
        "['a']['name']: str 'bert'",
        "['a']['huge']: int 1180591620717411303424",
        "['b'][0]: object",
        "['c.d']: the key contains",
        "[3.5]: keys must be strings",
    ):
        assert path in message, message
    assert not (tmp_path / "m.safetensors").exists()


def test_save_refuses_unknown_suffix_and_bare_leaves(tmp_path):
    with pytest.raises(InspectorError, match="no format for suffix '.pt'"):
        save({"w": np.ones(1)}, tmp_path / "m.pt")
    with pytest.raises(InspectorError, match="unknown format 'hdf5'"):
        save({"w": np.ones(1)}, tmp_path / "m.h5", format="hdf5")
    with pytest.raises(InspectorError, match="Cannot save a bare leaf"):
        save(np.ones(1), tmp_path / "m.npz")


def test_save_with_explicit_format_ignores_suffix(tmp_path):
    path = save({"w": np.arange(3.0)}, tmp_path / "weights.bin", format="safetensors")
    assert sniff(path) == "safetensors"
    assert_tree_equal(load(path), {"w": np.arange(3.0)})


def test_safetensors_refuses_dtypes_it_cannot_store(tmp_path):
    with pytest.raises(InspectorError, match=r"\['z'\]|z: complex128"):
        save({"z": np.ones(2, np.complex128)}, tmp_path / "m.safetensors")
    assert_tree_equal(
        load(save({"z": np.ones(2, np.complex128)}, tmp_path / "m.npz")),
        {"z": np.ones(2, np.complex128)},
    )


def test_nonexistent_path(tmp_path):
    assert_load_error(tmp_path / "missing.safetensors", "the path does not exist")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.pt"
    path.write_bytes(b"")
    assert_load_error(path, "the file is empty")


def test_wrong_magic(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"GIF89a" + bytes(100))
    assert_load_error(path, "the format is not recognised", "GIF89a")


def test_plain_pickle_is_refused_unread(tmp_path):
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps({"w": [1.0, 2.0]}, protocol=4))
    assert_load_error(path, "it is a Python pickle, not a PyTorch checkpoint")


def test_folder_that_is_no_checkpoint(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    assert_load_error(tmp_path, "it is a folder but not an orbax checkpoint", "_METADATA")


def test_folder_of_checkpoints_suggests_them(tmp_path):
    (tmp_path / "100" / "default").mkdir(parents=True)
    (tmp_path / "100" / "default" / "_METADATA").write_text("{}")
    assert_load_error(tmp_path, "not an orbax checkpoint", "pass one of: 100/default")


def test_sniff_names_are_the_documented_ones():
    assert set(FORMATS) == {
        "safetensors", "safetensors-index", "npy", "npz", "orbax", "flax-msgpack", "hdf5",
        "torch", "torch-legacy", "gguf",
    }  # fmt: skip


def test_load_error_is_a_value_error():
    assert issubclass(LoadError, ValueError)


def test_import_is_cheap_and_loads_no_format_or_ui_library():
    code = (
        "import sys, inspector.io; "
        "print(sorted(m for m in ('jax', 'h5py', 'orbax', 'tensorstore', 'msgpack', "
        "'safetensors', 'flax', 'torch', 'panel', 'bokeh', 'param') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[2])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)  # fmt: skip
    assert out.stdout.strip() == "[]"
