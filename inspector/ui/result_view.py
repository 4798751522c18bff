"""The result column: the last error (if any), the result tree, its timing, and the history."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui

from inspector.ui.code_snippet import CodeSnippetView
from inspector.ui.history_view import HistoryView
from inspector.ui.session.formatting import pre
from inspector.ui.timing_card import TimingCard
from inspector.ui.tree_view import TreeView


class ErrorView(pn.viewable.Viewer):
    """The last failure, whole and monospace (the core's messages list every key path)."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self._text = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 0))
        self.alert = pmui.Alert(self._text, severity="error", title="The operation failed",
                                sizing_mode="stretch_width", visible=False, margin=(5, 5))
        state.param.watch(self._update, "error")
        self._update()

    def __panel__(self):
        return self.alert

    def _update(self, *_):
        error = self._state.error
        self._text.object = pre(error, css_class="run-error") if error else ""
        self.alert.visible = bool(error)


class ResultView(pn.viewable.Viewer):
    """The result tree beside its timing card; `keep result` makes it an input."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.error = ErrorView(state)
        self.tree = TreeView(state, source="result", title="Result")
        self.timing = TimingCard(state)
        self.code = CodeSnippetView(state)
        self.history = HistoryView(state)
        self.keep = pmui.Button.from_param(
            state.param.keep_result, label="Keep result as a tree", icon="add_circle_outline",
            variant="outlined", size="small",
            disabled=pn.bind(lambda r: r is None, state.param.result))

        # Built with the card (after the first paint): built at the first Run instead, they
        # made that Run cost 0.2-0.35 s of server time (most of it), which 20 sessions running
        # at once queued behind each other. The keep button and the timing card show with the
        # first result; the history is shown from the start (a table made inside a hidden
        # part stays empty when shown), its chart once there are runs.
        self._first = pmui.Column(self.keep, self.timing, sizing_mode="stretch_width",
                                  margin=0, visible=False)
        self._layout = pmui.Column(
            self.error, self.tree, self._first, self.code,
            pmui.Typography("Run history", variant="subtitle2", margin=(10, 10, 0, 10)),
            self.history, sizing_mode="stretch_width")
        state.param.watch(self._on_result, "result")
        self._on_result()

    def __panel__(self):
        return self._layout

    def _on_result(self, *_):
        if self._state.result is not None:
            self._first.visible = True
