"""Opening checkpoints in a session: the file picker (inside the root only) and uploads."""

from __future__ import annotations

import doctest

import jax
import ml_dtypes
import numpy as np
import pytest

import inspector
from inspector.ui.app import ROOT_ENV, create_app
from inspector.ui.file_picker import FileOpener
from inspector.ui.lazy_tree import walk
from inspector.ui.session import checkpoint_files
from inspector.ui.session.state import InspectorState
from inspector.ui.tree_view import TreeView
from tests.helpers import open_files

MODEL = {
    "dense": {"kernel": np.arange(12, dtype=np.float32).reshape(4, 3),
              "bias": np.zeros(3, ml_dtypes.bfloat16)},
    "embed": np.ones((5, 2), np.int8),
}


def _leaf_rows(view: TreeView) -> dict[str, str]:
    """Leaf labels the tree widget holds, by key path."""
    return {item["id"]: item["label"] for item in walk(view.tree.items)
            if item.get("icon") == "grid_on"}


@pytest.mark.parametrize("name", ["model.safetensors", "model.npz"])
def test_opening_a_file_shows_its_rows_without_reading_data(session, tmp_path, name):
    inspector.save(MODEL, tmp_path / name)
    view = TreeView(session)
    open_files(session, tmp_path / name)
    assert session.open.open_error == "" and session.error == ""
    assert list(session.trees) == ["kept", name] and session.selected == name
    loaded = session.trees[name]
    assert loaded.source == f"file {name}" and (loaded.n_leaves, loaded.n_params) == (3, 25)
    assert all(isinstance(x, inspector.LazyArray) for x in jax.tree.leaves(loaded.tree))
    rows = _leaf_rows(view)
    assert "['kernel']\u2003float32[4,3]\u200348 B" in rows["['dense']['kernel']"]
    assert "bfloat16[3]" in rows["['dense']['bias']"]
    assert "int8[5,2]" in rows["['embed']"]
    assert f"**{name}** · 3 leaves · 25 params" in view._header.object


def test_opening_an_orbax_folder(session, tmp_path):
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "ckpt", {"params": {"w": np.ones((2, 3), np.float32)},
                                             "step": np.asarray(7, np.int32)})
    view = TreeView(session)
    open_files(session, "ckpt")  # a folder, relative to the root
    assert session.open.open_error == "" and session.selected == "ckpt"
    assert "float32[2,3]" in _leaf_rows(view)["['params']['w']"]
    assert "int32[]" in _leaf_rows(view)["['step']"]


def test_a_path_outside_the_root_is_refused(tmp_path):
    (tmp_path / "root").mkdir()
    inspector.save({"w": np.ones(2)}, tmp_path / "secret.npz")
    s = InspectorState(file_root=str(tmp_path / "root"))
    open_files(s, "../secret.npz")
    assert s.open.open_error.startswith(
        "Cannot open ../secret.npz: it is outside the folder this app may open.\n")
    assert str(tmp_path) not in s.open.open_error  # no server path outside the root
    assert s.trees == {}


def test_a_link_pointing_outside_the_root_is_refused(tmp_path):
    (tmp_path / "root").mkdir()
    inspector.save({"w": np.ones(2)}, tmp_path / "secret.npz")
    (tmp_path / "root" / "innocent.npz").symlink_to(tmp_path / "secret.npz")
    s = InspectorState(file_root=str(tmp_path / "root"))
    open_files(s, tmp_path / "root" / "innocent.npz")
    assert s.open.open_error.startswith(
        "Cannot open innocent.npz: it is a link to a file outside the folder this app may open.")
    assert str(tmp_path) not in s.open.open_error and "secret" not in s.open.open_error
    assert s.trees == {}


def test_a_link_inside_the_root_opens(session, tmp_path):
    inspector.save({"w": np.ones(2)}, tmp_path / "real.npz")
    (tmp_path / "alias.npz").symlink_to(tmp_path / "real.npz")
    open_files(session, tmp_path / "alias.npz")
    assert session.open.open_error == "" and "real.npz" in session.trees


def test_a_corrupt_file_says_why_and_keeps_the_loaded_trees(session, tmp_path):
    inspector.save(MODEL, tmp_path / "good.safetensors")
    open_files(session, tmp_path / "good.safetensors")
    data = (tmp_path / "good.safetensors").read_bytes()
    (tmp_path / "bad.safetensors").write_bytes(data[:40])  # the header cut short
    opener = FileOpener(session)
    open_files(session, tmp_path / "bad.safetensors")
    assert session.open.open_error.startswith("Cannot load bad.safetensors: ")
    assert str(tmp_path) not in session.open.open_error
    assert opener.alert.visible and "bad.safetensors" in opener._error.object
    assert list(session.trees) == ["kept", "good.safetensors"]
    assert session.selected == "good.safetensors"
    open_files(session, tmp_path / "good.safetensors")  # the next success clears the message
    assert session.open.open_error == "" and not opener.alert.visible


def test_the_picker_sets_the_paths_and_lists_the_root(session, tmp_path):
    inspector.save(MODEL, tmp_path / "model.npz")
    (tmp_path / "ckpt").mkdir()
    opener = FileOpener(session)
    listed = {item["name"]: item["type"] for item in opener.picker._items}
    assert listed == {"model.npz": "file", "ckpt": "directory"}
    opener.picker.value = [str(tmp_path / "model.npz")]
    assert session.open.open_paths == [str(tmp_path / "model.npz")]
    session.open.param.trigger("open_files")
    assert "model.npz" in session.trees
    assert opener.picker.value == []  # the selection is cleared once opened


def test_upload_reads_the_bytes_and_names_the_tree_by_file_name(session, tmp_path):
    inspector.save(MODEL, tmp_path / "model.safetensors")
    opener = FileOpener(session)
    assert "Upload a file (up to 100 MiB)" == opener.upload.label
    assert opener.upload.max_file_size == checkpoint_files.MAX_UPLOAD_BYTES
    opener.upload.param.update(filename="weights.safetensors",
                               value=(tmp_path / "model.safetensors").read_bytes())
    assert session.open.open_error == "" and session.selected == "weights.safetensors"
    loaded = session.trees["weights.safetensors"]
    assert loaded.source == "upload weights.safetensors" and loaded.n_leaves == 3
    kernel = inspector.PackedTree.unpack(loaded.tree)["dense"]["kernel"]  # in memory now
    np.testing.assert_array_equal(np.asarray(kernel), MODEL["dense"]["kernel"])


def test_a_bad_upload_names_the_uploaded_file(session):
    opener = FileOpener(session)
    opener.upload.param.update(filename="notes.txt", value=b"hello, not a checkpoint")
    assert session.open.open_error.startswith("Cannot load notes.txt: the format is not recognised")
    assert "pytree-inspector-upload" not in session.open.open_error
    assert list(session.trees) == ["kept"]


def test_an_upload_over_the_limit_is_refused(session, monkeypatch):
    monkeypatch.setattr(checkpoint_files, "MAX_UPLOAD_BYTES", 10)
    session.open.open_upload("big.npz", b"x" * 11)
    assert session.open.open_error.startswith(
        "Cannot upload big.npz: it is 11 B, more than the 10 B")


def test_the_root_defaults_to_the_environment_variable_then_the_working_directory(
        tmp_path, monkeypatch):
    monkeypatch.setenv(ROOT_ENV, str(tmp_path))
    app = create_app(background=False, defaults=False).inspector
    assert app.state.file_root == str(tmp_path) and app.files.picker.directory == str(tmp_path)
    monkeypatch.delenv(ROOT_ENV)
    monkeypatch.chdir(tmp_path / "..")
    assert create_app(background=False, defaults=False).inspector.state.file_root == \
        str(tmp_path.parent)


def test_doctests():
    assert doctest.testmod(checkpoint_files).failed == 0


def test_errors_name_files_relative_to_the_root(session, tmp_path):
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "bad.npz").write_bytes(b"PK\x03\x04 truncated")
    open_files(session, tmp_path / "runs" / "a" / "bad.npz")
    assert session.open.open_error.startswith("Cannot load runs/a/bad.npz: ")
    assert str(tmp_path) not in session.open.open_error


def test_a_shard_linking_outside_the_root_is_refused_without_naming_it(tmp_path):
    (tmp_path / "root").mkdir()
    inspector.save({"w": np.ones(2, np.float32)}, tmp_path / "s1.safetensors")
    (tmp_path / "root" / "s1.safetensors").symlink_to(tmp_path / "s1.safetensors")
    (tmp_path / "root" / "m.safetensors.index.json").write_text(
        '{"weight_map": {"w": "s1.safetensors"}}')
    s = InspectorState(file_root=str(tmp_path / "root"))
    open_files(s, "m.safetensors.index.json")
    assert s.open.open_error.startswith(
        "Cannot load m.safetensors.index.json: shard 's1.safetensors' is a link to a file "
        "outside the folder this app may open.")
    assert str(tmp_path) not in s.open.open_error and s.trees == {}


def test_an_unexpected_error_names_no_server_path():
    from inspector.ui.session.state import error_text

    try:
        np.zeros(2).reshape(3)
    except ValueError as exc:
        text = error_text(exc, "/nonexistent-root")
    assert text.startswith("Unexpected ValueError: cannot reshape array of size 2 into shape (3,)")
    assert "/" not in text.split("\n  at ")[1]  # the source file by name, not its server path
