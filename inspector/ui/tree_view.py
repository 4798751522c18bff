"""The tree view: a lazily fed windowed tree, a leaf search table, and the selected leaf's stats.

Items come from the tree's `TreeIndex`: the widget holds only what is visible. Expanding a
node in the browser sets the widget's `expanded`; the view turns those index paths into key
paths, stores them in the session state (`input_expanded` / `result_expanded`), and the state
change sends the new items, now with that node's children.
"""

from __future__ import annotations

import re

import panel as pn
import panel_material_ui as pmui
import param

from inspector.ui.leaf_stats_view import LeafStatsView
from inspector.ui.session.formatting import human_bytes, human_count, plural
from inspector.ui.session.leaf_numbers import short_values
from inspector.ui.windowed_tree import WindowedTree


def _find(items: list, target: str, path=()) -> tuple[int, ...] | None:
    for k, item in enumerate(items):
        if item.get("id") == target:
            return (*path, k)
        if item.get("items"):
            found = _find(item["items"], target, (*path, k))
            if found:
                return found
    return None


def _item_at(items: list, path) -> dict | None:
    item = None
    for k in path:
        if not items or k >= len(items):
            return None
        item = items[k]
        items = item.get("items") or []
    return item


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
        self._search = pmui.TextInput(
            label="Search leaves by key path", placeholder="e.g. attn  or  layer_00(0|1).*kernel",
            value=getattr(state, f"{self.source}_search"), sizing_mode="stretch_width",
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
        state.param.watch(self._update, [f"{self.source}_search", "search_regex", "selected",
                                         "result", "trees"])
        self._update()

    def __panel__(self):
        return pmui.Column(self.search, self.results, sizing_mode="stretch_width")

    @property
    def active(self) -> bool:
        """Whether there is a query (and so a table to show)."""
        return bool(getattr(self._state, f"{self.source}_search"))

    def _on_search(self, event):
        setattr(self._state, f"{self.source}_search", event.new or "")

    def _on_selection(self, event):
        if event.new and self._table.value is not None:
            path = self._table.value["path"].iloc[event.new[0]]
            setattr(self._state, f"{self.source}_path", path)

    @property
    def frame(self):
        """The rows the table holds now (all pages)."""
        return self._table.value

    def _update(self, *_):
        shown = self._state.shown(self.source)
        query = getattr(self._state, f"{self.source}_search")
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
        self._syncing = False
        self._loaded = False  # the page has loaded (the search field may join)
        self._stats_shown = False
        self._stats_layout = None
        self.tree = WindowedTree(items=[], level_indent=16, max_height=600,
                                 sizing_mode="stretch_width", margin=(0, 0))
        self.tree.param.watch(self._on_expanded, "expanded")
        self.tree.param.watch(self._on_active, "active")
        self._header = pmui.Typography("", variant="body2", margin=(0, 10),
                                       sizing_mode="stretch_width")
        self.table = LeafTableView(state, source=self.source)
        self.stats = LeafStatsView(state, source=self.source)
        self._empty = pmui.Typography(
            "Load a tree from the sidebar." if self.source == "input"
            else "Run an operation to see its result here.", variant="body2", margin=(10, 10))
        # One flat column whose parts join when first needed: every component, and every
        # level of nested layout, adds to the first paint (a nested pmui.Column ~0.3 s here).
        # The search field joins once the page has loaded, so the tree paints first.
        self._layout = pmui.Column(self._header, sizing_mode="stretch_width")
        pn.state.onload(self._on_load)
        state.param.watch(self._arrange, [f"{self.source}_search", f"{self.source}_path"])
        watched = ["selected", "trees", "input_expanded", "input_path"] if self.source == "input" \
            else ["result", "result_name", "result_expanded", "result_path"]
        state.param.watch(self._update, watched)
        self._update()

    def __panel__(self):
        return self._layout

    # state -> widget ------------------------------------------------------------------------

    def _on_load(self):
        self._loaded = True
        self._arrange()

    def _arrange(self, *_):
        shown = self._state.shown(self.source) is not None
        searching = shown and self.table.active
        self._stats_shown |= shown and bool(getattr(self._state, f"{self.source}_path"))
        parts = [self._header] + ([self._empty] if not shown else [])
        if shown:
            parts += [self.table.search] if self._loaded else []
            parts += [self.table.results] if searching or self.table.results in \
                self._layout.objects else []
            parts += [self.tree] + ([self.stats_view] if self._stats_shown else [])
        self.table.results.visible = searching
        self.tree.visible = not searching
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
            self._set(items=[], expanded=[], active=[])
            self._arrange()
            return
        name, tree, index = shown
        root = index.root
        self._header.object = (f"**{name}** · {plural(root.n_leaves, 'leaf', 'leaves')} · "
                               f"{human_count(root.n_params)} params · {human_bytes(root.nbytes)}")
        expanded = getattr(self._state, f"{self.source}_expanded")
        items, paths = index.items(expanded, root_label=name,
                                   values=lambda i: short_values(tree, index, i))
        path = getattr(self._state, f"{self.source}_path")
        at = _find(items, path) if path else None
        if path and at is None:
            missing = [i for i in index.reveal(path) if i not in expanded]
            if missing:  # a leaf picked in the search table: open its ancestors
                setattr(self._state, f"{self.source}_expanded", [*expanded, *missing])
                return
        self._set(items=items, expanded=paths, active=[at] if at else [])
        self._arrange()  # after the items: a tree joining the page arrives with them

    def _set(self, **values):
        self._syncing = True
        try:
            self.tree.param.update(**values)
        finally:
            self._syncing = False

    # widget -> state ------------------------------------------------------------------------

    def _on_expanded(self, event):
        if self._syncing:
            return
        shown = self._state.shown(self.source)
        if shown is None:
            return
        index = shown[2]
        ids = [item["id"] for p in event.new if (item := _item_at(self.tree.items, p))]
        before = getattr(self._state, f"{self.source}_expanded")
        visible = set(index.visible_ids(before))
        # Nodes hidden under a collapsed parent stay expanded for when it opens again.
        after = [i for i in before if i not in visible] + ids
        # Opening a range closes the ranges beside it: the browser redraws every item on
        # each change (about a millisecond each), so the items shown must stay few.
        for new in set(ids) - set(before):
            closing = set(index.sibling_ranges(new))
            after = [i for i in after if i not in closing]
        setattr(self._state, f"{self.source}_expanded", after)

    def _on_active(self, event):
        if self._syncing or not event.new:
            return
        item = _item_at(self.tree.items, event.new[0])
        if item is None or item.get("selectable") is False:
            return
        shown = self._state.shown(self.source)
        if shown is not None and shown[2].row_of(item["id"]) is not None:
            setattr(self._state, f"{self.source}_path", item["id"])

    # for tests and benchmarks ---------------------------------------------------------------

    def expand(self, node_id: str) -> None:
        """Expands a node as a click on its arrow would."""
        path = _find(self.tree.items, node_id)
        if path is None:
            raise KeyError(f"{node_id!r} is not shown")
        self.tree.expanded = [*self.tree.expanded, path]

    def shown_ids(self) -> list[str]:
        """Ids of every item the widget holds (placeholders included)."""
        out: list[str] = []

        def walk(items):
            for item in items:
                out.append(item["id"])
                walk(item.get("items") or [])

        walk(self.tree.items)
        return out
