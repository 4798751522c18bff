"""`LazyTree`: a `WindowedTree` fed lazily from a `TreeIndex`, synced with a `TreeViewState`.

The one lazy-tree view of the app: the input and result trees (`tree_view.py`) and the
comparison's union (`diff_view.py`) each hold one. Expanding a node in the browser sets the
widget's `expanded` (index paths); this turns them into node ids, stores them in the view's
`TreeViewState`, and the state change sends the new items, now with that node's children.
Selecting a row sets the state's `path`; a `path` set elsewhere (a search hit) opens its
ancestors and ranges so that it shows.
"""

from __future__ import annotations

from collections.abc import Callable

import panel as pn

from inspector.ui.windowed_tree import WindowedTree


def walk(items: list):
    """Every item of a tree widget's `items`, depth first (placeholders included)."""
    for item in items:
        yield item
        yield from walk(item.get("items") or [])


def find(items: list, target: str, path=()) -> tuple[int, ...] | None:
    """The index path of the item with id `target` among nested `items`, or None."""
    for k, item in enumerate(items):
        if item.get("id") == target:
            return (*path, k)
        if item.get("items"):
            found = find(item["items"], target, (*path, k))
            if found:
                return found
    return None


def item_at(items: list, path) -> dict | None:
    """The item at an index path, or None."""
    item = None
    for k in path:
        if not items or k >= len(items):
            return None
        item = items[k]
        items = item.get("items") or []
    return item


class LazyTree(pn.viewable.Viewer):
    """A lazily fed windowed tree.

    Args:
        view: the `TreeViewState` it shows and sets (expanded, path).
        source: `() -> (index, options) | None`: what to show now (None: nothing), and the
            keyword arguments of its `items` (`root_label`, `values`, ...).
        max_height: the height of the scrolled window, in pixels.
    """

    def __init__(self, view, source: Callable, max_height: int = 600, **params):
        super().__init__(**params)
        self.view = view
        self._source = source
        self._syncing = False
        self.tree = WindowedTree(items=[], level_indent=16, max_height=max_height,
                                 sizing_mode="stretch_width", margin=(0, 0))
        self.tree.param.watch(self._on_expanded, "expanded")
        self.tree.param.watch(self._on_active, "active")
        view.param.watch(self.update, ["expanded", "path"])

    def __panel__(self):
        return self.tree

    def index(self):
        shown = self._source()
        return None if shown is None else shown[0]

    # state -> widget ------------------------------------------------------------------------

    def update(self, *_) -> None:
        shown = self._source()
        if shown is None:
            self._set(items=[], expanded=[], active=[])
            return
        index, options = shown
        expanded, path = self.view.expanded, self.view.path
        items, paths = index.items(expanded, **options)
        at = find(items, path) if path else None
        if path and at is None:
            missing = [i for i in index.reveal(path) if i not in expanded]
            if missing:  # a node picked elsewhere (a search hit): open its ancestors
                self.view.expanded = [*expanded, *missing]
                return
        self._set(items=items, expanded=paths, active=[at] if at else [])

    def _set(self, **values):
        self._syncing = True
        try:
            self.tree.param.update(**values)
        finally:
            self._syncing = False

    # widget -> state ------------------------------------------------------------------------

    def _on_expanded(self, event):
        index = self.index()
        if self._syncing or index is None:
            return
        ids = [item["id"] for p in event.new if (item := item_at(self.tree.items, p))]
        before = self.view.expanded
        visible = set(index.visible_ids(before))
        # Nodes hidden under a collapsed parent stay expanded for when it opens again.
        after = [i for i in before if i not in visible] + ids
        # Opening a range closes the ranges beside it: the items shown stay few.
        for new in set(ids) - set(before):
            closing = set(index.sibling_ranges(new))
            after = [i for i in after if i not in closing]
        self.view.expanded = after

    def _on_active(self, event):
        if self._syncing or not event.new:
            return
        item = item_at(self.tree.items, event.new[0])
        index = self.index()
        if item is None or item.get("selectable") is False or index is None:
            return
        if index.row_of(item["id"]) is not None:
            self.view.path = item["id"]

    # for tests and benchmarks ---------------------------------------------------------------

    def expand(self, node_id: str) -> None:
        """Expands a node as a click on its arrow would."""
        path = find(self.tree.items, node_id)
        if path is None:
            raise KeyError(f"{node_id!r} is not shown")
        self.tree.expanded = [*self.tree.expanded, path]

    def select(self, node_id: str) -> None:
        """Selects a node as a click on its row would."""
        path = find(self.tree.items, node_id)
        if path is None:
            raise KeyError(f"{node_id!r} is not shown")
        self.tree.active = [path]

    def shown(self) -> dict[str, dict]:
        """Every item the widget holds, by id (placeholders excluded)."""
        return {item["id"]: item for item in walk(self.tree.items)
                if item.get("selectable") is not False}

    def shown_ids(self) -> list[str]:
        """Ids of every item the widget holds (placeholders included)."""
        return [item["id"] for item in walk(self.tree.items)]
