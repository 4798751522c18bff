"""The run status: a `role="status"` live region announcing each finished run (op and ms)."""

from __future__ import annotations

import html

import panel as pn


def status_html(text: str) -> str:
    """The live region's markup: screen readers announce its text when it changes."""
    return (f'<div role="status" aria-live="polite" aria-atomic="true" class="run-status" '
            f'style="font-size:13px;min-height:1.4em">{html.escape(text)}</div>')


class RunStatus(pn.viewable.Viewer):
    """`weighted_sum finished in 123.4 ms on cpu:0`: the state's `run_status`, announced."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.pane = pn.pane.HTML(status_html(state.run_status), sizing_mode="stretch_width",
                                 margin=(0, 10))
        state.param.watch(self._update, "run_status")

    def __panel__(self):
        return self.pane

    def _update(self, event):
        self.pane.object = status_html(event.new)
