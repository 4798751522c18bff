"""One leaf's numbers: min, max, mean, std, NaN and Inf counts, and a histogram.

Computed with NumPy on that leaf only (a packed tree's leaf is a view into its buffer), so
selecting a leaf of a 100k-leaf checkpoint reads one leaf.
"""

from __future__ import annotations

import html

import numpy as np
import panel as pn
import panel_material_ui as pmui
import param
from bokeh.models import ColumnDataSource
from bokeh.plotting import figure

import inspector
from inspector.ui.session.formatting import MONO, human_bytes, shape_text
from inspector.ui.session.tree_index import ROOT_ID, TreeIndex

_BINS = 30


def leaf_array(tree, index: TreeIndex, path: str):
    """Returns the leaf at key `path` as a NumPy array, or None (not a leaf, not an array)."""
    row_i = index.row_of(path)
    if row_i is None or row_i not in index.leaf_number:
        return None
    n = index.leaf_number[row_i]
    if isinstance(tree, inspector.PackedTree):
        return np.asarray(tree.leaf(n))
    leaf = index.flat_leaves(tree)[n]
    if not hasattr(leaf, "shape") and not isinstance(leaf, bool | int | float | complex):
        return None
    if not getattr(leaf, "is_fully_addressable", True):
        return None  # spread over several hosts: gathering it would need every host
    return np.asarray(leaf)


def short_values(tree, index: TreeIndex, row_i: int, limit: int = 8) -> str | None:
    """The values of a leaf of at most `limit` elements, on one line (`[[26, 11], [21, 24]]`),
    or None for bigger leaves and leaves whose data is not in memory (lazy checkpoint leaves)."""
    row = index.rows[row_i]
    if row.shape is None or row.n_params > limit or row_i not in index.leaf_number:
        return None
    if not isinstance(tree, inspector.PackedTree):
        leaf = index.flat_leaves(tree)[index.leaf_number[row_i]]
        if isinstance(leaf, inspector.LazyArray) or not getattr(leaf, "is_fully_addressable",
                                                                  True):
            return None
    x = leaf_array(tree, index, row.path or ROOT_ID)
    if x is None:
        return None
    if x.dtype.kind not in "biufc":
        x = x.astype(np.float32)
    text = np.array2string(x, separator=", ", precision=4, suppress_small=True,
                           max_line_width=10**6)
    return " ".join(text.split()).replace("[ ", "[")


def leaf_stats(x: np.ndarray) -> dict:
    """Returns `{size, min, max, mean, std, nan, inf}` of an array (NaN/Inf excluded from the
    moments; complex leaves are measured by magnitude; `None` where there is nothing to say).

    >>> s = leaf_stats(np.array([1.0, np.nan, 3.0, np.inf], np.float32))
    >>> s["min"], s["max"], s["mean"], s["nan"], s["inf"]
    (1.0, 3.0, 2.0, 1, 1)
    """
    x = np.asarray(x)
    if x.dtype.kind == "c":
        x = np.abs(x)
    if x.dtype.kind not in "biuf":
        x = x.astype(np.float32)  # bfloat16 and friends (ml_dtypes) read as float32
    if x.dtype.kind == "b":
        x = x.astype(np.int8)
    out = {"size": int(x.size), "nan": 0, "inf": 0,
           "min": None, "max": None, "mean": None, "std": None}
    if x.dtype.kind == "f":
        out["nan"] = int(np.isnan(x).sum())
        out["inf"] = int(np.isinf(x).sum())
        finite = x[np.isfinite(x)] if out["nan"] or out["inf"] else x
    else:
        finite = x
    if finite.size:
        wide = finite.astype(np.float64)
        out["min"] = finite.min().item()
        out["max"] = finite.max().item()
        out["mean"] = float(wide.mean())
        out["std"] = float(wide.std())
    return out


def histogram(x: np.ndarray, bins: int = _BINS) -> tuple[np.ndarray, np.ndarray]:
    """Returns `(counts, edges)` over the finite values (empty arrays when there are none)."""
    x = np.asarray(x)
    if x.dtype.kind == "c":
        x = np.abs(x)
    x = x.astype(np.float64).ravel()
    x = x[np.isfinite(x)]
    if not x.size:
        return np.zeros(0), np.zeros(0)
    lo, hi = x.min(), x.max()
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return np.histogram(x, bins=bins, range=(lo, hi))


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
        self._summary = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 10))
        self._source = ColumnDataSource(data={"left": [], "right": [], "top": []})
        self._plot = None  # built on the first leaf shown: most sessions never need it
        self._layout = pmui.Column(pmui.Row(self._path, self._copy, sizing_mode="stretch_width"),
                                   self._summary, sizing_mode="stretch_width", visible=False)
        params_ = [f"{self.source}_path", "selected", "result", "trees"]
        state.param.watch(self._update, params_)
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
        path = getattr(self._state, f"{self.source}_path")
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
        if row.kind != "leaf":
            self._summary.object = _table([("kind", row.kind), ("leaves", f"{row.n_leaves:,}"),
                                           ("params", f"{row.n_params:,}"),
                                           ("bytes", human_bytes(row.nbytes))])
            self._histogram(False)
            return
        x = leaf_array(tree, index, path)
        if x is None:
            self._summary.object = _table([("leaf", row.type_name)])
            self._histogram(False)
            return
        s = leaf_stats(x)
        self._summary.object = _table([
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


def _table(pairs) -> str:
    cells = "".join(
        f"<div class='k'>{html.escape(k)}</div><div class='v'>{html.escape(str(v))}</div>"
        for k, v in pairs)
    return (
        "<div class='leaf-stats' style='display:grid;grid-template-columns:repeat(4,auto 1fr);"
        "gap:2px 10px;font-size:13px;align-items:baseline'>"
        + cells.replace("class='k'", "style='color:var(--mui-palette-text-secondary,#666)'")
        .replace("class='v'", f"style=\"font-family:{MONO}\"")
        + "</div>"
    )

