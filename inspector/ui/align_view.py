"""The *Align a onto b* section of the Compare view: port one tree onto another's layout.

A table of every target leaf with its source, transform, score and reason (unmatched and
ambiguous rows first, highlighted; paginated on the server, so a 100,000-leaf alignment sends
one page), an editor for the selected row (its source picked from a searchable list of the
unused source leaves), *Convert* (adds the ported tree and compares it with b, values
included), and the mapping as JSON or as a NumPy function to download. The state is
`AlignState` (`ui/session/align_state.py`); this view only shows it and sets it.
"""

from __future__ import annotations

import asyncio
import io

import panel as pn
import panel_material_ui as pmui

from inspector.ui.export import TreeDownload
from inspector.ui.next_tick import next_tick
from inspector.ui.session.align_state import AMBIGUOUS, PAIRED, UNMATCHED, align_state
from inspector.ui.session.formatting import pre

_PILL = {status: (f"<span class='align-{status}' style='background:var(--mui-palette-{color}"
                  f"-main);color:#fff;border-radius:10px;padding:1px 8px;font-size:12px'>"
                  f"{status}</span>")
         for status, color in ((UNMATCHED, "error"), (AMBIGUOUS, "warning"))}
_PILL[PAIRED] = "<span class='align-paired' style='font-size:12px'>paired</span>"

_HINT = ("Ports tree **a** (e.g. a PyTorch state dict) to the key paths and layouts of tree "
         "**b** (e.g. your Flax model's parameters): every leaf of b gets its source leaf in a "
         "and the transpose or reshape that fits it.")


class AlignView(pn.viewable.Viewer):
    """Align a onto b, check and fix the pairs, convert, download the mapping."""

    page_size = 15

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.align = align_state(state)
        self.align_button = pmui.Button(label="Align a onto b", icon="compare_arrows",
                                        variant="contained", margin=(5, 10))
        self.align_button.on_click(lambda _: self.start())
        self.convert_button = pmui.Button(label="Convert", icon="transform",
                                          variant="outlined", margin=(5, 10), disabled=True)
        self.convert_button.on_click(lambda _: self.align.param.trigger("convert"))
        self.json_download = self._download("alignment.json", "Mapping as JSON",
                                            self.align.json_bytes)
        self.code_download = self._download("port_weights.py", "Mapping as code",
                                            self.align.code_bytes)
        self.summary = pmui.Typography("", variant="body2", margin=(5, 10))
        self._error = pn.pane.HTML("", sizing_mode="stretch_width", margin=0)
        self.alert = pmui.Alert(self._error, severity="error", title="Porting",
                                sizing_mode="stretch_width", visible=False, margin=(5, 10))
        self.table = pn.widgets.Tabulator(
            value=None, pagination="remote", page_size=self.page_size, show_index=False,
            disabled=True, selectable=1, sizing_mode="stretch_width", layout="fit_columns",
            header_align="left", formatters={"status": {"type": "html"},
                                             "reason": {"type": "textarea"}},
            widths={"status": "7%", "target": "29%", "source": "29%", "transform": "11%",
                    "score": "6%", "reason": "18%"},
            configuration={"columnDefaults": {"tooltip": True}},
            titles={"target": "target (b)", "source": "source (a)"}, visible=False)
        self.table.param.watch(self._on_selection, "selection")
        self.editing = pmui.Typography("", variant="body2", margin=(5, 10))
        self.source_picker = pmui.AutocompleteInput(
            label="Source leaf (type to search the unused ones)", options=[],
            search_strategy="includes", min_characters=0, case_sensitive=False,
            sizing_mode="stretch_width", margin=(5, 10))
        self.pair_button = pmui.Button(label="Use this source", icon="link", variant="outlined",
                                       margin=(5, 10), align="end")
        self.pair_button.on_click(lambda _: self.pair())
        self.editor = pmui.Row(self.source_picker, self.pair_button, sizing_mode="stretch_width",
                               visible=False, margin=0)
        self.align.param.watch(next_tick(self._update_table), ["alignment"])
        self.align.param.watch(self._update_error, ["error"])
        self.align.param.watch(self._update_editor, ["selected", "alignment"])
        state.param.watch(self._update_buttons, ["trees", "busy"])
        state.compare.param.watch(self._update_buttons, ["diff_a", "diff_b"])
        self._update_buttons()
        self._update_table()
        self._update_error()

    def __panel__(self):
        buttons = pmui.Row(self.align_button, self.convert_button, self.json_download,
                           self.code_download, margin=0)
        return pmui.Column(
            pmui.Typography("Port a onto b", variant="h6", margin=(15, 10, 0, 10)),
            pmui.Typography(_HINT, variant="body2", margin=(0, 10)), buttons, self.summary,
            self.alert, self.table, self.editing, self.editor, sizing_mode="stretch_width",
            css_classes=["align-view"])

    def _download(self, filename: str, label: str, make) -> TreeDownload:
        async def callback():  # off the event loop: 100,000 pairs take a second or more
            data = await asyncio.to_thread(make)
            return io.BytesIO(data) if data else None

        download = TreeDownload(callback=callback, filename=filename, label=label,
                                icon="download", margin=(5, 10), disabled=True)
        download.variant = "text"  # after construction: see ExportView
        return download

    # Actions ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Aligns the Compare view's a (source) onto its b (target)."""
        c = self._state.compare
        self.align.param.update(source=c.diff_a, target=c.diff_b)
        self.align.param.trigger("align")

    def pair(self) -> None:
        """Pairs the selected row with the source picked in the editor."""
        if self.align.selected and self.source_picker.value:
            self.align.override(self.align.selected, self.source_picker.value)

    def _on_selection(self, event):
        frame = self.table.value
        if event.new and frame is not None:
            self.align.selected = str(frame["target"].iloc[event.new[0]])

    # Updates ----------------------------------------------------------------------------------

    def _update_buttons(self, *_):
        s = self._state
        a, b = s.compare.diff_a, s.compare.diff_b
        self.align_button.disabled = not (a in s.trees and b in s.trees and a != b)
        self.align_button.label = (f"Align {a} onto {b}"
                                   if not self.align_button.disabled else "Align a onto b")
        a = self.align.alignment
        self.convert_button.disabled = a is None or not a.complete or s.busy

    def _update_table(self, *_):
        frame = self.align.frame()
        a = self.align.alignment
        self.summary.object = self.align.summary()
        for download in (self.json_download, self.code_download):
            download.disabled = a is None
        self._update_buttons()
        if frame is None:
            self.table.visible = False
            return
        page = self.table.page if self.table.value is not None else 1
        shown = frame.assign(status=frame["status"].map(_PILL))
        self.table.param.update(value=shown, visible=True, selection=[],
                                page=min(page, max(1, -(-len(frame) // self.page_size))))

    def _update_editor(self, *_):
        target = self.align.selected
        if not target or self.align.alignment is None:
            self.editor.visible = False
            self.editing.object = ""
            return
        options = self.align.candidates(target)
        pair = self.align.alignment.pair(target)
        now = f"now from {pair.source} ({pair.transform})" if pair else "no source yet"
        self.editing.object = f"Editing {target}: {now}."
        self.source_picker.param.update(options=options, value=None)
        self.editor.visible = True

    def _update_error(self, *_):
        error = self.align.error
        self._error.object = pre(error, css_class="align-error") if error else ""
        self.alert.visible = bool(error)

