"""The operation column: one form per op in tabs, a live preview, and the run controls.

The tabs come from the registries: every op's settings (`session/ops/`) with its form
(`forms/`), in the settings' `position` order.
"""

from __future__ import annotations

from collections.abc import Mapping

import panel as pn
import panel_material_ui as pmui

from inspector.ui.forms import forms
from inspector.ui.session.formatting import pre

PROGRESS_DELAY = 0.5
"""Seconds a task runs before the progress bar shows (unless it reports how far it is)."""


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
        self.forms = _Forms(classes, state)
        self._ops = list(self.forms)
        # Each tab holds its form once first shown: a session builds the forms it uses.
        self._holders = {op: pmui.Column(sizing_mode="stretch_width", margin=0)
                         for op in self._ops}
        self.tabs = pmui.Tabs(*[(state.ops[op].title, self._holders[op]) for op in self._ops],
                              active=self._ops.index(state.op), sizing_mode="stretch_width",
                              margin=(0, 0), dynamic=True)
        self._show_form(state.op)
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
        self.progress = pmui.LinearProgress(variant="indeterminate", visible=False,
                                            sizing_mode="stretch_width", margin=(0, 10))
        self.status = pmui.Typography(state.param.status, variant="caption", margin=(0, 10))
        self._busy_since = 0  # counts the busy spells: a late show is for the spell it began
        state.param.watch(self._update_busy, "busy")
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

    def _show_form(self, op: str) -> None:
        holder = self._holders[op]
        if not len(holder):
            holder.append(self.forms[op])

    def _on_tab(self, event):
        op = self._ops[event.new]
        self._show_form(op)
        if op != self._state.op:
            self._state.op = op

    def _update_tab(self, *_):
        active = self._ops.index(self._state.op)
        self._show_form(self._state.op)
        if self.tabs.active != active:
            self.tabs.active = active

    def _update_busy(self, event):
        # The bar shows once a task has run for `PROGRESS_DELAY` (or says how far it is): an
        # animated bar is redrawn every frame, and a browser on the server's machine drawing
        # it took 0.2 of a core from a 0.3 s run; the status line and the disabled Run button
        # say "running" at once.
        self._busy_since += 1
        if not event.new:
            self.progress.visible = False
            return
        spell = self._busy_since

        def show():
            if spell == self._busy_since and self._state.busy:
                self.progress.visible = True

        self._state.worker.later(PROGRESS_DELAY, show)

    def _update_progress(self, event):
        # Determinate while the work can tell how far it is (a streamed run), else indeterminate.
        if event.new is not None and self._state.busy:
            self.progress.visible = True
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


class _Forms(Mapping):
    """Each op's form by op name, built when first asked for."""

    def __init__(self, classes: dict, state):
        self._classes, self._state, self._built = classes, state, {}

    def __getitem__(self, op: str):
        if op not in self._built:
            self._built[op] = self._classes[op](self._state.ops[op], self._state)
        return self._built[op]

    def __contains__(self, op) -> bool:
        return op in self._state.ops

    def __iter__(self):
        return iter(self._state.ops)

    def __len__(self) -> int:
        return len(self._state.ops)
