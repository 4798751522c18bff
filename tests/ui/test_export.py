"""Downloads: the selected tree or the result, written with `inspector.save`, read back equal."""

from __future__ import annotations

import asyncio
from base64 import b64decode

import ml_dtypes
import numpy as np
import pytest

import inspector
from inspector.io import sniff
from inspector.ui.export import ExportView
from inspector.ui.session.checkpoint_files import export_bytes
from inspector.ui.session.state import InspectorState
from tests.helpers import assert_tree_allclose

TREE = {
    "layer": {"kernel": np.arange(6, dtype=np.float32).reshape(2, 3),
              "bias": np.array([0.5, -1.25, 3.0], ml_dtypes.bfloat16)},
    "step": np.asarray(7, np.int32),
}


def _download(view: ExportView, tmp_path, name: str):
    """Clicks the download as the browser would; returns the file the browser would save."""
    data = asyncio.run(view.write())
    if data is None:
        return None
    view.download._sync_data(data)
    path = tmp_path / view.download.filename
    assert view.download.filename == name
    path.write_bytes(b64decode(view.download.data.split(",", 1)[1]))
    return path


def _assert_equal(loaded, expected) -> None:
    assert_tree_allclose(loaded, expected, rtol=0, same_dtype=True)


@pytest.mark.parametrize("fmt", ["safetensors", "npz"])
def test_the_selected_tree_round_trips_bfloat16_included(tmp_path, fmt):
    s = InspectorState()
    s.add_tree("my model", TREE, select=True)
    view = ExportView(s)
    s.export_format = fmt
    assert view.download.label == f"Download my_model.{fmt}"
    path = _download(view, tmp_path, f"my_model.{fmt}")
    assert s.export_error == ""
    assert sniff(path) == fmt
    _assert_equal(inspector.load(path), TREE)


def test_a_lazy_checkpoint_round_trips(tmp_path):
    inspector.save(TREE, tmp_path / "ckpt.safetensors")
    s = InspectorState(file_root=str(tmp_path))
    s.open.param.update(open_paths=[str(tmp_path / "ckpt.safetensors")])
    s.open.param.trigger("open_files")
    view = ExportView(s)
    s.export_format = "npz"
    (tmp_path / "out").mkdir()
    path = _download(view, tmp_path / "out", "ckpt.npz")
    _assert_equal(inspector.load(path), TREE)


def test_the_result_round_trips(tmp_path):
    s = InspectorState()
    s.load_defaults()
    s.param.trigger("run")  # S1: weighted_sum(t1, t2, t3) = S1_EXPECTED (int32)
    view = ExportView(s)
    s.export_source = "result"
    path = _download(view, tmp_path, "weighted_sum_t1_t2_t3.safetensors")
    loaded = inspector.load(path)  # lists come back as dicts keyed "0", "1" (flat names)
    assert np.asarray(loaded["1"]["0"]).tolist() == [[23, 20], [18, 33]]
    assert np.asarray(loaded["1"]["0"]).dtype == np.int32


def test_a_tree_with_non_array_leaves_shows_the_save_error(tmp_path):
    s = InspectorState()
    s.add_tree("notes", {"w": np.ones(2, np.float32), "name": "hello"}, select=True)
    view = ExportView(s)
    assert _download(view, tmp_path, "notes.safetensors") is None
    assert "Cannot save the tree" in s.export_error and "['name']: str 'hello'" in s.export_error
    assert view.alert.visible and "[&#x27;name&#x27;]: str" in view._error.object
    assert view.download.data is None  # nothing was sent
    s.selected = s.add_tree("fine", {"w": np.ones(2, np.float32)})
    assert _download(view, tmp_path, "fine.safetensors") is not None
    assert s.export_error == "" and not view.alert.visible


def test_nothing_to_download_before_a_result(tmp_path):
    s = InspectorState()
    s.add_tree("t", {"w": np.ones(2)})
    view = ExportView(s)
    s.export_source = "result"
    assert view.download.disabled and view.download.label == "Nothing to download yet"
    assert asyncio.run(view.write()) is None and "run an operation first" in s.export_error


def test_every_download_reaches_the_browser_as_new_data(tmp_path):
    s = InspectorState()
    s.add_tree("t", {"w": np.ones(2)})
    view = ExportView(s)
    _download(view, tmp_path, "t.safetensors")
    first = view.download.data
    _download(view, tmp_path, "t.safetensors")
    assert view.download.data != first  # the same bytes again: still a change to send
    assert b64decode(first.split(",", 1)[1]) == b64decode(view.download.data.split(",", 1)[1])


def test_too_big_a_tree_is_refused_with_the_python_way(monkeypatch):
    from inspector.ui.session import checkpoint_files

    monkeypatch.setattr(checkpoint_files, "MAX_DOWNLOAD_BYTES", 8)
    with pytest.raises(inspector.InspectorError, match=r"inspector\.save\(tree, 'path\.npz'\)"):
        export_bytes({"w": np.ones(4, np.float32)}, "npz")
