"""The stack form: which trees, in which order."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui

from inspector.ui.forms import form


@form("stack")
class StackForm(pn.viewable.Viewer):
    """Trees to stack along a new leading axis; the order is shown and can be changed."""

    def __init__(self, settings, state, **params):
        super().__init__(**params)
        self._settings, self._state = settings, state
        self.names = pmui.MultiChoice(label="Trees to stack", options=list(state.trees),
                                      value=list(settings.trees), sizing_mode="stretch_width")
        self.names.param.watch(self._on_names, "value")
        self._order = pmui.Column(sizing_mode="stretch_width", margin=0)
        state.param.watch(self._update_options, "trees")
        settings.param.watch(self._update_order, "trees")
        self._update_order()

    def __panel__(self):
        return pmui.Column(self.names, pmui.Typography("Stacking order (index on the new axis 0)",
                                                       variant="caption", margin=(0, 10)),
                           self._order, sizing_mode="stretch_width")

    def _update_options(self, *_):
        self.names.options = list(self._state.trees)

    def _on_names(self, event):
        if list(event.new) != list(self._settings.trees):
            self._settings.trees = list(event.new)

    def move(self, i: int, step: int) -> None:
        """Moves the `i`-th tree of the order by `step` places (-1 earlier, +1 later)."""
        self._settings.move(i, step)

    def _update_order(self, *_):
        names = list(self._settings.trees)
        if list(self.names.value) != names:
            self.names.value = names
        rows = []
        for i, name in enumerate(names):
            up = pmui.IconButton(icon="arrow_upward", size="small", disabled=i == 0,
                                 description=f"Move {name} earlier")
            down = pmui.IconButton(icon="arrow_downward", size="small",
                                   disabled=i == len(names) - 1,
                                   description=f"Move {name} later")
            up.on_click(lambda _, i=i: self.move(i, -1))
            down.on_click(lambda _, i=i: self.move(i, 1))
            rows.append(pmui.Row(
                pmui.Typography(f"[{i}]  {name}", variant="body2", align="center",
                                sizing_mode="stretch_width", margin=(0, 10)),
                up, down, sizing_mode="stretch_width", margin=0))
        self._order[:] = rows
