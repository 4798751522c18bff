"""A tree's `describe` rows, indexed so a tree widget can be fed lazily.

A browser cannot hold 100k tree items (DESIGN.md: 25 s to first paint with 50k sent). The
index answers "which items are visible when these nodes are expanded": the root and its
children at first, the children of a node once it is expanded, and more than `GROUP_SIZE`
siblings folded into range nodes (`[100–199]`), nested when there are very many. Item ids are
key paths (`['layers']['layer_0001']`); a range's id is its parent's path plus `[lo:hi]`,
which no real key path can be.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

import numpy as np

from inspector.core import caches
from inspector.core.node_text import human_bytes, human_count, node_text, shape_text, totals_text
from inspector.ui.session.quant_rows import WARNING, badges, logical_key, quant_rows

GROUP_SIZE = 100
FOLD_MIN = 3  # this many siblings of one structure, or more, fold into one row
ROOT_ID = "(root)"
_RANGE_ID = re.compile(r"^(.*)\[(\d+):(\d+)\]$")
_FOLD_ID = re.compile(r"^(.*)\[(\d+)\u2026(\d+)\]$")
_SEP = "\u2003"  # an em space: HTML does not collapse it, so columns of a label stay apart

_ICONS = {"dict": "data_object", "list": "data_array", "tuple": "data_array",
          "namedtuple": "data_object", "dataclass": "data_object", "custom": "account_tree",
          "None": "block", "leaf": "grid_on", "range": "more_horiz",
          "opaque": "inventory_2"}


class TreeIndex:
    """Parent-to-children links over `describe` rows, and the tree items built from them.

    Build one per tree and reuse it (`index_for` caches them): building costs about a
    microsecond per row, answering an expand costs only the items it returns.

    Runs of `FOLD_MIN` or more sibling subtrees of identical structure (keys, kinds, shapes,
    dtypes below them) fold into one row, `['layers'][0…79] ×80`, which opens into the
    children (or their ranges) as before.
    """

    fold = True

    def __init__(self, rows: list, tree=None):
        self.rows = rows
        n = len(rows)
        self.by_path: dict[str, int] = {row.path: i for i, row in enumerate(rows)}
        # quantized weights (given the tree): one row each, their scales not shown as rows
        self.quant = None if tree is None else quant_rows(tree, rows, self.by_path)
        hidden = self.quant.hidden if self.quant is not None else ()
        parent = [-1] * n
        position = [0] * n  # place among the parent's children
        counts = [0] * n
        self.leaf_number: dict[int, int] = {}  # row -> position in jax.tree.leaves order
        stack: list[int] = []
        leaves = 0
        for i, row in enumerate(rows):
            del stack[row.depth:]
            if stack:
                p = parent[i] = stack[-1]
                if i in hidden:  # a scale or zero point: shown with its weight's row
                    position[i] = -1
                else:
                    position[i] = counts[p]
                    counts[p] += 1
            stack.append(i)
            if row.kind == "leaf" or row.kind == "opaque":  # an Opaque is a JAX leaf too
                self.leaf_number[i] = leaves
                leaves += 1
        # Children as flat arrays (CSR), not a list per node: a 100k-leaf tree would add 170k
        # objects for the garbage collector to walk on every full collection of the server.
        self.parent = np.asarray(parent, np.int64)
        self._row_position = np.asarray(position, np.int64)  # in JAX's (the rows') order
        self._ptr = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=self._ptr[1:])
        self._kids = np.empty(int(self._ptr[-1]), np.int64)
        shown_rows = np.flatnonzero(self._row_position[1:] >= 0) + 1
        self._kids[self._ptr[self.parent[shown_rows]] + self._row_position[shown_rows]] = \
            shown_rows
        # Shown in natural key order (`h.2` before `h.10`); JAX sorts dict keys as text.
        self._shown = self._kids.copy()
        self._position = self._row_position.copy()
        self.reordered: dict[int, tuple[str, str]] = {}  # parent -> (a key JAX puts first,
        #                                                    the key shown first)
        # Only parents with two or more numbered keys can differ (a few % of the nodes).
        numbered = np.fromiter((_DIGITS.search(r.key) is not None for r in rows), bool, n)
        numbered[0] = False
        twice = np.bincount(self.parent[numbered], minlength=n) > 1 if n > 1 else []
        for p in np.flatnonzero(twice):
            self._natural_order(int(p))
        self.children = _Children(self._ptr, self._shown)
        self._frame = None
        self._leaves = None
        self._folds: dict[int, list] = {}
        self._lock = threading.Lock()

    def _natural_order(self, p: int) -> None:
        """Orders the children of row `p` by natural key order, if that differs from JAX's."""
        a, b = self._ptr[p], self._ptr[p + 1]
        kids = self._kids[a:b]
        keys = [self.rows[j].key for j in kids]
        order = sorted(range(len(keys)), key=lambda k: natural_key(keys[k]))
        if order == list(range(len(keys))):
            return
        self._shown[a:b] = kids[order]
        self._position[kids[order]] = np.arange(len(order))
        first = next(k for k, o in enumerate(order) if o != k)
        self.reordered[p] = (keys[first], keys[order[first]])

    def row_children(self, i: int) -> list[int]:
        """The child rows of row `i` in JAX's order (its flattening order), not as shown."""
        return self._kids[self._ptr[i]:self._ptr[i + 1]].tolist()

    @property
    def root(self):
        return self.rows[0]

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

    # folds ----------------------------------------------------------------------------------

    def _end(self, i: int) -> int:
        """One past the last row of the subtree of row `i` (rows are in pre-order)."""
        while i > 0:  # the next sibling in JAX's order, which the rows follow
            p, k = int(self.parent[i]), int(self._row_position[i])
            if k + 1 < self.children.count(p):
                return int(self._kids[self._ptr[p] + k + 1])
            i = p
        return len(self.rows)

    def _fold_runs(self, parent: int) -> list[tuple[int, int]]:
        """Runs `(lo, hi)` of the parent's children that fold: `FOLD_MIN` or more adjacent
        inner nodes of one structure. Cheap totals are compared first, so full structures are
        compared only where they could match."""
        runs = self._folds.get(parent)
        if runs is not None:
            return runs
        runs = []
        kids = self.children[parent]
        if self.fold and len(kids) >= FOLD_MIN:
            rows = self.rows

            def cheap(j):
                r = rows[j]
                return (r.kind, r.type_name, r.n_children, r.n_leaves, r.n_params, r.nbytes)

            def full(j):
                d = rows[j].depth
                return hash(tuple((r.depth - d, r.key, r.kind, r.shape, r.dtype)
                                  for r in rows[j + 1:self._end(j)]))

            lo = 0
            keys = [cheap(j) for j in kids]
            for k in range(1, len(kids) + 1):
                if k < len(kids) and keys[k] == keys[lo]:
                    continue
                if k - lo >= FOLD_MIN and rows[kids[lo]].n_children:
                    sigs = [full(j) for j in kids[lo:k]]
                    start = lo
                    for m in range(lo + 1, k + 1):
                        if m < k and sigs[m - lo] == sigs[start - lo]:
                            continue
                        if m - start >= FOLD_MIN:
                            runs.append((start, m))
                        start = m
                lo = k
        self._folds[parent] = runs
        return runs

    # children -------------------------------------------------------------------------------

    def child_entries(self, entry) -> list:
        """The entries shown under a node or range: its children, or ranges of them."""
        if entry[0] == "node":
            parent, lo, hi = entry[1], 0, self.children.count(entry[1])
            runs = self._fold_runs(parent)
            if runs:
                kids, out, k = self.children[parent], [], 0
                for a, b in runs:
                    out += [("node", j) for j in kids[k:a]]
                    out.append(("fold", parent, a, b))
                    k = b
                out += [("node", j) for j in kids[k:]]
                if len(out) <= GROUP_SIZE:
                    return out
        else:
            _, parent, lo, hi = entry
        n = hi - lo
        if n <= GROUP_SIZE:
            return [("node", j) for j in self.children.slice(parent, lo, hi)]
        size = GROUP_SIZE
        while -(-n // size) > GROUP_SIZE:
            size *= GROUP_SIZE
        return [("range", parent, a, min(a + size, hi)) for a in range(lo, hi, size)]

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
        return entry[0] != "node" or self.children.count(entry[1]) > 0

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
        if entry[0] == "fold":
            _, parent, lo, hi = entry
            kids = self.children.slice(parent, lo, hi)
            first, last = self.rows[kids[0]], self.rows[kids[-1]]
            return (_SEP.join([f"[{lo}\u2026{hi - 1}] \u00d7{hi - lo:,}",
                               f"{first.key} \u2026 {last.key}", node_text(first)]),
                    f"{human_count(first.n_params)} params each · "
                    f"{human_bytes(first.nbytes * (hi - lo))} in all")
        if entry[0] == "range":
            _, parent, lo, hi = entry
            kids = self.children.slice(parent, lo, hi)
            first, last = self.rows[kids[0]].key, self.rows[kids[-1]].key
            leaves = sum(self.rows[j].n_leaves for j in kids)
            params = sum(self.rows[j].n_params for j in kids)
            nbytes = sum(self.rows[j].nbytes for j in kids)
            return (_SEP.join([f"[{lo}–{hi - 1}]", f"{first} … {last}"]),
                    totals_text(leaves, params, nbytes))
        row = self.rows[entry[1]]
        key = row.key or root_label or "(root)"
        group = self.quant_group(entry[1])
        if group is not None and group.shape is not None:
            dtype = group.dtype if group.usable else row.dtype  # codes as they are
            return _SEP.join([logical_key(group), shape_text(dtype, group.shape),
                              group.layout, human_bytes(self.group_bytes(group))]), ""
        if row.kind == "leaf":
            if row.shape is None:
                return _SEP.join([key, node_text(row)]), ""
            parts = [key, node_text(row), human_bytes(row.nbytes)]
            if row.sharding:  # P('data', None) over data=4, model=2
                parts.append(row.sharding.replace("PartitionSpec(", "P("))
            if row.quant:  # Q4_K · 4.5 bits/value · 9 MiB in the file
                parts.append(row.quant)
            return _SEP.join(parts), ""
        if row.kind == "None" or row.kind == "opaque":  # ‹ListConfig› [3 items]
            return _SEP.join([key, node_text(row)]), ""
        return (_SEP.join([key, node_text(row)]),
                totals_text(row.n_leaves, row.n_params, row.nbytes) + self.order_note(entry[1]))

    def order_note(self, i: int) -> str:
        """For a node whose children are shown in another order than JAX's, what JAX's is."""
        if i not in self.reordered:
            return ""
        jax_first, shown_first = self.reordered[i]
        return f" · natural key order; JAX's order (keys sorted as text) puts {jax_first} " \
               f"before {shown_first}"

    def quant_group(self, i: int):
        """The quantized weight shown on row `i` (a `QuantGroup`), or None."""
        return None if self.quant is None else self.quant.groups.get(i)

    def group_bytes(self, group) -> int:
        """The bytes of a group's members as stored (codes, scales, zero points)."""
        return sum(self.rows[self.by_path[p]].nbytes for p in group.members.values()
                   if p in self.by_path)

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


def natural_key(key: str) -> list:
    """Sorts numbered keys by number: `['h.2']` before `['h.10']`, `[2]` before `[10]`.

    >>> sorted(["['h.10']", "['h.2']", "['h.1']"], key=natural_key)
    ["['h.1']", "['h.2']", "['h.10']"]
    """
    return [int(c) if k % 2 else c for k, c in enumerate(_DIGITS.split(key))]


_DIGITS = re.compile(r"(\d+)")


class _Children:
    """`children[i]`: the child rows of row `i` (a list), read from the CSR arrays."""

    __slots__ = ("_ptr", "_kids")

    def __init__(self, ptr, kids):
        self._ptr, self._kids = ptr, kids

    def __getitem__(self, i: int) -> list[int]:
        return self._kids[self._ptr[i]:self._ptr[i + 1]].tolist()

    def count(self, i: int) -> int:
        return int(self._ptr[i + 1] - self._ptr[i])

    def slice(self, i: int, lo: int, hi: int) -> list[int]:
        start = self._ptr[i]
        return self._kids[start + lo:start + hi].tolist()


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
