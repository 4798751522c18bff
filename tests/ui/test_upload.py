"""Uploads arrive as chunks into a temporary file, and the server drops one past the cap.

The messages are those panel-material-ui's FileInput script sends over the websocket
(`processFilesChunked` in its utils.js): "initializing", one "upload_event" per chunk
(1-based `chunk`, `total_chunks`, the bytes), then "finished". A client that skips the page's
script can send anything, so the cap is checked here, chunk by chunk.
"""

from __future__ import annotations

import glob
import os
import tempfile

import numpy as np

import inspector
from inspector.ui.file_picker import FileOpener
from inspector.ui.session.checkpoint_files import UPLOAD_PREFIX
from inspector.ui.upload import UploadInput


def _send(widget: UploadInput, name: str, data: bytes, chunk_size: int, total=None,
          order=None) -> None:
    chunks = [data[i : i + chunk_size] for i in range(0, len(data), chunk_size)] or [b""]
    total = len(chunks) if total is None else total
    widget._handle_msg({"status": "initializing", "type": "status"})
    for i in order or range(len(chunks)):
        widget._handle_msg({"type": "status", "status": "upload_event", "chunk": i + 1,
                            "data": chunks[i], "name": name, "total_chunks": total,
                            "mime_type": ""})
    widget._handle_msg({"status": "finished", "type": "status"})


def _upload_folders() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), UPLOAD_PREFIX + "*")))


def test_chunks_are_written_to_a_temporary_file_as_they_arrive():
    widget = UploadInput(max_upload=1000, chunk_size=64)
    data = bytes(range(256)) * 2
    _send(widget, "../../weights.bin", data, 64)
    name, path = widget.received
    assert name == "weights.bin" and path.read_bytes() == data  # the name's last part only
    assert widget.value is None and widget._pending is None  # nothing held in memory
    assert path.parent.name.startswith(UPLOAD_PREFIX)
    path.unlink()
    path.parent.rmdir()


def test_an_upload_past_the_cap_is_dropped_while_it_arrives():
    before = _upload_folders()
    widget = UploadInput(max_upload=100, chunk_size=64)
    _send(widget, "big.npz", bytes(64 * 50), 64)  # a client ignoring max_file_size
    assert widget.received is None
    assert widget.refused.startswith("Cannot upload big.npz: it is more than the 100 B an "
                                     "upload may be.")
    assert _upload_folders() == before  # the partial file is gone, the later chunks ignored


def test_an_upload_lying_about_its_chunks_is_dropped():
    before = _upload_folders()
    widget = UploadInput(max_upload=1000, chunk_size=8)
    _send(widget, "w.npz", bytes(32), 8, order=[0, 2, 1, 3])
    assert widget.received is None
    assert widget.refused == "Cannot upload w.npz: its chunks arrived out of order."
    assert _upload_folders() == before


def test_an_upload_the_browser_abandons_leaves_nothing():
    before = _upload_folders()
    widget = UploadInput(max_upload=1000, chunk_size=8)
    widget._handle_msg({"type": "status", "status": "upload_event", "chunk": 1,
                        "data": bytes(8), "name": "w.npz", "total_chunks": 3, "mime_type": ""})
    assert len(_upload_folders() - before) == 1
    widget._handle_msg({"status": "error", "error": "cancelled", "type": "status"})
    assert _upload_folders() == before and widget.refused == ""


def test_a_received_upload_opens_as_a_tree_and_its_file_is_removed(session, tmp_path):
    before = _upload_folders()
    model = {"dense": {"kernel": np.arange(12, dtype=np.float32).reshape(4, 3)}}
    inspector.save(model, tmp_path / "model.safetensors")
    opener = FileOpener(session)
    _send(opener.upload, "model.safetensors", (tmp_path / "model.safetensors").read_bytes(), 50)
    assert session.open.open_error == ""
    assert list(session.trees) == ["kept", "model.safetensors"]
    kernel = inspector.PackedTree.unpack(session.trees["model.safetensors"].tree)
    np.testing.assert_array_equal(np.asarray(kernel["dense"]["kernel"]),
                                  model["dense"]["kernel"])
    assert _upload_folders() == before


def test_a_refused_upload_is_shown_and_keeps_the_trees(session):
    opener = FileOpener(session)
    opener.upload.max_upload = 10
    _send(opener.upload, "big.npz", bytes(100), 8)
    assert session.open.open_error.startswith("Cannot upload big.npz: it is more than the 10 B")
    assert opener.alert.visible and list(session.trees) == ["kept"]


def test_an_uploaded_decompression_bomb_is_refused_by_name(session):
    import pathlib

    bomb = pathlib.Path(__file__).parents[1] / "io" / "hostile" / "npz_deflate_bomb.npz"
    opener = FileOpener(session)
    _send(opener.upload, "bomb.npz", bomb.read_bytes(), 2**16)
    assert session.open.open_error.startswith(
        "Cannot load bomb.npz: it would inflate 335544448 bytes")
    assert UPLOAD_PREFIX not in session.open.open_error and list(session.trees) == ["kept"]


def test_make_serve_bounds_websocket_messages_as_the_launcher_does():
    import pathlib
    import re

    from inspector.ui.upload import CHUNK_BYTES, MAX_MESSAGE_BYTES

    makefile = (pathlib.Path(__file__).parents[2] / "Makefile").read_text()
    (size,) = re.findall(r"--websocket-max-message-size (\d+)", makefile)
    assert int(size) == MAX_MESSAGE_BYTES > CHUNK_BYTES
