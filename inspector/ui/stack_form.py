"""The stack and unstack forms: which trees, in which order; which tree to split."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui


class StackForm(pn.viewable.Viewer):
    """Trees to stack along a new leading axis; the order is shown and can be changed."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.names = pmui.MultiChoice(label="Trees to stack", options=list(state.trees),
                                      value=list(state.stack_names), sizing_mode="stretch_width")
        self.names.param.watch(self._on_names, "value")
        self._order = pmui.Column(sizing_mode="stretch_width", margin=0)
        state.param.watch(self._update_options, "trees")
        state.param.watch(self._update_order, "stack_names")
        self._update_order()

    def __panel__(self):
        return pmui.Column(self.names, pmui.Typography("Stacking order (index on the new axis 0)",
                                                       variant="caption", margin=(0, 10)),
                           self._order, sizing_mode="stretch_width")

    def _update_options(self, *_):
        self.names.options = list(self._state.trees)

    def _on_names(self, event):
        if list(event.new) != list(self._state.stack_names):
            self._state.stack_names = list(event.new)

    def move(self, i: int, step: int) -> None:
        """Moves the `i`-th tree of the order by `step` places (-1 earlier, +1 later)."""
        names = list(self._state.stack_names)
        j = i + step
        if 0 <= i < len(names) and 0 <= j < len(names):
            names[i], names[j] = names[j], names[i]
            self._state.stack_names = names

    def _update_order(self, *_):
        names = list(self._state.stack_names)
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


class UnstackForm(pn.viewable.Viewer):
    """The tree to split along axis 0 into a list of trees (the inverse of stack)."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.tree = pmui.Select(label="Tree to unstack", options=list(state.trees),
                                value=state.selected or None, sizing_mode="stretch_width")
        self.tree.param.watch(self._on_tree, "value")
        state.param.watch(self._update, ["trees", "selected"])

    def __panel__(self):
        return pmui.Column(self.tree, pmui.Typography(
            "Every leaf is split along its leading axis; all leaves need the same size there.",
            variant="caption", margin=(0, 10)), sizing_mode="stretch_width")

    def _on_tree(self, event):
        if event.new and event.new != self._state.selected:
            self._state.selected = event.new

    def _update(self, *_):
        self.tree.param.update(options=list(self._state.trees),
                               value=self._state.selected or None)
