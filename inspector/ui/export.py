"""Downloading a tree: the selected tree or the result, as a safetensors or npz file."""

from __future__ import annotations

import asyncio
from base64 import b64encode

import panel as pn
import panel_material_ui as pmui

from inspector.ui.session.checkpoint_files import export_bytes, export_name
from inspector.ui.session.formatting import pre
from inspector.ui.session.state import error_text


class TreeDownload(pmui.FileDownload):
    """A `FileDownload` whose callback may fail (it returns None: nothing is sent), and whose
    every transfer reaches the browser as a change, so the same file downloads again."""

    def __init__(self, **params):
        self._sent = 0
        super().__init__(**params)

    def _sync_data(self, fileobj):
        if fileobj is None:
            return
        self._sent += 1
        b64 = b64encode(fileobj.getvalue()).decode("ascii")
        self._synced = True
        # The counter makes each payload new: an unchanged `data` would not be sent again.
        self.data = f"data:application/octet-stream;n={self._sent};base64,{b64}"
        self._transfers += 1


class ExportView(pn.viewable.Viewer):
    """Pick the selected tree or the result and a format; the button writes the file with
    `inspector.save` (in a worker thread) and the browser downloads it."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.source = pmui.RadioButtonGroup.from_param(
            state.param.export_source, options={"Selected tree": "input", "Result": "result"},
            label="", size="small", sizing_mode="stretch_width", margin=(0, 10))
        self.format = pmui.RadioButtonGroup.from_param(
            state.param.export_format, label="", size="small", sizing_mode="stretch_width",
            margin=(5, 10))
        self.download = TreeDownload(callback=self.write, filename="tree.safetensors",
                                     label="Download", icon="download",
                                     sizing_mode="stretch_width", margin=(5, 10))
        # Set after construction: passing `variant` to FileDownload's constructor warns
        # (PendingDeprecationWarning about button_style, panel 1.9.4 + pmui 0.16.6).
        self.download.variant = "outlined"
        self._error = pn.pane.HTML("", sizing_mode="stretch_width", margin=0)
        self.alert = pmui.Alert(self._error, severity="error", title="Could not save",
                                sizing_mode="stretch_width", visible=False, margin=(5, 10))
        state.param.watch(self._update, ["export_source", "export_format", "selected", "trees",
                                         "result", "result_name"])
        state.param.watch(self._update_error, "export_error")
        self._update()

    def __panel__(self):
        title = pmui.Typography("Download", variant="subtitle2", margin=(5, 10, 0, 10))
        return pmui.Column(title, self.source, self.format, self.download, self.alert,
                           sizing_mode="stretch_width")

    @property
    def filename(self) -> str | None:
        """The file name the download gets, or None when there is no such tree."""
        shown = self._state.shown(self._state.export_source)
        return None if shown is None else export_name(shown[0], self._state.export_format)

    def _update(self, *_):
        name = self.filename
        self.download.param.update(
            filename=name or "tree", disabled=name is None,
            label=f"Download {name}" if name else "Nothing to download yet")

    async def write(self):
        """The download's callback: the file's bytes, or None (and the reason in the state)."""
        state = self._state
        shown, fmt = state.shown(state.export_source), state.export_format
        if shown is None:
            state.export_error = "Nothing to download: load a tree or run an operation first."
            return None
        try:
            data = await asyncio.to_thread(export_bytes, shown[1], fmt)
        except Exception as exc:  # a leaf that is no array, a key with '.', ...: say which
            state.export_error = error_text(exc, state.file_root)
            return None
        state.export_error = ""
        return data

    def _update_error(self, *_):
        error = self._state.export_error
        self._error.object = pre(error, css_class="export-error") if error else ""
        self.alert.visible = bool(error)
