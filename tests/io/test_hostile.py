"""The hostile-input corpus: every file under `hostile/` with the verdict `load` must reach.

The files are written by `hostile/make_hostile.py` (one builder per case, named for what the
file tries). Each is refused fast with a `LoadError` naming the file and the problem; nothing
outside the file is read, nothing is inflated past the budget, no later load is affected.
Cases that need a root folder or links are built here, in a temporary folder.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import numpy as np
import pytest

from inspector.core.errors import LoadError
from inspector.io import load
from tests.io.io_assertions import assert_load_error, assert_tree_equal

HOSTILE = pathlib.Path(__file__).parent / "hostile"
FIXTURES = pathlib.Path(__file__).parent / "fixtures"
_BOMB = "above the limit of 268435456 bytes for one load"

REFUSED = {
    # HDF5
    "hdf5_external_storage.h5": ["the dataset ['layer']['w'] keeps its data in external files"],
    "hdf5_virtual_dataset.h5": ["the dataset ['layer']['v'] is a virtual dataset"],
    "hdf5_unallocated_bomb.h5": ["would inflate 335544320 bytes", "the dataset ['w']", _BOMB],
    "hdf5_gzip_bomb.h5": ["would inflate", "the dataset ['w']", _BOMB],
    "hdf5_truncated.h5": ["h5py cannot read it"],
    # PyTorch
    "torch_stride0_bomb.pt": ["float32[3000000000], stride [0]) has stride 0 along dimension 0"],
    "torch_overlapping_view.pt": ["has 16777216 elements, more than its 8191-element storage"],
    "torch_view_past_storage.pt": ["reaches element 9 of a 6-element storage"],
    "torch_shared_refs_exponential.pt": ["pickle expands to more than", "over and over"],
    "torch_shared_refs_legacy.pt": ["pickle expands to more than", "over and over"],
    "torch_cyclic_list.pt": ["its pickle builds a cycle: the container at [0] contains itself"],
    "torch_deep_nesting.pt": ["its pickle nests deeper than 256 levels"],
    "torch_poison_storage_dtype.pt": ["the pickle tries to modify torch.FloatStorage"],
    "torch_poison_function_defaults.pt": [
        "the pickle tries to modify torch._utils._rebuild_tensor_v2"
    ],
    "torch_poison_state_dict_class.pt": ["the pickle tries to modify collections.OrderedDict"],
    "torch_poison_foreign_class.pt": ["the pickle tries to modify the class trainer.hooks.Hook"],
    "torch_foreign_refs_exponential.pt": ["pickle expands to more than", "over and over"],
    "torch_reduce_os_system.pt": [
        "the global os.system",
        "this file asks to run os.system: refused; nothing was run",
    ],
    "torch_compressed_storage_bomb.pt": ["would inflate 335544320 bytes", "archive/data/0", _BOMB],
    "torch_compressed_pickle_bomb.pt": ["would inflate", "archive/data.pkl", _BOMB],
    "torch_pickle_crc_mismatch.pt": ["the zip member 'archive/data.pkl' is damaged",
                                     "Bad CRC-32"],
    # NumPy
    "npz_deflate_bomb.npz": ["would inflate", "member 'w.npy'", _BOMB],
    "npz_declared_size_mismatch.npz": ["its .npy header declares float32[1073741824]"],
    "npz_stored_member_past_end.npz": ["beyond the file's 252 bytes"],
    "npz_object_array.npz": ["holds Python objects"],
    "npz_directory_offset_past_itself.npz": ["the local header of 'w.npy' would start before "
                                             "the file"],
    "npy_shape_past_data.npy": ["its .npy header declares float32[1099511627776]"],
    # safetensors
    "safetensors_offsets_past_end.safetensors": ["beyond the 16-byte data section"],
    "safetensors_shape_bomb.safetensors": ["data_offsets [0, 16] hold 16 bytes, but F32"],
    "safetensors_overlapping.safetensors": ["'a' and 'b': their data ranges overlap"],
    "safetensors_index_escape.safetensors.index.json": [
        "shard '../../../etc/passwd' is outside the checkpoint's folder"
    ],
    "safetensors_index_absolute.safetensors.index.json": [
        "shard '/etc/passwd' is outside the checkpoint's folder"
    ],
    # flax msgpack
    "msgpack_shape_bomb.msgpack": ["needs 4398046511104 bytes but holds 16"],
    "msgpack_payload_past_end.msgpack": ["bytes are needed but only"],
    "msgpack_huge_count.msgpack": ["declares 4294967295 entries"],
    "msgpack_deep_nesting.msgpack": ["nests deeper than 256 levels"],
    # orbax
    "orbax_name_escape": ["the array at ['../../etc'] (folder '../../etc') is outside"],
    "orbax_zarr_shape_bomb": ["would inflate", "zarr array(s)", _BOMB],
}
"""Each corpus file that must be refused, with fragments its LoadError must contain."""


def test_every_corpus_file_has_a_verdict():
    on_disk = {p.name for p in HOSTILE.iterdir() if not p.name.startswith(("_", "make_"))}
    assert on_disk == set(REFUSED)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_hostile_file_is_refused(name):
    error = assert_load_error(HOSTILE / name, *REFUSED[name])
    assert "/etc/passwd" not in str(error) or "shard" in str(error)  # nothing read from there


def test_poisoning_pickles_change_nothing_for_later_loads():
    before = {name: _arrays(load(FIXTURES / name)) for name in TORCH_FIXTURES}
    for name in REFUSED:
        if name.startswith("torch_poison"):
            with pytest.raises(LoadError):
                load(HOSTILE / name)
    for name in TORCH_FIXTURES:
        assert_tree_equal(load(FIXTURES / name), before[name])


TORCH_FIXTURES = ("state_dict_zip.pt", "state_dict_legacy.pt")


def _arrays(tree):
    if isinstance(tree, dict):
        return {k: _arrays(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_arrays(v) for v in tree)
    return np.asarray(tree).copy() if hasattr(tree, "shape") else tree


# --- links and names that leave the root -----------------------------------------------------


def _shards(folder: pathlib.Path) -> pathlib.Path:
    import safetensors.numpy

    safetensors.numpy.save_file({"w": np.arange(4, dtype=np.float32)}, str(folder / "s1.st"))
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "s1.st"}}))
    return index


def test_index_shard_linking_outside_the_root_is_refused(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    index = _shards(outside)
    shutil.copy(index, root / index.name)
    (root / "s1.st").symlink_to(outside / "s1.st")
    with pytest.raises(LoadError) as info:
        load(root / index.name, root=root)
    message = str(info.value)
    assert "shard 's1.st' is a link to a file outside the folder this app may open" in message
    assert str(outside) not in message
    # without a root (a library user's own disk) the link is followed
    assert np.asarray(load(root / index.name)["w"]).tolist() == [0, 1, 2, 3]


def test_index_shard_linking_inside_the_root_loads(tmp_path):
    root = tmp_path / "root"
    (root / "blobs").mkdir(parents=True)
    _shards(root / "blobs")
    (root / "snapshot").mkdir()
    shutil.copy(root / "blobs" / "model.safetensors.index.json", root / "snapshot")
    (root / "snapshot" / "s1.st").symlink_to(root / "blobs" / "s1.st")  # as the HF cache does
    tree = load(root / "snapshot" / "model.safetensors.index.json", root=root)
    assert np.asarray(tree["w"]).tolist() == [0, 1, 2, 3]


def test_orbax_file_linking_outside_the_root_is_refused(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    shutil.copytree(HOSTILE / "orbax_zarr_shape_bomb", outside)
    zarray = outside / "w" / ".zarray"
    meta = json.loads(zarray.read_text())
    meta["shape"] = [4]
    zarray.write_text(json.dumps(meta))
    assert np.asarray(load(outside)["w"]).tolist() == [0, 1, 2, 3]
    shutil.copytree(outside, root / "ckpt", ignore=shutil.ignore_patterns("w"))
    os.symlink(outside / "w", root / "ckpt" / "w")
    with pytest.raises(LoadError) as info:
        load(root / "ckpt", root=root)
    assert "w is a link to a file outside the folder this app may open" in str(info.value)
    assert np.asarray(load(root / "ckpt")["w"]).tolist() == [0, 1, 2, 3]


def test_inflate_budget_is_settable(tmp_path):
    with pytest.raises(LoadError, match="above the limit of 1000 bytes for one load"):
        load(HOSTILE / "npz_deflate_bomb.npz", max_inflate=1000)
    assert load(HOSTILE / "npz_deflate_bomb.npz", max_inflate=2**29)["w"].shape == (83886080,)
    values = np.arange(1000, dtype=np.float64)
    np.savez_compressed(tmp_path / "small.npz", w=values)
    np.testing.assert_array_equal(np.asarray(load(tmp_path / "small.npz")["w"]), values)
    with pytest.raises(LoadError, match="the last 8128 for member 'w.npy'"):
        load(tmp_path / "small.npz", max_inflate=8000)
