"""The Health view: the selected tree scanned for NaN/Inf, zeros and norms (`inspector.scan`),
its rows coloured by a chosen figure with a legend, "next NaN", and the scan table."""

from __future__ import annotations

import html

import panel as pn
import panel_material_ui as pmui

from inspector.core.health import loops_warm
from inspector.ui.lazy_tree import LazyTree
from inspector.ui.next_tick import next_tick
from inspector.ui.session.health_figures import TABLE_COLUMNS, Colouring, table_rows

TITLES = {"path": "key path", "posinf": "+inf", "neginf": "−inf", "max_abs": "max |x|",
          "l2": "L2 norm"}


class _HeatIndex:
    """A tree's `TreeIndex` whose items carry each node's colour (`heat`) from a scan."""

    def __init__(self, index, colouring: Colouring):
        self._index, self._colouring = index, colouring

    def items(self, expanded, **options):
        items, paths = self._index.items(expanded, **options)
        stack = list(items)
        while stack:
            item = stack.pop()
            heat = self._colouring.heat(item.get("path", item.get("id", "")))
            if heat is not None:
                item["heat"] = heat
            stack.extend(item.get("items") or [])
        return items, paths

    def __getattr__(self, name):
        return getattr(self._index, name)


class HealthView(pn.viewable.Viewer):
    """Scan button, colour choice and legend, "next NaN", the coloured tree, the scan table."""

    def __init__(self, state, **params):
        super().__init__(**params)
        loops_warm.prepare_in_background()  # the CPU's numba loops, loaded before a click
        self._state = state
        h = self._health = state.health
        self._colouring = None
        self.scan_button = pmui.Button.from_param(h.param.scan_tree, label="Scan the tree",
                                                  icon="health_and_safety", variant="contained",
                                                  margin=(5, 10))
        self.next_button = pmui.Button.from_param(h.param.next_nan, label="Next NaN",
                                                  icon="skip_next", variant="outlined",
                                                  color="error", margin=(5, 10))
        self.color_by = pmui.Select.from_param(h.param.color_by, label="Colour rows by",
                                               width=200, margin=(5, 10))
        self.only = pmui.Switch.from_param(h.param.only_nonfinite, label="only non-finite",
                                           margin=(5, 10))
        self.progress = pmui.LinearProgress(variant="determinate", value=0, visible=False,
                                            sizing_mode="stretch_width", margin=(0, 10))
        self.summary = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 10))
        self.legend = pn.pane.HTML("", margin=(0, 10))
        self.lazy = LazyTree(h.tree_view, self._shown, max_height=500)
        self.table = pn.widgets.Tabulator(
            _frame([]), show_index=False, disabled=True, pagination="local", page_size=15,
            sizing_mode="stretch_width", layout="fit_data_stretch", titles=TITLES,
            header_filters={"path": {"type": "input", "func": "like",
                                     "placeholder": "filter by key path"}}, visible=False)
        h.param.watch(next_tick(self._update), ["scan", "only_nonfinite", "color_by"])
        state.param.watch(self._update_progress, ["busy", "progress", "status"])
        state.param.watch(self._update_summary, ["selected"])
        self._update()

    def __panel__(self):
        controls = pmui.Row(self.scan_button, self.color_by, self.next_button, self.only,
                            sizing_mode="stretch_width")
        return pmui.Column(controls, self.progress, self.summary, self.legend, self.lazy,
                           self.table, sizing_mode="stretch_width")

    def _shown(self):
        h, state = self._health, self._state
        loaded = state.trees.get(h.scanned)
        if loaded is None or h.scan is None:
            return None
        return _HeatIndex(loaded.index, self._colouring), {"root_label": loaded.name}

    def _update_progress(self, *_):
        s = self._state
        running = s.running == "scanning"
        self.progress.param.update(visible=running, value=s.progress or 0)

    def _update_summary(self, *_):
        h, state = self._health, self._state
        scan = h.scan
        if scan is None:
            self.summary.object = (f"<p>Scan <b>{html.escape(state.selected)}</b> for NaN/Inf, "
                                   "zeros and norms: one pass over its data.</p>")
            return
        bad = scan.nonfinite()
        counts = [sum(getattr(s, k) for s in bad) for k in ("nan", "posinf", "neginf")]
        text = (f"<p class='health-summary'><b>{html.escape(h.scanned)}</b>: "
                f"{len(scan.leaves):,} leaves scanned in {scan.seconds * 1e3:.0f} ms; "
                f"<b>{len(bad):,}</b> hold non-finite values ({counts[0]:,} NaN, "
                f"{counts[1]:,} +Inf, {counts[2]:,} −Inf)")
        if scan.skipped:
            text += f"; {len(scan.skipped)} skipped (not numeric)"
        if h.scanned != state.selected:
            text += f". The selected tree is {html.escape(state.selected)}: scan it anew"
        self.summary.object = text + ".</p>"

    def _update(self, *_):
        h = self._health
        scan = h.scan
        self.next_button.disabled = scan is None or not scan.nonfinite()
        self._colouring = Colouring(scan, h.color_by) if scan is not None else None
        self.legend.object = "" if self._colouring is None else _legend(self._colouring)
        self.table.visible = scan is not None
        self.table.value = _frame(table_rows(scan, h.only_nonfinite) if scan else [])
        self._update_summary()
        self.lazy.update()


def _legend(colouring: Colouring) -> str:
    swatches = "".join(
        f"<span style='display:inline-flex;align-items:center;gap:4px;margin-right:12px'>"
        f"<span style='width:12px;height:12px;border-radius:3px;background:{c};"
        f"box-shadow:inset 0 0 0 1px rgba(127,127,127,.35)'></span>{html.escape(t)}</span>"
        for c, t in colouring.legend())
    return (f"<div class='health-legend' style='font-size:12.5px'>"
            f"{html.escape(colouring.color_by)}: {swatches}</div>")


def _frame(rows):
    import pandas as pd

    df = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    for c in ("min", "max", "mean", "std", "l2", "max_abs"):  # 7 digits: float32's worth
        df[c] = [float(f"{v:.7g}") for v in df[c]]
    return df
