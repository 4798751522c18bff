"""The tree view: a lazily fed windowed tree, a leaf search table, and the selected leaf's stats.

The tree is a `LazyTree` (items from the tree's `TreeIndex`: the widget holds only what is
visible) synced with the view's `TreeViewState` (`state.tree_views['input' or 'result']`).
"""

from __future__ import annotations

import re

import panel as pn
import panel_material_ui as pmui
import param

from inspector.ui.file_info_view import FileInfoView
from inspector.ui.lazy_tree import LazyTree
from inspector.ui.leaf_stats_view import LeafStatsView
from inspector.ui.next_tick import next_tick
from inspector.ui.session.formatting import plural, totals_text
from inspector.ui.session.leaf_numbers import short_values


class LeafTableView(pn.viewable.Viewer):
    """A path search over every leaf, answered in a paginated table.

    `search` (the field) and the table are laid out by `TreeView`: the table takes the tree's
    place while there is a query, and is built only then (a 100k-leaf table costs ~0.15 s).
    """

    source = param.Selector(default="input", objects=["input", "result"])
    page_size = param.Integer(default=12)

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self._view = state.tree_views[self.source]
        self._search = pmui.TextInput(
            label="Search leaves by key path", placeholder="e.g. attn  or  layer_00(0|1).*kernel",
            value=self._view.search, sizing_mode="stretch_width",
            size="small", margin=(5, 5))
        self._search.param.watch(self._on_search, "value_input")
        self._regex = pmui.Switch.from_param(state.param.search_regex, label="regex",
                                             align="center", width=90, description="",
                                             margin=(5, 5))
        self._table = pn.widgets.Tabulator(
            value=None, pagination="remote", page_size=self.page_size, show_index=False,
            disabled=True, selectable=1, sizing_mode="stretch_width", layout="fit_data_stretch",
            header_align="left", titles={"params": "params", "size": "bytes"},
        )
        self._table.param.watch(self._on_selection, "selection")
        self._count = pmui.Typography("", variant="caption", margin=(0, 10))
        self.search = pmui.Row(self._search, self._regex, sizing_mode="stretch_width", margin=0)
        self.results = pmui.Column(self._count, self._table, sizing_mode="stretch_width",
                                   margin=0)
        state.param.watch(next_tick(self._update), ["search_regex", "selected", "result", "trees"])
        self._view.param.watch(self._update, "search")
        self._update()

    def __panel__(self):
        return pmui.Column(self.search, self.results, sizing_mode="stretch_width")

    @property
    def active(self) -> bool:
        """Whether there is a query (and so a table to show)."""
        return bool(self._view.search)

    def _on_search(self, event):
        self._view.search = event.new or ""

    def _on_selection(self, event):
        if event.new and self._table.value is not None:
            path = self._table.value["path"].iloc[event.new[0]]
            self._view.path = path

    @property
    def frame(self):
        """The rows the table holds now (all pages)."""
        return self._table.value

    def _update(self, *_):
        shown = self._state.shown(self.source)
        query = self._view.search
        if self._search.value_input != query:
            self._search.value = query
        if not query:
            return  # no table is shown: build nothing
        if shown is None:
            self._table.value = None
            self._count.object = ""
            return
        frame = shown[2].leaf_frame()
        self._search.param.update(error_state=False, helper_text="")
        if query:
            try:
                if self._state.search_regex:
                    re.compile(query)
                mask = frame["path"].str.contains(query, regex=self._state.search_regex,
                                                  case=False)
                frame = frame[mask]
            except re.error as e:
                self._search.param.update(error_state=True, helper_text=f"Not a regex: {e}")
        self._table.param.update(value=frame.reset_index(drop=True), selection=[], page=1)
        total = len(shown[2].leaf_number)
        self._count.object = (f"{len(frame):,} of {plural(total, 'leaf', 'leaves')} match"
                              if query else plural(total, "leaf", "leaves"))


class TreeView(pn.viewable.Viewer):
    """A tree (the input or the result) as a lazy collapsible tree, with search and leaf stats."""

    source = param.Selector(default="input", objects=["input", "result"])
    title = param.String(default="Input tree")

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.view = state.tree_views[self.source]
        self._loaded = False  # the page has loaded (the search field may join)
        self._stats_shown = False
        self._stats_layout = None
        self.lazy = LazyTree(self.view, self._shown, max_height=600)
        self.tree = self.lazy.tree
        self._header = pmui.Typography("", variant="body2", margin=(0, 10),
                                       sizing_mode="stretch_width")
        self.table = LeafTableView(state, source=self.source)
        self.stats = LeafStatsView(state, source=self.source)
        # the file's metadata and problems (a sharded index's), above the input tree
        self.file_info = FileInfoView(state) if self.source == "input" else None
        self._empty = pmui.Typography(
            "Load a tree from the sidebar." if self.source == "input"
            else "Run an operation to see its result here.", variant="body2", margin=(10, 10))
        # One flat column whose parts join when first needed: every component, and every
        # level of nested layout, adds to the first paint (a nested pmui.Column ~0.3 s here).
        # The search field joins once the page has loaded, so the tree paints first.
        self._layout = pmui.Column(self._header, sizing_mode="stretch_width")
        pn.state.onload(self._on_load)
        self.view.param.watch(self._arrange, ["search", "path"])
        watched = ["selected", "trees"] if self.source == "input" else ["result", "result_name"]
        state.param.watch(self._update, watched)
        self._update()

    def __panel__(self):
        return self._layout

    def _shown(self):
        shown = self._state.shown(self.source)
        if shown is None:
            return None
        name, tree, index = shown
        return index, {"root_label": name, "values": lambda i: short_values(tree, index, i)}

    # state -> widget ------------------------------------------------------------------------

    def _on_load(self):
        self._loaded = True
        self._arrange()

    def _arrange(self, *_):
        shown = self._state.shown(self.source) is not None
        searching = shown and self.table.active
        self._stats_shown |= shown and bool(self.view.path)
        early = self.source == "result"
        parts = [self._header] + ([self._empty] if early or not shown else [])
        if shown and self.file_info is not None:
            parts.append(self.file_info.__panel__())
        # The result view is built after the first paint (with its card): its search field
        # and tree join at once, hidden, so a session's first result only shows them instead
        # of building their models while the user waits (~65 ms of server time each, queued
        # behind every other session's). The input view's search field joins once the page
        # has loaded, so the input tree paints first.
        if shown or early:
            parts += [self.table.search] if self._loaded or early else []
            parts += [self.table.results] if searching or self.table.results in \
                self._layout.objects else []
            parts += [self.tree] + ([self.stats_view] if self._stats_shown else [])
        self._empty.visible = not shown
        self.table.search.visible = shown
        self.table.results.visible = searching
        self.tree.visible = shown and not searching
        if [id(p) for p in parts] != [id(p) for p in self._layout.objects]:
            self._layout.objects = parts

    @property
    def stats_view(self):
        """The stats view as laid out (built on first use)."""
        if self._stats_layout is None:
            self._stats_layout = self.stats.__panel__()
        return self._stats_layout

    def _update(self, *_):
        shown = self._state.shown(self.source)
        if shown is None:
            self._header.object = ""
        else:
            name, _, index = shown
            root = index.root
            self._header.object = (f"**{name}** · "
                                   f"{totals_text(root.n_leaves, root.n_params, root.nbytes)}")
        self.lazy.update()
        self._arrange()  # after the items: a tree joining the page arrives with them

    # for tests and benchmarks ---------------------------------------------------------------

    def expand(self, node_id: str) -> None:
        """Expands a node as a click on its arrow would."""
        self.lazy.expand(node_id)

    def shown_ids(self) -> list[str]:
        """Ids of every item the widget holds (placeholders included)."""
        return self.lazy.shown_ids()
