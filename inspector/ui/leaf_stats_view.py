"""`LeafStatsView`: the selected node's key path, and a leaf's numbers and histogram.

The numbers come from `session/leaf_numbers.py` (one leaf read, NumPy). Each statistic is one
name-value pair that wraps as a whole, so no value is cut off however narrow the column.
"""

from __future__ import annotations

import html

import panel as pn
import panel_material_ui as pmui
import param
from bokeh.models import ColumnDataSource
from bokeh.plotting import figure

from inspector.ui.next_tick import next_tick
from inspector.ui.session.formatting import MONO, human_bytes, shape_text
from inspector.ui.session.leaf_numbers import histogram, leaf_array, leaf_stats, opaque_content


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:.6g}"


class LeafStatsView(pn.viewable.Viewer):
    """The selected node's key path (with a copy button) and, for a leaf, its statistics and
    histogram."""

    source = param.Selector(default="input", objects=["input", "result"])

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self._path = pmui.TextInput(label="Selected key path", value="", disabled=False,
                                    sizing_mode="stretch_width", size="small",
                                    stylesheets=[":host input {font-family: monospace}"])
        self._copy = pmui.Button(label="Copy", icon="content_copy", variant="outlined",
                                 size="small", width=90, align="center")
        self._copy.js_on_click(args={"src": self._path},
                               code="navigator.clipboard.writeText(src.value)")
        self._summary = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 10),
                                    stylesheets=[STATS_CSS])
        self._source = ColumnDataSource(data={"left": [], "right": [], "top": []})
        self._plot = None  # built on the first leaf shown: most sessions never need it
        # A quantized weight shows its dequantized values; this shows the stored codes.
        self._raw = pmui.Switch(label="Raw codes", value=False, visible=False, size="small")
        self._raw.param.watch(self._update, "value")
        # margin above: the field's label floats over its top border, onto the tree's last row
        self._layout = pmui.Column(pmui.Row(self._path, self._copy, sizing_mode="stretch_width",
                                            margin=(12, 0, 0, 0)),
                                   self._raw, self._summary, sizing_mode="stretch_width",
                                   visible=False)
        self._view = state.tree_views[self.source]
        self._view.param.watch(self._update, "path")
        state.param.watch(next_tick(self._update), ["selected", "result", "trees"])
        self._update()

    def __panel__(self):
        return self._layout

    def _histogram(self, visible: bool) -> None:
        if self._plot is None:
            if not visible:
                return
            fig = figure(height=150, sizing_mode="stretch_width", toolbar_location=None,
                         tools="", min_border_left=40)
            fig.quad(left="left", right="right", top="top", bottom=0, source=self._source,
                     fill_alpha=0.7, line_color=None)
            fig.yaxis.axis_label = "count"
            fig.grid.grid_line_alpha = 0.3
            self._plot = pn.pane.Bokeh(fig, sizing_mode="stretch_width")
            self._layout.append(self._plot)
        self._plot.visible = visible

    @property
    def histogram_shown(self) -> bool:
        return self._plot is not None and self._plot.visible

    def _update(self, *_):
        path = self._view.path
        shown = self._state.shown(self.source)
        self._path.value = path
        self._layout.visible = bool(path)
        if not path or shown is None:
            self._summary.object = ""
            self._histogram(False)
            return
        _, tree, index = shown
        row_i = index.row_of(path)
        if row_i is None:
            self._summary.object = ""
            self._histogram(False)
            return
        row = index.rows[row_i]
        if row.kind == "opaque":  # an object the checkpoint describes: its class and content
            kind, content = opaque_content(tree, index, path)
            self._summary.object = _table([("object", kind)]) + (
                f"<pre class='opaque-content'>{html.escape(content)}</pre>")
            self._histogram(False)
            return
        if row.kind != "leaf":
            self._summary.object = _table([("kind", row.kind), ("leaves", f"{row.n_leaves:,}"),
                                           ("params", f"{row.n_params:,}"),
                                           ("bytes", human_bytes(row.nbytes))])
            self._histogram(False)
            return
        group = index.quant_group(row_i)
        self._raw.visible = group is not None and group.usable
        x = leaf_array(tree, index, path, raw=self._raw.value)
        if x is None:
            self._summary.object = _table([("leaf", row.type_name)])
            self._histogram(False)
            return
        s = leaf_stats(x)
        quant = [("quantized", group.layout + ("" if self._raw.value or not group.usable
                                                else " · dequantized"))] if group else []
        if not group and row.quant:  # a file's own quantized tensor (GGUF), decoded when read
            quant = [("stored", f"{row.quant} · dequantized")]
        self._summary.object = _table([
            *quant,
            ("array", shape_text(str(x.dtype), x.shape)), ("size", f"{s['size']:,}"),
            ("min", _fmt(s["min"])), ("max", _fmt(s["max"])), ("mean", _fmt(s["mean"])),
            ("std", _fmt(s["std"])), ("NaN", f"{s['nan']:,}"), ("Inf", f"{s['inf']:,}"),
        ])
        counts, edges = histogram(x)
        self._source.data = {"left": edges[:-1].tolist(), "right": edges[1:].tolist(),
                             "top": counts.tolist()}
        self._histogram(bool(len(counts)))

    @property
    def stats_html(self) -> str:
        """The statistics as shown (for tests)."""
        return self._summary.object


STATS_CSS = (
    ".leaf-stats{display:flex;flex-wrap:wrap;gap:2px 16px;font-size:13px;line-height:1.6}"
    ".leaf-stats .stat{display:flex;gap:6px;align-items:baseline;min-width:0;max-width:100%}"
    ".leaf-stats .k{color:var(--mui-palette-text-secondary,#666)}"
    f".leaf-stats .v{{font-family:{MONO};overflow-wrap:anywhere;min-width:0}}"
    f".opaque-content{{font-family:{MONO};font-size:12px;white-space:pre-wrap;margin:4px 0;"
    "max-height:320px;overflow:auto}"
)
"""Each name-value pair is one box that wraps whole to the next line (a grid of fixed columns
cut `min` off at 1680 px); a value longer than the column breaks inside itself."""


def _table(pairs) -> str:
    cells = "".join(
        f"<div class='stat'><span class='k'>{html.escape(k)}</span>"
        f"<span class='v' data-stat='{html.escape(k)}'>{html.escape(str(v))}</span></div>"
        for k, v in pairs)
    return f"<div class='leaf-stats'>{cells}</div>"
