"""The operation column: one form per op in tabs, a live preview, and the run controls."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui

from inspector.ui.formatting import pre
from inspector.ui.index_form import IndexForm
from inspector.ui.operations import OPS
from inspector.ui.stack_form import StackForm, UnstackForm
from inspector.ui.weighted_sum_form import WeightedSumForm


class OperationPanel(pn.viewable.Viewer):
    """Pick an op, fill its form, see what it will give (dtypes, shapes, errors), run it."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.weighted_sum = WeightedSumForm(state)
        self.index = IndexForm(state)
        self.stack = StackForm(state)
        self.unstack = UnstackForm(state)
        self._ops = list(OPS)
        self.tabs = pmui.Tabs(*[(OPS[op], form) for op, form in zip(
            self._ops, (self.weighted_sum, self.index, self.stack, self.unstack), strict=True)],
            active=self._ops.index(state.op), sizing_mode="stretch_width", margin=(0, 0),
            dynamic=True)
        self.tabs.param.watch(self._on_tab, "active")
        self.preview = pn.pane.HTML("", sizing_mode="stretch_width", margin=(5, 10))
        self.form_error = pn.pane.HTML("", sizing_mode="stretch_width", margin=(5, 10),
                                       visible=False)
        self.run_button = pmui.Button.from_param(
            state.param.run, label="Run", icon="play_arrow", variant="contained",
            color="primary", width=110, align="center")
        self._repeats = pmui.IntInput.from_param(state.param.repeats, label="timed runs",
                                                 width=100, size="small")
        self._eager = pmui.Switch.from_param(state.param.compare_eager,
                                             label="time eager jax.tree.map too", align="center")
        self.progress = pmui.LinearProgress(variant="indeterminate", visible=state.param.busy,
                                            sizing_mode="stretch_width", margin=(0, 10))
        self.status = pmui.Typography(state.param.status, variant="caption", margin=(0, 10))
        state.param.watch(self._update_preview, ["preview", "form_error"])
        state.param.watch(self._update_tab, "op")
        self._update_preview()

    def __panel__(self):
        return pmui.Column(
            self.tabs,
            pmui.Typography("Before running", variant="overline", margin=(10, 10, 0, 10)),
            self.preview, self.form_error,
            pmui.Row(self.run_button, self._repeats, margin=(5, 0)),
            self._eager, self.progress, self.status, sizing_mode="stretch_width")

    def _on_tab(self, event):
        op = self._ops[event.new]
        if op != self._state.op:
            self._state.op = op

    def _update_tab(self, *_):
        active = self._ops.index(self._state.op)
        if self.tabs.active != active:
            self.tabs.active = active

    def _update_preview(self, *_):
        state = self._state
        self.preview.object = pre(state.preview, css_class="op-preview") if state.preview else ""
        self.form_error.object = pre(state.form_error, "var(--mui-palette-error-main, #d32f2f)",
                                     "form-error") if state.form_error else ""
        self.form_error.visible = bool(state.form_error)
