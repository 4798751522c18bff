"""What the selected tree's file says beside its tensors, shown above the input tree.

A sharded checkpoint that disagrees with its index shows its problems in a warning (what did
not load, what is left over); a file with metadata (GGUF key/values: architecture, context
length, quantization version; a safetensors `__metadata__`) shows it in a folded card. Both
come from the `LoadedTree.info` the loaders attach (`inspector.file_info`); nothing here is
state of its own.
"""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui

from inspector.ui.session.formatting import plural, pre

MAX_PROBLEMS = 50
"""Problem lines shown; the rest are counted."""


class FileInfoView(pn.viewable.Viewer):
    """The selected input tree's file problems (a warning) and metadata (a folded card)."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        # a long list scrolls inside the alert, so the tree stays in view
        self._problems = pn.pane.HTML("", sizing_mode="stretch_width", margin=0,
                                      styles={"max-height": "220px", "overflow-y": "auto"})
        self.alert = pmui.Alert(
            self._problems, severity="warning", title="", sizing_mode="stretch_width",
            visible=False, margin=(5, 5), css_classes=["file-problems"])
        self._metadata = pn.pane.HTML("", sizing_mode="stretch_width", margin=0,
                                      styles={"max-height": "320px", "overflow-y": "auto"})
        self.card = pmui.Card(
            self._metadata, title="File metadata", collapsed=True, visible=False,
            sizing_mode="stretch_width", margin=(5, 5), css_classes=["file-metadata"])
        self._layout = pmui.Column(self.alert, self.card, sizing_mode="stretch_width", margin=0,
                                   visible=False)
        state.param.watch(self._update, ["selected", "trees"])
        self._update()

    def __panel__(self):
        return self._layout

    @property
    def info(self):
        """The `FileInfo` of the selected tree, or None."""
        loaded = self._state.trees.get(self._state.selected)
        return None if loaded is None else getattr(loaded, "info", None)

    def _update(self, *_):
        info = self.info
        problems = list(info.problems) if info is not None else []
        lines = info.lines() if info is not None else []
        if problems:
            shown = problems[:MAX_PROBLEMS]
            if len(problems) > MAX_PROBLEMS:
                shown.append(f"… and {len(problems) - MAX_PROBLEMS} more")
            self.alert.title = (f"{plural(len(problems), 'problem')} with this sharded "
                                "checkpoint (tensors it could not load were left out)")
            self._problems.object = pre("\n".join(shown), css_class="file-problem-lines")
        if lines:
            arch = info.metadata.get("general.architecture")
            kind = f"{info.format} · {arch}" if isinstance(arch, str) else info.format
            self.card.title = f"File metadata · {kind} · {plural(len(info.metadata), 'key')}"
            self._metadata.object = pre("\n".join(lines), css_class="file-metadata-lines")
        self.alert.visible = bool(problems)
        self.card.visible = bool(lines)
        self._layout.visible = bool(problems or lines)
