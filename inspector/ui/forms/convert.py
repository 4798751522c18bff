"""The convert form: the tree to convert, the tree whose structure it takes, and whether
target leaves with no source may be left out."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui

from inspector.ui.forms import form


@form("convert")
class ConvertForm(pn.viewable.Viewer):
    """Source and target trees (pairs found by `inspector.align`; fixed by hand in Align)."""

    def __init__(self, settings, state, **params):
        super().__init__(**params)
        self._settings, self._state = settings, state
        self.source = pmui.Select(label="Tree to convert", options=list(state.trees),
                                  value=settings.tree or None, sizing_mode="stretch_width")
        self.target = pmui.Select(label="Onto the structure of", options=list(state.trees),
                                  value=None, sizing_mode="stretch_width")
        self.allow_missing = pmui.Checkbox.from_param(
            settings.param.allow_missing, label="Leave out target leaves with no source")
        self.source.param.watch(lambda e: self._set("tree", e.new), "value")
        self.target.param.watch(lambda e: self._set("target", e.new), "value")
        state.param.watch(self._update, "trees")
        settings.param.watch(self._update, ["tree", "target"])
        self._update()

    def __panel__(self):
        return pmui.Column(self.source, self.target, self.allow_missing, pmui.Typography(
            "Each target leaf takes its source leaf by name, transposed or reshaped to the "
            "target's layout and cast to its dtype. To pair leaves by hand, use Align.",
            variant="caption", margin=(0, 10)), sizing_mode="stretch_width")

    def _set(self, name: str, value) -> None:
        if value and value != getattr(self._settings, name):
            setattr(self._settings, name, value)

    def _update(self, *_):
        names, settings = list(self._state.trees), self._settings
        if not settings.target:  # a target is needed: the first other tree, as shown
            settings.target = next((n for n in names if n != settings.tree), "")
        self.source.param.update(options=names, value=settings.tree or None)
        self.target.param.update(options=names, value=settings.target or None)
