"""The sidebar's memory panel: what each tree holds where (host / device, bytes), the budget."""

from __future__ import annotations

import html

import panel as pn
import panel_material_ui as pmui

from inspector.core import working_set
from inspector.ui.session import launcher_warm
from inspector.ui.session.formatting import human_bytes

GIB = 1024**3


class WorkingSetView(pn.viewable.Viewer):
    """The trees this session holds packed (read once, reused by every op, shared with other
    sessions that opened the same files), where and how big, against the process-wide memory
    budget (by default a fraction of the memory free now), which can be set here in GiB, the unit
    the holdings above it are shown in (`human_bytes`)."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self._body = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 10))
        self.budget = pmui.FloatInput(label="Memory budget (GiB)", value=self.budget_gib(),
                                      start=0.0, step=0.5, sizing_mode="stretch_width")
        self.budget.param.watch(self._on_budget, "value")
        state.param.watch(self._update, "held")
        self._update()

    @staticmethod
    def budget_gib() -> float:
        """The process-wide budget in GiB (2 decimals), as the field shows it."""
        return round(working_set.budget() / GIB, 2)

    def __panel__(self):
        title = pmui.Typography("Working set", variant="subtitle2", margin=(5, 10, 0, 10))
        return pmui.Column(title, self._body, self.budget, sizing_mode="stretch_width")

    @property
    def text(self) -> str:
        """The panel as plain text, one line per tree, then the totals."""
        warm = set(launcher_warm.held_names())  # the launcher's copy is no session's
        lines = []
        for h in self._state.held:
            others = h.shared - 1 - (h.name in warm)
            lines.append(f"{h.name}: {h.where} ({h.device}), {human_bytes(h.nbytes)}"
                         + (f", shared with {others} other session{'s' * (others > 1)}"
                            if others > 0 else "")
                         + (", kept warm by the launcher" if h.name in warm else ""))
        if not lines:
            lines = ["Nothing held: trees are read when an operation needs them."]
        how = "set" if working_set.budget_is_set() else "follows the free memory"
        lines.append(f"held by all sessions: {human_bytes(working_set.held_bytes())} of "
                     f"{human_bytes(working_set.budget())} ({how})")
        return "\n".join(lines)

    def _update(self, *_):
        rows = "".join(f"<div>{html.escape(line)}</div>" for line in self.text.splitlines())
        self._body.object = f"<div class='working-set' style='font-size:12px'>{rows}</div>"

    def _on_budget(self, event):
        if event.new and event.new > 0:
            working_set.set_budget(int(event.new * GIB))
            self._state.refresh_held()
            self._update()  # the budget line, also when what is held did not change
