"""The run status: a `role="status"` live region announcing each finished run (op and ms)."""

from __future__ import annotations

import panel as pn
import param
from panel.custom import JSComponent


class StatusLine(JSComponent):
    """A `role="status"` live region (screen readers announce its text when it changes), its
    text set in the browser.

    A new text is one property of one model. An HTML pane remakes all its properties (its
    stylesheets too) for each new text: 20-22 ms of the served page's event loop per status
    here (run marks), against 1-6 ms for this component; the status goes out first and
    alone, so that time was the page's wait."""

    text = param.String(default="", doc="The status shown.")

    _esm = """
    export function render({ model, el }) {
      const region = document.createElement("div")
      region.setAttribute("role", "status")
      region.setAttribute("aria-live", "polite")
      region.setAttribute("aria-atomic", "true")
      region.className = "run-status"
      region.style.fontSize = "13px"
      region.style.minHeight = "1.4em"
      region.textContent = model.text
      model.on("text", () => { region.textContent = model.text })
      el.append(region)
    }
    """


class RunStatus(pn.viewable.Viewer):
    """`weighted_sum finished in 123.4 ms on cpu:0`: the state's `run_status`, announced."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.pane = StatusLine(text=state.run_status, sizing_mode="stretch_width",
                               margin=(0, 10))
        state.param.watch(self._update, "run_status")

    def __panel__(self):
        return self.pane

    def _update(self, event):
        self.pane.text = event.new
