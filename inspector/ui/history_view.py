"""The run history: a table of every run and a chart of their median times."""

from __future__ import annotations

import html

import panel as pn
import panel_material_ui as pmui
from bokeh.models import BasicTicker, ColumnDataSource, HoverTool, Label, Range1d
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from inspector.ui.next_tick import next_tick
from inspector.ui.session.op_settings import settings_classes
from inspector.ui.session.records import RunRecord

_COLUMNS = list(RunRecord.COLUMNS)
_COLORS = {op: Category10_10[i % 10] for i, op in enumerate(settings_classes())}


class HistoryView(pn.viewable.Viewer):
    """Every successful run of the session, newest first, and its median times as bars."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        # A plain HTML table: one text property per update. A Tabulator sent its data (as
        # binary buffers), its style and its columns as three messages at every run, each
        # serialised with a reference to every model of the page: the largest server cost left
        # per run with 20 sessions open (`bench_sessions.py`).
        self.table = pn.pane.HTML(_table_html([]), sizing_mode="stretch_width",
                                  stylesheets=[_TABLE_CSS], margin=(5, 10))
        self._source = ColumnDataSource(data=_chart_data([]))
        # Laid out from the start, empty: shown only at the first run, the figure had the
        # browser lay the page out again then (docs/app-first-run.md). Its ranges are set
        # from the data here (`chart_ranges`), not by Bokeh: a log axis over no data warns.
        x, y = chart_ranges([])
        fig = figure(height=190, sizing_mode="stretch_width", y_axis_type="log",
                     toolbar_location=None, tools="", x_axis_label="run",
                     y_axis_label="median ms", min_border_left=50,
                     x_range=Range1d(*x), y_range=Range1d(*y))
        fig.segment(x0="run", x1="run", y0="min_ms", y1="max_ms", source=self._source,
                    line_color="color", line_width=2)
        fig.scatter(x="run", y="median_ms", source=self._source, size=9, color="color",
                    legend_field="op")
        fig.add_tools(HoverTool(tooltips=[("run", "@run"), ("op", "@op"),
                                          ("median", "@median_ms{0.000} ms"),
                                          ("compiled", "@compiled kernels")]))
        fig.legend.location = "top_left"
        fig.legend.label_text_font_size = "11px"
        fig.xaxis.ticker = BasicTicker(min_interval=1, num_minor_ticks=0)
        fig.grid.grid_line_alpha = 0.3
        # in the middle of the empty chart's ranges; hidden from the first run on
        self._empty = Label(x=3, y=10, text="Each run's median time shows here.",
                            text_font_size="12px",
                            text_color="#888", text_align="center", text_baseline="middle")
        fig.add_layout(self._empty)
        self._figure = fig
        self.chart = pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        state.param.watch(next_tick(self.refresh), "history")  # the chart's column data
        self.refresh()

    def __panel__(self):
        return pmui.Column(self.chart, self.table, sizing_mode="stretch_width")

    def refresh(self, *_):
        """Shows the state's history (the table newest first, the chart oldest first)."""
        history = self._state.history
        self.table.object = _table_html([h.row() for h in reversed(history)])
        self._source.data = _chart_data(history)
        (self._figure.x_range.start, self._figure.x_range.end), \
            (self._figure.y_range.start, self._figure.y_range.end) = chart_ranges(history)
        self._empty.visible = not history


_TITLES = {"compile_ms": "compile ms", "median_ms": "median ms", "min_ms": "min ms",
           "max_ms": "max ms", "gbps": "GB/s", "eager_ms": "eager ms"}
_DECIMALS = set(_TITLES)  # the times and GB/s: shown with 3 decimals
_NUMBERS = _DECIMALS | {"run", "compiled"}  # right-aligned
_TABLE_CSS = """
.run-history { max-height: 264px; overflow: auto; }
.run-history table { border-collapse: collapse; width: 100%; font-size: 12.5px; }
.run-history th, .run-history td { padding: 3px 8px; white-space: nowrap; text-align: right;
  border-bottom: 1px solid rgba(127, 127, 127, 0.25); }
.run-history th { position: sticky; top: 0; font-weight: 500;
  background: var(--mui-palette-background-paper, #fff); }
.run-history .text { text-align: left; }
"""


def _table_html(rows: list[dict]) -> str:
    """Every run as a row, the columns of `RunRecord.row` (times with 3 decimals)."""
    def cell(column: str, value) -> str:
        if value is None:
            return "<td></td>"
        if column in _DECIMALS:
            return f"<td>{value:,.3f}</td>"
        if column in _NUMBERS:
            return f"<td>{value}</td>"
        return f'<td class="text">{html.escape(str(value))}</td>'

    head = "".join(f'<th class="{"" if c in _NUMBERS else "text"}">{_TITLES.get(c, c)}</th>'
                   for c in _COLUMNS)
    body = "".join("<tr>" + "".join(cell(c, row[c]) for c in _COLUMNS) + "</tr>" for row in rows)
    return (f'<div class="run-history"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _chart_data(history: list) -> dict:
    return {
        "run": [h.run for h in history],
        "op": [h.op for h in history],
        "median_ms": [max(h.median_ms, 1e-6) for h in history],
        "min_ms": [max(h.min_ms, 1e-6) for h in history],
        "max_ms": [max(h.max_ms, 1e-6) for h in history],
        "compiled": [h.compiled for h in history],
        "color": [_COLORS.get(h.op, "#666") for h in history],
    }


def chart_ranges(history: list) -> tuple[tuple[float, float], tuple[float, float]]:
    """The chart's run and median-ms ranges: every run with a margin, the times' span with a
    margin on the log axis; with no run, runs 1-5 over 0.1 ms to 1 s."""
    if not history:
        return (0.5, 5.5), (0.1, 1000.0)
    data = _chart_data(history)
    lo, hi = min(data["min_ms"]), max(data["max_ms"])
    runs = data["run"]
    pad = max(0.5, 0.1 * (runs[-1] - runs[0]))
    return (runs[0] - pad, runs[-1] + pad), (lo / 2, hi * 2)
