"""The Timeline view: several loaded trees (in step order) or a folder of checkpoints as a
heatmap of subtrees x steps (`Timeline.table`, folded `depth` keys deep), coloured by relative
change, norm or non-finite count; the first NaN of each row marked; frozen leaves and
structure changes listed; a click on a cell opens those two steps in the Compare view."""

from __future__ import annotations

import html
import math

import numpy as np
import panel as pn
import panel_material_ui as pmui
from bokeh.models import (
    BasicTicker,
    ColorBar,
    ColumnDataSource,
    HoverTool,
    LinearColorMapper,
    LogColorMapper,
    TapTool,
)
from bokeh.plotting import figure

from inspector.core.health import loops_warm
from inspector.ui.session.health_figures import NONFINITE_COLOR

PALETTE = ("#fff7ec", "#fee8c8", "#fdd49e", "#fdbb84", "#fc8d59", "#ef6548", "#d7301f",
           "#b30000", "#7f0000")
MISSING = "#eeeeee"


def heatmap_data(timeline, metric: str, depth: int) -> dict:
    """The heatmap's columns (one entry per cell) and its rows and step labels."""
    table = timeline.table(metric, depth=depth)
    nonfinite = timeline.table("nonfinite", depth=depth).values
    labels = [str(x) for x in table.labels]
    xs, ys, values, first = [], [], [], []
    for i, row in enumerate(table.rows):
        bad = np.nan_to_num(nonfinite[i]) > 0
        first_bad = int(np.argmax(bad)) if bad.any() else -1
        for t, label in enumerate(labels):
            xs.append(label)
            ys.append(row or "(root)")
            values.append(float(table.values[i, t]))
            first.append("first NaN/Inf" if t == first_bad else "")
    return {"columns": {"step": xs, "row": ys, "value": values, "first": first,
                        "text": [_text(v) for v in values]},
            "rows": [r or "(root)" for r in table.rows], "labels": labels}


def _text(v: float) -> str:
    return "—" if math.isnan(v) else f"{v:.3g}"


class TimelineView(pn.viewable.Viewer):
    """Pick trees or a folder, build the timeline, see its heatmap, frozen leaves, changes."""

    def __init__(self, state, **params):
        super().__init__(**params)
        loops_warm.prepare_in_background()  # the CPU's numba loops, loaded before a click
        self._state = state
        h = self._health = state.health
        self.trees = pmui.MultiChoice.from_param(h.param.timeline_trees, options=list(state.trees),
                                                 label="Loaded trees, in step order",
                                                 sizing_mode="stretch_width", margin=(5, 10))
        self.folder = pmui.TextInput.from_param(h.param.timeline_folder,
                                                label="… or a folder of checkpoints",
                                                sizing_mode="stretch_width", margin=(5, 10))
        self.button = pmui.Button.from_param(h.param.open_timeline, label="Build the timeline",
                                             icon="timeline", variant="contained", margin=(5, 10))
        self.metric = pmui.RadioButtonGroup.from_param(h.param.metric, margin=(5, 10))
        self.depth = pmui.IntSlider.from_param(h.param.depth, label="Fold depth", width=180,
                                               margin=(5, 10))
        self.progress = pmui.LinearProgress(variant="determinate", value=0, visible=False,
                                            sizing_mode="stretch_width", margin=(0, 10))
        self.source = ColumnDataSource({"step": [], "row": [], "value": [], "first": [],
                                        "text": []})
        # no figure until there is a timeline: a Bokeh figure laid out while its tab is hidden
        # fails in the browser (panel-material-ui issue 548, "reading 'top_panel'")
        self.plot = pn.pane.Bokeh(None, sizing_mode="stretch_width", visible=False)
        self.notes = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 10))
        state.param.watch(self._on_trees, "trees")
        state.param.watch(self._update_progress, ["busy", "progress", "status"])
        h.param.watch(self._update, ["timeline", "metric", "depth"])
        self.source.selected.on_change("indices", self._on_tap)
        self._cells: list = []

    def __panel__(self):
        return pmui.Column(pmui.Row(self.trees, self.folder, sizing_mode="stretch_width"),
                           pmui.Row(self.button, self.metric, self.depth), self.progress,
                           pn.Column(self.plot, sizing_mode="stretch_width"), self.notes,
                           sizing_mode="stretch_width")

    def _on_trees(self, *_):
        self.trees.options = list(self._state.trees)

    def _update_progress(self, *_):
        s = self._state
        running = s.running == "building the timeline"
        self.progress.param.update(visible=running, value=s.progress or 0)

    def _figure(self, data: dict | None):
        rows = data["rows"] if data else ["(none)"]
        labels = data["labels"] if data else ["(none)"]
        metric = self._health.metric
        fig = figure(x_range=labels, y_range=list(reversed(rows)), height=max(200, 26 * len(rows)
                                                                            + 90),
                     sizing_mode="stretch_width", toolbar_location=None, tools="",
                     x_axis_label="step", title=f"{metric} per subtree and step")
        values = np.array(data["columns"]["value"] if data else [], np.float64)
        finite = values[np.isfinite(values)]
        if metric == "nonfinite":
            mapper = LinearColorMapper(palette=["#e8f5e9", NONFINITE_COLOR], low=0, high=1,
                                       nan_color=MISSING)
        elif metric == "rel_change" and (finite > 0).any():
            mapper = LogColorMapper(palette=PALETTE, low=float(finite[finite > 0].min()),
                                    high=float(finite.max()), nan_color=MISSING,
                                    low_color="#e8f5e9")
        else:
            mapper = LinearColorMapper(palette=PALETTE, low=float(finite.min()) if finite.size
                                       else 0, high=float(finite.max()) if finite.size else 1,
                                       nan_color=MISSING)
        # a picked cell is outlined; the others keep their colour (Bokeh fades them by default)
        cells = fig.rect("step", "row", 1, 1, source=self.source, line_color="white",
                         fill_color={"field": "value", "transform": mapper},
                         nonselection_fill_alpha=1.0, nonselection_line_color="white",
                         selection_line_color="#000000", selection_line_width=2)
        fig.text("step", "row", text="first", source=self.source, text_align="center",
                 text_baseline="middle", text_font_size="9px", text_color="#000000",
                 nonselection_text_alpha=1.0)
        fig.add_tools(HoverTool(renderers=[cells], tooltips=[("subtree", "@row"),
                                                             ("step", "@step"),
                                                             (metric, "@text"), ("", "@first")]),
                      TapTool(renderers=[cells]))
        fig.add_layout(ColorBar(color_mapper=mapper, ticker=BasicTicker(), width=10,
                                title=metric), "right")
        fig.grid.grid_line_color = None
        return fig

    def _update(self, *_):
        t = self._health.timeline
        if t is None:
            return
        data = heatmap_data(t, self._health.metric, self._health.depth)
        self.source.data = data["columns"]
        self._cells = list(zip(data["columns"]["row"], data["columns"]["step"], strict=True))
        self._rows = {r or "(root)": r for r in t.table(self._health.metric,
                                                        depth=self._health.depth).rows}
        self.plot.param.update(object=self._figure(data), visible=True)
        self.notes.object = _notes(t)

    def _on_tap(self, attr, old, new):
        if not new:
            return
        row, step = self._cells[new[0]]
        labels = [str(x) for x in self._health.timeline.labels]
        self._health.pick(self._rows.get(row, row), labels.index(step))

    def tap(self, row: str, step_index: int) -> None:
        """Picks a cell as a click would (for tests without a browser)."""
        labels = [str(x) for x in self._health.timeline.labels]
        i = self._cells.index((row or "(root)", labels[step_index]))
        self.source.selected.indices = [i]
        self._on_tap("indices", [], [i])


def _notes(t) -> str:
    frozen = t.frozen()
    first = t.first_nonfinite()
    changes = t.structure_changes()
    out = [f"<h4 style='margin:8px 0 4px'>Frozen leaves ({len(frozen)}): bitwise equal at "
           "every step</h4>"]
    out.append("<ul class='frozen-leaves'>" + "".join(
        f"<li><code>{html.escape(p)}</code></li>" for p in frozen[:200]) + "</ul>"
        if frozen else "<p>none</p>")
    out.append(f"<h4 style='margin:8px 0 4px'>First NaN/Inf ({len(first)})</h4>")
    out.append("<ul class='first-nonfinite'>" + "".join(
        f"<li><code>{html.escape(p)}</code>: step {html.escape(str(label))}</li>"
        for p, label in list(first.items())[:200]) + "</ul>" if first else "<p>none</p>")
    out.append(f"<h4 style='margin:8px 0 4px'>Structure changes ({len(changes)})</h4>")
    out.append("<ul class='structure-changes'>" + "".join(
        f"<li>step {html.escape(str(c.label))}: <code>{html.escape(c.path)}</code> "
        f"{html.escape(c.kind)} ({html.escape(str(c.before))} → {html.escape(str(c.after))})"
        "</li>" for c in changes[:200]) + "</ul>" if changes else "<p>none</p>")
    if t.left_out:
        out.append("<p class='left-out'>Left out of the folder (not named like the run's "
                   "checkpoints): " + ", ".join(f"<code>{html.escape(p.name)}</code>"
                                                for p in t.left_out) + "</p>")
    return "".join(out)
