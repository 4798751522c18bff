"""`OpenState`: opening checkpoints into a session: files under its root, uploads, URLs.

Part of the session state (`InspectorState.open`): the file picker sets these params; the
reading runs in the session's worker (`checkpoint_files`), the trees read are added to the
session and the first selected. A failure is shown in `open_error` (the picker), and every
tree loaded before stays.
"""

from __future__ import annotations

import param

from inspector.ui.session.formatting import human_bytes
from inspector.ui.session.worker import Task


class OpenState(param.Parameterized):
    """What the file picker opens, and why the last open failed."""

    open_paths = param.List(default=[], doc="Checkpoint files or folders to open (in the "
                            "session's file_root).")
    open_error = param.String(default="", doc="Why the last open or upload failed ('' after "
                              "a success); the trees already loaded stay.")
    remote_prefixes = param.List(default=None, allow_None=True, doc="URL prefixes `open_url` "
                                 "may open ([]: any URL); None: URLs are refused (a served app "
                                 "without --allow-remote).")
    open_url_text = param.String(default="", doc="The checkpoint URL `open_url` opens.")
    open_url = param.Event(doc="Opens `open_url_text` (structure only), if URLs are allowed.")
    open_files = param.Event(doc="Open the checkpoints in `open_paths`.")

    def __init__(self, session, worker, **params):
        super().__init__(**params)
        self._session, self._worker = session, worker

    @param.depends("open_files", watch=True)
    def _on_open_files(self):
        from inspector.ui.session.checkpoint_files import open_checkpoints

        paths, root = list(self.open_paths), self._session.file_root
        self._open(f"Opening {len(paths)} checkpoint(s) …", lambda: open_checkpoints(root, paths))

    @param.depends("open_url", watch=True)
    def _on_open_url(self):
        from inspector.ui.session.checkpoint_files import open_remote

        url, prefixes = self.open_url_text, self.remote_prefixes
        self._open("Opening the URL …", lambda: [open_remote(url, prefixes, self.read_progress)])

    def open_upload(self, filename: str, data) -> None:
        """Loads an uploaded checkpoint (bytes, or the temporary file `UploadInput` received),
        named by its file name, off the event loop."""
        from inspector.ui.session.checkpoint_files import open_upload

        self._open(f"Reading {filename} …", lambda: [open_upload(filename, data)])

    def read_progress(self, progress) -> None:
        """Shows a remote read's progress (bytes / total, rate) as the status; called by the
        reading thread."""
        self._worker.progress(
            progress.done, progress.total,
            f"Reading {progress.source}: {human_bytes(progress.done)} / "
            f"{human_bytes(progress.total)}, {human_bytes(progress.rate)}/s")

    def _open(self, status: str, work) -> None:
        def done(loaded):
            names = [self._session.add(t) for t in loaded]
            self._session.selected = names[0]
            self.param.update(open_paths=[], open_error="")

        def failed(text):  # the picker shows it; every tree loaded before stays
            self.open_error = text

        self._worker.submit("opening", Task(status, work, done, failed))
