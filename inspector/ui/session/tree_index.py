"""The app's lazy tree over a `TreeIndex`: item ids, widget items, what opens at first.

A browser cannot hold 100k tree items (DESIGN.md: 25 s to first paint with 50k sent). The
index (`inspector.core.tree_index`, shared with the command line's `show`) folds repeated
layers and groups more than `GROUP_SIZE` siblings into ranges; this module answers "which
items are visible when these nodes are expanded". Item ids are key paths
(`['layers']['layer_0001']`); a range's id is its parent's path plus `[lo:hi]`, a fold's
`[lo…hi]`, which no real key path can be.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

from inspector.core import caches
from inspector.core import tree_index as _core
from inspector.core.node_text import human_bytes
from inspector.core.tree_index import FOLD_MIN, GROUP_SIZE, natural_key  # noqa: F401
from inspector.ui.session.quant_rows import WARNING, badges

ROOT_ID = "(root)"
_RANGE_ID = re.compile(r"^(.*)\[(\d+):(\d+)\]$")
_FOLD_ID = re.compile(r"^(.*)\[(\d+)\u2026(\d+)\]$")
_SEP = "\u2003"  # an em space: HTML does not collapse it, so columns of a label stay apart

_ICONS = {"dict": "data_object", "list": "data_array", "tuple": "data_array",
          "namedtuple": "data_object", "dataclass": "data_object", "custom": "account_tree",
          "None": "block", "leaf": "grid_on", "range": "more_horiz",
          "opaque": "inventory_2"}


class TreeIndex(_core.TreeIndex):
    """The core index, with the ids, items and labels of the app's tree widget.

    Build one per tree and reuse it (`index_for` caches them).
    """

    def __init__(self, rows: list, tree=None):
        super().__init__(rows, tree)
        self._frame = None
        self._leaves = None
        self._lock = threading.Lock()

    # ids ------------------------------------------------------------------------------------

    def node_id(self, i: int) -> str:
        """The item id of row `i`: its key path (`ROOT_ID` for the root)."""
        return self.rows[i].path or ROOT_ID

    def row_of(self, node_id: str) -> int | None:
        """The row of a node id, or None (a range id or an unknown path)."""
        if node_id == ROOT_ID:
            return 0
        return self.by_path.get(node_id)

    def _entry(self, node_id: str):
        """`("node", row)`, `("range", parent_row, lo, hi)` or None for an unknown id."""
        i = self.row_of(node_id)
        if i is not None:
            return ("node", i)
        m = _RANGE_ID.match(node_id)
        if m:
            parent = self.row_of(m.group(1) or ROOT_ID)
            lo, hi = int(m.group(2)), int(m.group(3))
            if parent is not None and 0 <= lo < hi <= self.children.count(parent):
                return ("range", parent, lo, hi)
        m = _FOLD_ID.match(node_id)
        if m:
            parent = self.row_of(m.group(1) or ROOT_ID)
            entry = None if parent is None else \
                ("fold", parent, int(m.group(2)), int(m.group(3)) + 1)
            if entry is not None and (entry[2], entry[3]) in self._fold_runs(parent):
                return entry
        return None

    def children_of(self, node_id: str) -> list[str]:
        """The ids shown under `node_id` when it is expanded (children or ranges)."""
        entry = self._entry(node_id)
        return [] if entry is None else [self._id(e) for e in self.child_entries(entry)]

    def sibling_ranges(self, node_id: str) -> list[str]:
        """For a range id, the ids of the other ranges beside it (else an empty list)."""
        target = self._entry(node_id)
        if target is None or target[0] != "range":
            return []
        entry = ("node", target[1])
        while True:
            kids = self.child_entries(entry)
            if target in kids:
                return [self._id(e) for e in kids if e != target]
            inner = [e for e in kids if e[0] != "node" and e[2] <= target[2] and target[3] <= e[3]]
            if not inner:
                return []
            entry = inner[0]

    def reveal(self, node_id: str) -> list[str]:
        """Ids to expand (root first) so that `node_id` is shown, ranges included."""
        i = self.row_of(node_id)
        if i is None or i == 0:
            return []
        chain = []
        while self.parent[i] >= 0:
            p, k = int(self.parent[i]), int(self._position[i])
            steps = [self.node_id(p)]
            entry = ("node", p)
            while True:
                kids = self.child_entries(entry)
                group = next((e for e in kids if e[0] != "node" and e[2] <= k < e[3]), None)
                if group is None:
                    break
                entry = group
                steps.append(self._id(entry))
            chain = steps + chain
            i = p
        return chain

    def _id(self, entry) -> str:
        if entry[0] == "node":
            return self.node_id(entry[1])
        kind, parent, lo, hi = entry
        if kind == "fold":
            return f"{self.rows[parent].path}[{lo}\u2026{hi - 1}]"
        return f"{self.rows[parent].path}[{lo}:{hi}]"

    def _has_children(self, entry) -> bool:
        return self.has_children(entry)

    # items ----------------------------------------------------------------------------------

    def items(self, expanded, root_label: str = "", values=None
              ) -> tuple[list[dict], list[tuple[int, ...]]]:
        """Returns `(items, expanded_paths)` for `pmui.Tree`.

        Args:
            expanded: ids of the expanded nodes. Only their children are built; a collapsed
                node with children gets one placeholder child, so the widget draws its
                expand arrow and reports the expansion.
            root_label: the key shown on the root item (the tree's name).
            values: optional `row -> str | None`, a short text of a leaf's values, appended
                to its label (called only for the leaves shown).

        Returns:
            The items (the root item, holding everything visible) and the index paths of the
            expanded items among them, as `pmui.Tree.expanded` wants.
        """
        expanded = set(expanded)
        paths: list[tuple[int, ...]] = []
        root = self._item(("node", 0), expanded, (0,), paths, values, root_label)
        return [root], paths

    def _item(self, entry, expanded, path, paths, values, root_label="") -> dict:
        node_id = self._id(entry)
        label, secondary = self.label(entry, root_label)
        if values is not None and entry[0] == "node" and entry[1] in self.leaf_number:
            text = values(entry[1])
            if text:
                label += f"{_SEP}= {text}"
        item = {"id": node_id, "label": label, "icon": self._icon(entry)}
        group = self.quant_group(entry[1]) if entry[0] == "node" else None
        if group is not None and group.problems:
            item["buttons"] = badges(group)
            item["title"] = "\n".join(group.problems)
            # a swatch before the label too: in a narrow column the badges sit past its edge
            item["heat"] = {"color": WARNING, "title": item["title"]}
        if entry[0] == "node" and entry[1] == 0:
            item["path"] = self.rows[0].path  # the keystr of the root: ''
        if secondary:
            item["secondary"] = secondary
        if self._has_children(entry):
            if node_id in expanded:
                paths.append(path)
                item["items"] = [self._item(e, expanded, path + (k,), paths, values)
                                 for k, e in enumerate(self.child_entries(entry))]
            else:
                item["items"] = [{"id": node_id + " …", "label": "loading …", "selectable": False}]
        return item

    def visible_ids(self, expanded) -> list[str]:
        """Ids of every item `items(expanded)` returns (placeholders excluded), in order."""
        expanded = set(expanded)
        out: list[str] = []

        def walk(entry):
            node_id = self._id(entry)
            out.append(node_id)
            if node_id in expanded and self._has_children(entry):
                for e in self.child_entries(entry):
                    walk(e)

        walk(("node", 0))
        return out

    def default_expanded(self, budget: int = 40) -> list[str]:
        """Ids to expand at first: breadth first, while fewer than `budget` items show.

        A small tree opens whole; a big one shows its top level (the root is always open).
        """
        root = ("node", 0)
        if not self._has_children(root):
            return []
        opened = [ROOT_ID]
        shown = 1 + len(self.child_entries(root))
        frontier = [e for e in self.child_entries(root) if self._has_children(e)]
        while frontier:
            nxt = []
            for entry in frontier:
                # More children than the budget would not open anyway; folding them first
                # would compare their structures before the first paint.
                if entry[0] == "node" and self.children.count(entry[1]) > budget:
                    continue
                kids = self.child_entries(entry)
                if shown + len(kids) > budget:
                    return opened
                opened.append(self._id(entry))
                shown += len(kids)
                nxt.extend(e for e in kids if self._has_children(e))
            frontier = nxt
        return opened

    # labels ---------------------------------------------------------------------------------

    def label(self, entry, root_label: str = "") -> tuple[str, str]:
        """Returns `(label, secondary)`: key and kind (with shape and size for a leaf) on the
        first line; for inner nodes and ranges, their totals on the second."""
        parts, secondary = self.label_parts(entry, root_label)
        return _SEP.join(parts), secondary

    def _icon(self, entry) -> str:
        return _ICONS["range"] if entry[0] != "node" else _ICONS.get(
            self.rows[entry[1]].kind, "grid_on")

    # leaves ---------------------------------------------------------------------------------

    def flat_leaves(self, tree) -> list:
        """`jax.tree.leaves(tree)`, kept: an index of an unpacked tree serves that tree only."""
        if self._leaves is None:
            import jax

            self._leaves = jax.tree.leaves(tree)
        return self._leaves

    def leaf_frame(self):
        """A pandas DataFrame of every leaf (path, dtype, shape, params, bytes), built once."""
        with self._lock:
            if self._frame is None:
                import pandas as pd

                rows = [self.rows[i] for i in self.leaf_number]
                self._frame = pd.DataFrame({
                    "path": [r.path or ROOT_ID for r in rows],
                    "dtype": [r.dtype or r.type_name for r in rows],
                    "shape": ["" if r.shape is None else str(list(r.shape)) for r in rows],
                    "params": [r.n_params for r in rows],
                    "size": [human_bytes(r.nbytes) for r in rows],
                    "sharding": [r.sharding or "" for r in rows],
                })
            return self._frame


_CACHE: OrderedDict = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 32
caches.register_mapping("tree indexes", _CACHE, _CACHE_LOCK)


def index_for(tree, rows: list | None = None) -> TreeIndex:
    """Returns the (cached) `TreeIndex` of `tree`; `rows` spares describing it again.

    Packed trees are cached by layout, so every weighted sum of the same trees shares one
    index; other trees by identity (the cache holds them, so an id is never reused).
    """
    from inspector import PackedTree, describe

    key = ("layout", tree.layout) if isinstance(tree, PackedTree) else ("id", id(tree))
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit[1]
    index = TreeIndex(rows if rows is not None else describe(tree), tree)
    with _CACHE_LOCK:
        _CACHE[key] = (tree if key[0] == "id" else None, index)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return index
