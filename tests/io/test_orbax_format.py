"""orbax checkpoint folders: written by orbax's checkpointers, read from metadata only."""

from __future__ import annotations

import json
import shutil
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from inspector.core.lazy import LazyArray
from inspector.io import load, sniff
from tests.io.io_assertions import assert_load_error, assert_tree_equal


def _state():
    rng = np.random.default_rng(5)
    return {
        "params": {
            "dense": {
                "kernel": rng.standard_normal((3, 4)).astype(np.float32),
                "bias": jnp.zeros(4, jnp.bfloat16),
            },
            "embed": rng.integers(0, 9, (5, 2)).astype(np.int8),
        },
        "opt": [np.arange(3.0), {"count": np.asarray(4, np.int32)}],
        "step": 12,
    }


def _expected(state):
    expected = jax.tree.map(np.asarray, state)
    expected["step"] = np.asarray(12, np.int64)  # orbax stores Python ints as int64 scalars
    return expected


def _save(path, state, **options):
    with ocp.PyTreeCheckpointer(**options) as checkpointer:
        checkpointer.save(path, state)
    return path


def test_standard_checkpointer(tmp_path):
    path = tmp_path / "ckpt"
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, _state())
    assert sniff(path) == "orbax"
    assert_tree_equal(load(path), _expected(_state()))


@pytest.mark.parametrize(
    "options", [{"use_ocdbt": False}, {"use_zarr3": True}], ids=["per-array-folders", "zarr3"]
)
def test_other_layouts(tmp_path, options):
    path = _save(tmp_path / "ckpt", _state(), **options)
    assert_tree_equal(load(path), _expected(_state()))


def test_checkpoint_manager_step(tmp_path):
    with ocp.CheckpointManager(tmp_path / "run") as manager:
        manager.save(3, args=ocp.args.StandardSave(_state()))
        manager.wait_until_finished()
    assert_tree_equal(load(tmp_path / "run" / "3" / "default"), _expected(_state()))
    assert_load_error(tmp_path / "run", "not an orbax checkpoint", "3/default")


def test_strings_none_and_empty_containers(tmp_path):
    state = {"w": np.ones(2), "name": "bert", "none": None, "empty": {}, "nothing": []}
    path = _save(tmp_path / "ckpt", state)
    tree = load(path)
    assert tree["name"] == "bert" and tree["none"] is None
    assert tree["empty"] == {} and tree["nothing"] == []


@pytest.mark.parametrize("options", [{}, {"use_ocdbt": False}, {"use_zarr3": True}])
def test_structure_matches_orbax_metadata_api(tmp_path, options):
    path = _save(tmp_path / "ckpt", _state(), **options)
    ours = jax.tree_util.tree_flatten_with_path(load(path))[0]
    with ocp.StandardCheckpointer() as checkpointer:
        theirs = jax.tree_util.tree_flatten_with_path(
            checkpointer.metadata(path).item_metadata.tree
        )[0]
    assert [(jax.tree_util.keystr(k), v.shape, np.dtype(v.dtype)) for k, v in ours] == [
        (jax.tree_util.keystr(k), tuple(v.shape), np.dtype(v.dtype)) for k, v in theirs
    ]


def test_structure_costs_milliseconds_and_reads_no_data(tmp_path):
    state = {f"layer_{i}": {"w": np.zeros((8, 8), np.float32), "b": np.zeros(8)}
             for i in range(150)}  # fmt: skip
    path = _save(tmp_path / "ckpt", state)
    load(path)
    start = time.perf_counter()
    tree = load(path)
    assert time.perf_counter() - start < 2.0  # loose (busy CI); LazyArray below is the check
    assert isinstance(tree["layer_3"]["w"], LazyArray)
    # the data is read when used: overwrite the checkpoint, the loaded leaf sees the new values
    shutil.rmtree(path)
    _save(path, {**state, "layer_3": {"w": np.full((8, 8), 2.0, np.float32), "b": np.zeros(8)}})
    np.testing.assert_array_equal(np.asarray(tree["layer_3"]["w"]), np.full((8, 8), 2.0))


# --- damaged checkpoints ---------------------------------------------------------------------


def test_damaged_metadata_file(tmp_path):
    path = _save(tmp_path / "ckpt", _state())
    (path / "_METADATA").write_text('{"tree_metadata": ')
    assert_load_error(path, "its _METADATA file is not orbax tree metadata")


def test_array_metadata_missing(tmp_path):
    path = _save(tmp_path / "ckpt", _state(), use_ocdbt=False)
    shutil.rmtree(path / "params.embed")
    assert_load_error(
        path,
        "1 array(s) listed in _METADATA have no readable metadata",
        "params.embed: no .zarray or zarr.json",
    )


def _sharded(path):
    """A checkpoint of arrays saved as `NamedSharding`s on a one-device mesh, by orbax."""
    from jax.sharding import NamedSharding, PartitionSpec

    x = jax.device_put(jnp.arange(4.0), NamedSharding(jax.make_mesh((1,), ("data",)),
                                                       PartitionSpec("data")))
    return _save(path, {"w": x, "w>>?": x, "b": jnp.ones(2)})


def test_saved_shardings_keyed_by_url_safe_base64(tmp_path):
    path = _sharded(tmp_path / "ckpt")
    entries = json.loads((path / "_sharding").read_text())
    assert "dz4-Pw==" in entries  # orbax's key for "w>>?": URL-safe base64 ("-", not "+")
    tree = load(path)
    assert {k: None if v.sharding is None else (tuple(v.sharding.spec), v.sharding.axes)
            for k, v in tree.items()} == {
        "w": (("data",), {"data": 1}), "w>>?": (("data",), {"data": 1}), "b": None}


def test_damaged_sharding_file_is_refused_not_read_as_replicated(tmp_path):
    path = _sharded(tmp_path / "ckpt")
    entries = json.loads((path / "_sharding").read_text())
    (path / "_sharding").write_text(json.dumps(entries)[:-9])
    assert_load_error(path, "its _sharding file is not JSON",
                      "delete its _sharding file to read the arrays without their saved layouts")
    meta = json.loads(entries["dw=="])
    del meta["partition_spec"]
    entries["dw=="] = json.dumps(meta)
    (path / "_sharding").write_text(json.dumps(entries))
    assert_load_error(path, "its _sharding file has 1 damaged entries",
                      "entry 'dw==': KeyError: 'partition_spec'")
    (path / "_sharding").write_text("[]")
    assert_load_error(path, "its _sharding file is not a JSON object")


def _retype(path, key: str, value_type: str) -> None:
    metadata = json.loads((path / "_METADATA").read_text())
    metadata["tree_metadata"][f"('{key}',)"] = {
        "key_metadata": [{"key": key, "key_type": 2}],
        "value_metadata": {"value_type": value_type, "skip_deserialize": False},
    }
    (path / "_METADATA").write_text(json.dumps(metadata))


def test_custom_leaf_kind_with_a_zarr_array_is_read_as_that_array(tmp_path):
    path = _save(tmp_path / "ckpt", _state())
    _retype(path, "step", "my.custom.Counter")
    assert_tree_equal(load(path), _expected(_state()))


def test_custom_leaf_kind_without_an_array(tmp_path):
    path = _save(tmp_path / "ckpt", _state())
    _retype(path, "extra", "my.custom.Thing")
    assert_load_error(
        path,
        "1 leaf/leaves were saved by a custom orbax type handler",
        "['extra']: my.custom.Thing",
    )


def test_folder_without_metadata_file(tmp_path):
    path = _save(tmp_path / "ckpt", _state())
    (path / "_METADATA").unlink()
    assert_load_error(path, "it has no _METADATA file")
