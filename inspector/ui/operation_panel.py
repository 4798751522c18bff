"""The operation column: one form per op in tabs, a live preview, and the run controls.

The tabs come from the registries: every op's settings (`session/ops/`) with its form
(`forms/`), in the settings' `position` order.
"""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui

from inspector.ui.forms import forms
from inspector.ui.session.formatting import pre


class OperationPanel(pn.viewable.Viewer):
    """Pick an op, fill its form, see what it will give (dtypes, shapes, errors), run it."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        classes = forms()
        missing = [op for op in state.ops if op not in classes]
        if missing:
            raise TypeError(f"No form for the ops {', '.join(missing)}: add one to "
                            "inspector/ui/forms/.")
        self.forms = {op: classes[op](settings, state) for op, settings in state.ops.items()}
        self._ops = list(self.forms)
        self.tabs = pmui.Tabs(*[(state.ops[op].title, f) for op, f in self.forms.items()],
                              active=self._ops.index(state.op), sizing_mode="stretch_width",
                              margin=(0, 0), dynamic=True)
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
        state.param.watch(self._update_progress, "progress")
        state.param.watch(self._update_preview, ["preview", "form_error"])
        state.param.watch(self._update_tab, "op")
        self._update_preview()

    def __getattr__(self, op: str):
        # `panel.weighted_sum` is the weighted sum's form (tests and scripts reach in so)
        forms = self.__dict__.get("forms", {})
        if op in forms:
            return forms[op]
        raise AttributeError(op)

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

    def _update_progress(self, event):
        # Determinate while the work can tell how far it is (a streamed run), else indeterminate.
        if event.new is None:
            self.progress.param.update(variant="indeterminate", value=0)
        else:
            self.progress.param.update(variant="determinate", value=event.new)

    def _update_preview(self, *_):
        state = self._state
        self.preview.object = pre(state.preview, css_class="op-preview") if state.preview else ""
        self.form_error.object = pre(state.form_error, "var(--mui-palette-error-main, #d32f2f)",
                                     "form-error") if state.form_error else ""
        self.form_error.visible = bool(state.form_error)
