"""The diff view: two loaded trees compared, summary first, then their union as a lazy tree.

a is the expected tree (the model's own parameters), b the one checked against it (a
checkpoint that will not restore). The summary counts what differs; the tree shows every key
path of either tree with a coloured badge where they differ; selecting a leaf reads that leaf
in both trees (only that one) and shows max |a - b| and the relative L2 difference.
"""

from __future__ import annotations

import html

import panel as pn
import panel_material_ui as pmui
from bokeh.models import ColumnDataSource, NumberFormatter, ScientificFormatter
from bokeh.plotting import figure

from inspector.core.diff.union import shown_kinds
from inspector.ui.align_view import AlignView
from inspector.ui.layout import columns
from inspector.ui.lazy_tree import LazyTree
from inspector.ui.next_tick import next_tick
from inspector.ui.session.diff_index import BADGE_COLORS, KIND_HELP
from inspector.ui.session.formatting import MONO, human_bytes, human_count, plural
from inspector.ui.session.tree_index import ROOT_ID

_HINT = ("Pick two loaded trees: **a**, the expected tree (the model's parameters), and **b**, "
         "the tree to check against it (a checkpoint). Open checkpoints from the sidebar.")


def _pill(text: str, color: str, outlined: bool = False) -> str:
    main = f"var(--mui-palette-{color}-main)"
    style = (f"border:1px solid {main};color:{main};background:transparent" if outlined else
             f"background:{main};color:var(--mui-palette-{color}-contrastText, #fff)")
    return (f"<span class='diff-pill diff-{html.escape(text.split()[-1])}' style='{style};"
            f"border-radius:12px;padding:1px 9px;margin-right:6px;font-size:12.5px;"
            f"font-weight:500;white-space:nowrap'>{html.escape(text)}</span>")


class DiffSummary(pn.viewable.Viewer):
    """How many differences of each kind, matched leaves, and each tree's totals."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.html = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 10))
        state.compare.param.watch(self._update, ["diff_result"])
        state.param.watch(self._update, ["busy"])
        self._update()

    def __panel__(self):
        return self.html

    def _update(self, *_):
        d = self._state.compare.diff_result
        if d is None:
            busy = self._state.running in ("comparing", "comparing values")
            self.html.object = "<p>Comparing …</p>" if busy else ""
            return
        n = len(d.differences)
        total = max(d.a.totals[0], 1)
        if n == 0:
            verdict = (f"<span style='color:var(--mui-palette-success-main)'>No differences"
                       f"</span>: same key paths, shapes and dtypes; "
                       f"{plural(d.matched, 'leaf', 'leaves')} match.")
        else:
            verdict = (f"{plural(n, 'difference')} &nbsp; " + "".join(
                _pill(f"{d.counts.get(k, 0)} {k}", BADGE_COLORS[k], not d.counts.get(k, 0))
                for k in shown_kinds(d.counts))
                + f" &nbsp; {d.matched:,} of {total:,} leaves of a match")
        rows = "".join(
            f"<tr><td><b>{label}</b></td><td>{html.escape(side.name)}</td>"
            f"<td>{side.totals[0]:,}</td><td>{human_count(side.totals[1])}</td>"
            f"<td>{human_bytes(side.totals[2])}</td></tr>"
            for label, side in (("a", d.a), ("b", d.b)))
        self.html.object = (
            f"<div class='diff-summary'><div style='font-size:15px;margin:4px 0 8px 0'>"
            f"{verdict}</div>"
            f"<table style='border-collapse:collapse;font-size:13px' cellpadding='3'>"
            f"<tr style='color:var(--mui-palette-text-secondary)'><td></td><td>tree</td>"
            f"<td>leaves</td><td>params</td><td>bytes</td></tr>{rows}</table></div>")


class DiffTreeView(pn.viewable.Viewer):
    """The union of both trees as a `LazyTree` (the one `TreeView` uses), fed from the
    `TreeDiff`'s index (children sent on expand, ranges of 100), synced with
    `state.tree_views['diff']`."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self._heat: tuple = (None, {})  # (the diff_table it was made from, heat by path)
        self.lazy = LazyTree(state.tree_views["diff"], self._shown, max_height=620)
        self.tree = self.lazy.tree
        state.compare.param.watch(self.lazy.update, ["diff_result", "diff_only", "diff_values",
                                                     "diff_table"])
        self.lazy.update()

    def __panel__(self):
        return self.tree

    def index(self):
        d = self._state.compare.diff_result
        return None if d is None else d.index(self._state.compare.diff_only)

    def _shown(self):
        d, index = self._state.compare.diff_result, self.index()
        if index is None:
            return None
        return index, {"root_label": f"{d.a.name} vs {d.b.name}",
                       "values": self._state.compare.diff_values, "heat": self.heat()}

    def heat(self) -> dict:
        """{node path: {"color", "title"}} from the whole-tree value diff ({} until asked)."""
        from inspector.ui.session.value_heat import heat_by_path

        table = self._state.compare.diff_table
        if self._heat[0] is not table:
            self._heat = (table, heat_by_path(table))
        return self._heat[1]

    # for tests ------------------------------------------------------------------------------

    def expand(self, node_id: str) -> None:
        """Expands a node as a click on its arrow would."""
        self.lazy.expand(node_id)

    def select(self, node_id: str) -> None:
        """Selects a node as a click on its row would."""
        self.lazy.select(node_id)

    def shown(self) -> dict[str, dict]:
        """Every item the widget holds, by id (placeholders excluded)."""
        return self.lazy.shown()


class DiffLeafView(pn.viewable.Viewer):
    """The selected node: what each tree has there, its differences, and for a leaf in both
    trees of one shape, max |a - b| and the relative L2 difference (read on selection)."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.html = pn.pane.HTML("", sizing_mode="stretch_width", margin=(0, 10))
        self._sources = {k: ColumnDataSource({"left": [], "right": [], "top": []})
                         for k in ("a", "b", "delta")}
        self._plots = pmui.Column(sizing_mode="stretch_width", margin=0, visible=False)
        self._view = state.tree_views["diff"]
        state.compare.param.watch(self._update, ["diff_result", "diff_values"])
        state.param.watch(self._update, ["busy"])
        state.compare.param.watch(next_tick(self._update_histograms), ["diff_histograms"])
        self._view.param.watch(self._update, "path")
        self._view.param.watch(self._update_histograms, "path")
        self._update()

    def __panel__(self):
        return pmui.Column(self.html, self._plots, sizing_mode="stretch_width", margin=0)

    def _update_histograms(self, *_):
        hists = self._state.compare.diff_histograms.get(self._view.path) or {}
        for key, source in self._sources.items():
            counts, edges = hists.get(key, ([], [0]))
            source.data = {"left": list(edges[:-1]), "right": list(edges[1:]),
                           "top": list(counts)}
        if hists and not len(self._plots):
            both = figure(height=130, sizing_mode="stretch_width", toolbar_location=None,
                          tools="", title="a and b")
            for key, color in (("a", "#1f77b4"), ("b", "#ff7f0e")):
                both.quad(left="left", right="right", top="top", bottom=0, legend_label=key,
                          source=self._sources[key], fill_alpha=0.45, line_color=None,
                          fill_color=color)
            delta = figure(height=130, sizing_mode="stretch_width", toolbar_location=None,
                           tools="", title="b − a")
            delta.quad(left="left", right="right", top="top", bottom=0,
                       source=self._sources["delta"], fill_alpha=0.7, line_color=None,
                       fill_color="#d62728")
            self._plots[:] = [pn.pane.Bokeh(both, sizing_mode="stretch_width"),
                              pn.pane.Bokeh(delta, sizing_mode="stretch_width")]
        self._plots.visible = bool(hists)

    def _update(self, *_):
        d, path = self._state.compare.diff_result, self._view.path
        if d is None or not path or d.row(path) is None:
            self.html.object = ("<p style='color:var(--mui-palette-text-secondary)'>Select a "
                                "node to see both sides; selecting a leaf compares its values."
                                "</p>") if d is not None else ""
            return
        shown = html.escape(path or ROOT_ID)
        found = [x for x in d.differences if x.path == path]
        lines = [f"<div style='font-family:{MONO};font-size:13px;margin-bottom:6px;"
                 f"word-break:break-all'><b>{shown}</b></div><table style='font-size:13px'"
                 f" cellpadding='2'>"]
        for label, side in (("a", d.a), ("b", d.b)):
            lines.append(f"<tr><td><b>{label}</b>&nbsp;{html.escape(side.name)}</td>"
                         f"<td style='font-family:{MONO}'>"
                         f"{html.escape(d.describe_side(path, label))}</td></tr>")
        lines.append("</table>")
        if found:
            lines.append("<div style='margin:6px 0'>" + "".join(
                _pill(x.kind, BADGE_COLORS[x.kind]) for x in found) + "</div>")
            lines += [f"<div style='font-size:12.5px'>{html.escape(KIND_HELP[x.kind])}</div>"
                      for x in found]
        if d.comparable(path):
            value = self._state.compare.diff_values.get(path)
            if value is None:
                text = "reading both leaves …" if self._state.busy else ""
            elif isinstance(value, str):
                text = f"<span class='diff-value-error' style='color:" \
                       f"var(--mui-palette-error-main)'>{html.escape(value)}</span>"
            else:
                text = (f"<span class='diff-value'>max |a − b| = <b>{value[0]:.6g}</b>"
                        f" &nbsp; relative L2 = <b>{value[1]:.3g}</b></span>")
            lines.append(f"<div style='margin-top:8px;font-size:13.5px'>{text}</div>")
        self.html.object = "".join(lines)


class DiffValuesView(pn.viewable.Viewer):
    """"Which layers did this change?": every shared leaf and subtree of a and b with max |a-b|,
    relative L2, cosine and the fraction of elements changed, most changed first; sortable by
    any column, the relative L2 drawn as a heat bar."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.button = pmui.Button.from_param(
            state.compare.param.diff_compare_values, label="Compare all values", icon="insights",
            variant="outlined", margin=(5, 10))
        self.table = pn.widgets.Tabulator(
            _frame([]), show_index=False, disabled=True, pagination="local", page_size=15,
            sizing_mode="stretch_width", layout="fit_data_stretch", visible=False,
            titles={"path": "key path", "max_abs": "max |a−b|", "rel_l2": "rel L2",
                    "changed": "changed"},
            formatters={"rel_l2": {"type": "progress", "max": 1, "color": ["#fdd49e", "#fc8d59",
                                                                           "#d7301f"],
                                   "legend": True, "legendAlign": "right"},
                        "changed": {"type": "progress", "max": 1, "color": "#74a9cf"},
                        # 4 significant digits, not float64's 17 (0.007615566253662109)
                        "max_abs": ScientificFormatter(precision=3, power_limit_low=0,
                                                       power_limit_high=0),
                        "cosine": NumberFormatter(format="0.000000")},
            widths={"rel_l2": 150})  # its legend (the value) readable beside the bar
        # Determinate while the value diff reports how far it is (it streams lazy leaves)
        self.progress = pmui.LinearProgress(variant="determinate", value=0, visible=False,
                                            sizing_mode="stretch_width", margin=(0, 10))
        state.compare.param.watch(next_tick(self._update), ["diff_table", "diff_result"])
        state.param.watch(self._update_progress, ["busy", "progress", "status"])
        self._update()

    def __panel__(self):
        return pmui.Column(self.button, self.progress, self.table, sizing_mode="stretch_width")

    def _update_progress(self, *_):
        s = self._state
        running = s.running == "comparing values"
        self.progress.param.update(visible=running, value=s.progress or 0)

    def _update(self, *_):
        rows = self._state.compare.diff_table
        self.button.disabled = self._state.compare.diff_result is None
        self.table.visible = bool(rows)
        self.table.value = _frame(rows)


def _frame(rows):
    import pandas as pd

    from inspector.core.diff.values import COLUMNS

    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    # the relative L2's bar shows the value itself as its legend: 4 significant digits
    frame["rel_l2"] = [float(f"{x:.4g}") for x in frame["rel_l2"]]
    return frame


class DiffView(pn.viewable.Viewer):
    """Pick a and b; see the summary, then the tree of both with badges beside the selected node
    (resizable columns: drag the gutter between them), then the values of every shared leaf."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.a = pmui.Select(label="a: expected (the model)", options=[], width=260,
                             margin=(5, 10))
        self.b = pmui.Select(label="b: compared with it (a checkpoint)", options=[], width=260,
                             margin=(5, 10))
        self.swap = pmui.Button(label="Swap", icon="swap_horiz", variant="text",
                                align="center", margin=(5, 0))
        self.only = pmui.Switch.from_param(state.compare.param.diff_only, label="only differences",
                                           align="center", margin=(5, 10))
        c = state.compare
        self.a.param.watch(lambda e: setattr(c, "diff_a", e.new or ""), "value")
        self.b.param.watch(lambda e: setattr(c, "diff_b", e.new or ""), "value")
        self.swap.on_click(lambda _: c.param.update(diff_a=c.diff_b, diff_b=c.diff_a))
        self.summary = DiffSummary(state)
        self.tree = DiffTreeView(state)
        self.leaf = DiffLeafView(state)
        self.values = DiffValuesView(state)
        self.port = AlignView(state)  # a onto b: porting between frameworks
        self.hint = pmui.Typography(_HINT, variant="body2", margin=(10, 10))
        state.param.watch(self._update_choices, ["trees"])
        c.param.watch(self._update_choices, ["diff_a", "diff_b"])
        c.param.watch(self._update_visible, ["diff_result"])
        names = list(state.trees)
        if not (state.compare.diff_a or state.compare.diff_b) and len(names) >= 2:
            # Opened with nothing chosen: the first two trees. Left empty, the page's pickers
            # showed no value, yet sent their first option back, so it compared t1 with t1.
            c.param.update(diff_a=names[0], diff_b=names[1])
        self._update_choices()
        self._update_visible()

    def __panel__(self):
        pickers = pmui.Row(self.a, self.swap, self.b, self.only, margin=(0, 0))
        details = pmui.Column(
            pmui.Typography("Selected", variant="subtitle2", margin=(0, 10)), self.leaf,
            sizing_mode="stretch_width", margin=(0, 5))
        # The tree of both and the selected node in resizable columns, as on the Operations
        # tab; the split's children are built here once and never change (see app.main).
        tree = pmui.Column(self.tree, sizing_mode="stretch_width", margin=0)
        split = columns(tree, details, sizes=(70, 30), min_widths=(300, 280))
        return pmui.Column(pickers, self.hint, self.summary, split, self.values, self.port,
                           sizing_mode="stretch_width")

    def _update_choices(self, *_):
        names = list(self._state.trees)
        self.a.param.update(options=names, value=self._state.compare.diff_a or None)
        self.b.param.update(options=names, value=self._state.compare.diff_b or None)

    def _update_visible(self, *_):
        self.hint.visible = self._state.compare.diff_result is None
