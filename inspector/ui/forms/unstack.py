"""The unstack form: which tree to split along its leading axis."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui

from inspector.ui.forms import form


@form("unstack")
class UnstackForm(pn.viewable.Viewer):
    """The tree to split along axis 0 into a list of trees (the inverse of stack)."""

    def __init__(self, settings, state, **params):
        super().__init__(**params)
        self._settings, self._state = settings, state
        self.tree = pmui.Select(label="Tree to unstack", options=list(state.trees),
                                value=settings.tree or None, sizing_mode="stretch_width")
        self.tree.param.watch(self._on_tree, "value")
        state.param.watch(self._update, "trees")
        settings.param.watch(self._update, "tree")

    def __panel__(self):
        return pmui.Column(self.tree, pmui.Typography(
            "Every leaf is split along its leading axis; all leaves need the same size there.",
            variant="caption", margin=(0, 10)), sizing_mode="stretch_width")

    def _on_tree(self, event):
        if event.new and event.new != self._settings.tree:
            self._settings.tree = event.new

    def _update(self, *_):
        self.tree.param.update(options=list(self._state.trees),
                               value=self._settings.tree or None)
