"""Opening checkpoints: a file picker over the server's disk (inside the root only) and uploads."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui
import param

from inspector.ui.session.checkpoint_files import MAX_UPLOAD_BYTES, REMOTE_ENV
from inspector.ui.session.formatting import human_bytes, pre
from inspector.ui.text_input import EnterInput
from inspector.ui.upload import UploadInput


class FileOpener(pn.viewable.Viewer):
    """Opens checkpoint files and orbax folders from inside `state.file_root` (the launcher's
    `--root`), and small files uploaded from the browser. Opening reads headers only; a file
    that fails shows why and every tree already loaded stays."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.picker = None
        if state.file_root:
            self.picker = pmui.FileSelector(
                directory=state.file_root, root_directory=state.file_root, size=6,
                sizing_mode="stretch_width", margin=(5, 10))
            self.picker.param.watch(self._on_pick, "value")
            state.open.param.watch(self._update_pick, "open_paths")
        self.open = pmui.Button.from_param(
            state.open.param.open_files, label="Open selected", icon="folder_open",
            variant="outlined",
            sizing_mode="stretch_width", disabled=state.param.busy)
        self.upload = UploadInput(
            label=f"Upload a file (up to {human_bytes(MAX_UPLOAD_BYTES)})", multiple=False,
            max_upload=MAX_UPLOAD_BYTES, variant="outlined", sizing_mode="stretch_width",
            margin=(5, 10))
        self.upload.param.watch(self._on_upload, "value")
        self.upload.param.watch(self._on_received, "received")
        self.upload.param.watch(self._on_refused, "refused")
        self.url = self.open_url = None
        if state.open.remote_prefixes is not None:
            # a URL the server fetches: only when the app was started allowing it
            self.url = EnterInput(
                label="Open URL", placeholder="https://…, s3://…, gs://…, hf://…",
                value=state.open.open_url_text, sizing_mode="stretch_width", margin=(5, 10))
            self.url.param.watch(self._on_url, ["value", "value_input"])
            self.url.param.watch(lambda _: state.open.param.trigger("open_url"), "enter_pressed")
            # Off until the server holds the typed URL: the page sends the text after it
            # redraws the field, a click at once, so a quick click could open the old text.
            self.open_url = pmui.Button.from_param(
                state.open.param.open_url, label="Open URL", icon="cloud_download",
                variant="outlined", sizing_mode="stretch_width",
                disabled=param.bind(lambda busy, text: busy or not text.strip(),
                                    state.param.busy, state.open.param.open_url_text))
        self._error = pn.pane.HTML("", sizing_mode="stretch_width", margin=0)
        self.alert = pmui.Alert(self._error, severity="error", title="Could not open",
                                sizing_mode="stretch_width", visible=False, margin=(5, 10))
        state.open.param.watch(self._update_error, "open_error")

    def __panel__(self):
        title = pmui.Typography("Open a checkpoint", variant="subtitle2", margin=(5, 10, 0, 10))
        parts = [title]
        if self.picker is not None:
            parts += [
                pmui.Typography("Click files or orbax folders to select them; double-click a "
                                "folder to enter it.", variant="caption", margin=(0, 10)),
                self.picker, self.open]
        parts.append(self.upload)
        parts += self._url_parts()
        parts.append(self.alert)
        return pmui.Column(*parts, sizing_mode="stretch_width")

    def _url_parts(self) -> list:
        prefixes = self._state.open.remote_prefixes
        if prefixes is None:
            off = ("Opening URLs is off. Start the app with --allow-remote (or "
                   f"{REMOTE_ENV}=1) to open http(s)://, s3://, gs:// and hf:// checkpoints.")
            return [pmui.Typography(off, variant="caption", margin=(5, 10),
                                    css_classes=["remote-off"])]
        parts = [self.url, self.open_url]
        if prefixes:
            parts.append(pmui.Typography(f"Only URLs starting with {', '.join(prefixes)}.",
                                         variant="caption", margin=(0, 10)))
        # what a remote read is doing (bytes / total, rate), while it runs
        parts.append(pmui.Typography(self._state.param.status, variant="caption",
                                     margin=(0, 10), visible=self._state.param.busy,
                                     css_classes=["open-status"]))
        return parts

    def _on_url(self, event):
        self._state.open.open_url_text = event.new or ""

    def _on_pick(self, event):
        self._state.open.open_paths = [str(p) for p in event.new]

    def _update_pick(self, *_):
        if [str(p) for p in self.picker.value] != self._state.open.open_paths:
            self.picker.value = list(self._state.open.open_paths)

    def _on_upload(self, event):
        if event.new is None:
            return
        data, filename = event.new, self.upload.filename
        self.upload.clear()  # the same file may be uploaded again
        self._state.open.open_upload(filename, data)

    def _on_received(self, event):
        if event.new is not None:
            filename, path = event.new
            self._state.open.open_upload(filename, path)

    def _on_refused(self, event):
        if event.new:
            self._state.open.open_error = event.new

    def _update_error(self, *_):
        error = self._state.open.open_error
        self._error.object = pre(error, css_class="open-error") if error else ""
        self.alert.visible = bool(error)
