"""Uploads received in chunks straight into a temporary file, capped on the server.

panel-material-ui's `FileInput` sends a file as numbered chunks (`chunk_size` bytes each) over
the websocket, but keeps every chunk in memory until the last arrives, and only the browser
checks `max_file_size`: a client that skips the page's script can send any amount. Here each
chunk is written to a temporary file as it arrives and the upload is dropped (file removed,
`refused` set) the moment it passes `max_upload` bytes, arrives out of order or is abandoned.
A single websocket message is bounded by the server's `websocket_max_message_size`
(`MAX_MESSAGE_BYTES` when served by `inspector.ui.app.serve`).
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import panel_material_ui as pmui
import param

from inspector.ui.session.checkpoint_files import MAX_UPLOAD_BYTES, UPLOAD_PREFIX
from inspector.ui.session.formatting import human_bytes

CHUNK_BYTES = 4 * 2**20
"""Bytes per upload chunk (one websocket message each)."""

MAX_MESSAGE_BYTES = CHUNK_BYTES + 2**20
"""The served app's `websocket_max_message_size`: a chunk and its message header, no more."""


class UploadInput(pmui.FileInput):
    """A `FileInput` whose upload ends up as a temporary file (`received`), never in memory."""

    max_upload = param.Integer(default=MAX_UPLOAD_BYTES, bounds=(1, None), doc="""
        Most bytes one upload may send; enforced here, chunk by chunk, whatever the browser
        checked.""")

    received = param.Parameter(default=None, doc="""
        `(file name, path)` of the last completed upload; whoever takes it owns (removes)
        the file and its folder.""")

    refused = param.String(default="", doc="Why the last upload was dropped ('' if it was not).")

    def __init__(self, **params):
        params.setdefault("chunk_size", CHUNK_BYTES)
        params.setdefault("max_file_size", params.get("max_upload", MAX_UPLOAD_BYTES))
        super().__init__(**params)
        self._pending: dict | None = None
        self._done: tuple[str, Path] | None = None

    def _handle_msg(self, msg) -> None:
        if isinstance(msg, dict) and msg.get("status") == "error":  # the browser gave up
            self._drop("")
            return
        super()._handle_msg(msg)

    def _process_chunk(self, msg: dict) -> None:
        name = Path(str(msg.get("name") or "upload")).name or "upload"
        chunk, total, data = msg.get("chunk"), msg.get("total_chunks"), msg.get("data")
        if chunk == 1:
            self._drop("")  # a new upload replaces one left unfinished
            self.refused = ""
            folder = Path(tempfile.mkdtemp(prefix=UPLOAD_PREFIX))
            self._pending = {"name": name, "folder": folder, "path": folder / "upload",
                             "next": 1, "size": 0, "total": total,
                             "cleanup": weakref.finalize(self, shutil.rmtree, folder, True)}
            self._pending["file"] = open(self._pending["path"], "wb")  # noqa: SIM115
        pending = self._pending
        if pending is None:
            return  # the rest of a dropped upload
        if name != pending["name"] or chunk != pending["next"] or total != pending["total"]:
            self._drop(f"Cannot upload {name}: its chunks arrived out of order.")
            return
        data = bytes(data or b"")
        pending["size"] += len(data)
        if pending["size"] > self.max_upload:
            self._drop(f"Cannot upload {name}: it is more than the {human_bytes(self.max_upload)}"
                       f" an upload may be.\nPut it inside the app's root folder and open it with "
                       f"the file picker.")
            return
        pending["file"].write(data)
        pending["next"] += 1
        if chunk == total:
            pending["file"].close()
            pending["cleanup"].detach()  # the receiver owns the file now
            self._done = (pending["name"], pending["path"])
            self._pending = None

    def _flush_buffer(self) -> None:
        done, self._done = self._done, None
        if done is not None:
            self.param.update(refused="", received=done)

    def _drop(self, reason: str) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending["file"].close()
            pending["cleanup"]()
        if reason:
            self.refused = reason
