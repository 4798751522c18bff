"""A tree's `describe` rows, indexed: children, repeated layers folded, many siblings in ranges.

One implementation of how a big tree reads at a glance, for every front: the app's lazy tree
(`inspector.ui.session.tree_index` adds item ids and widget items on top) and the command
line's `show`. Entries are `("node", row)`, `("fold", parent, lo, hi)` (runs of `FOLD_MIN`
or more sibling subtrees of one structure: `['layers'][0…79] ×80`) and
`("range", parent, lo, hi)` (more than `GROUP_SIZE` siblings, `[100–199]`, nested when there
are very many), `lo`/`hi` being positions among the parent's children as shown.
"""

from __future__ import annotations

import re

import numpy as np

from inspector.core.node_text import human_bytes, human_count, node_text, shape_text, totals_text

GROUP_SIZE = 100
FOLD_MIN = 3  # this many siblings of one structure, or more, fold into one row


class TreeIndex:
    """Parent-to-children links over `describe` rows, and the entries shown under each node.

    Building costs about a microsecond per row; answering costs only the entries returned.
    Runs of `FOLD_MIN` or more sibling subtrees of identical structure (keys, kinds, shapes,
    dtypes below them) fold into one entry; set `fold = False` to list every node.
    """

    fold = True

    def __init__(self, rows: list, tree=None):
        self.rows = rows
        self._tree = tree  # read by `_hidden_rows` during the build, then let go
        self.quant = None
        n = len(rows)
        # Vectorised over the rows (a 100k-leaf tree has 150k+): in pre-order, a row's parent
        # is the last row before it one level up, and its place among its siblings is its rank
        # among the rows with that parent.
        depth = np.fromiter((r.depth for r in rows), np.int64, n)
        # an Opaque (a checkpoint's foreign object) is a JAX leaf too
        leaf = np.fromiter((r.kind == "leaf" or r.kind == "opaque" for r in rows), bool, n)
        everyone = np.arange(n)
        parent = np.full(n, -1, np.int64)
        for d in range(1, int(depth.max(initial=0)) + 1):
            at, above = everyone[depth == d], everyone[depth == d - 1]
            parent[at] = above[np.searchsorted(above, at) - 1]
        self.by_path: dict[str, int] = dict(zip((r.path for r in rows), range(n), strict=True))
        # rows a front shows inside another row (a quantized weight's scales): no one's child
        hidden = np.asarray(sorted(self._hidden_rows()), np.int64)
        shown = np.ones(n, bool)
        shown[hidden] = False
        kid_rows = everyone[1:][shown[1:]]
        counts = np.bincount(parent[kid_rows], minlength=n) if n > 1 else np.zeros(n, np.int64)
        leaves = np.flatnonzero(leaf).tolist()  # row -> position in jax.tree.leaves order:
        self.leaf_number: dict[int, int] = dict(zip(leaves, range(len(leaves)), strict=True))
        # Children as flat arrays (CSR), not a list per node: a 100k-leaf tree would add 170k
        # objects for the garbage collector to walk on every full collection of the server.
        self.parent = parent
        self._ptr = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=self._ptr[1:])
        # rows grouped by parent, in order
        by_parent = kid_rows[np.argsort(parent[kid_rows], kind="stable")]
        self._kids = by_parent.astype(np.int64)
        position = np.zeros(n, np.int64)  # place among the parent's children
        position[by_parent] = np.arange(len(by_parent)) - self._ptr[parent[by_parent]]
        position[hidden] = -1
        self._row_position = position  # in JAX's (the rows') order
        # Shown in natural key order (`h.2` before `h.10`); JAX sorts dict keys as text.
        self._shown = self._kids.copy()
        self._position = self._row_position.copy()
        self.reordered: dict[int, tuple[str, str]] = {}  # parent -> (a key JAX puts first,
        #                                                    the key shown first)
        # Only parents with two or more numbered keys can differ (a few % of the nodes).
        numbered = np.fromiter((_DIGITS.search(r.key) is not None for r in rows), bool, n)
        if n:
            numbered[0] = False
        twice = np.bincount(self.parent[numbered], minlength=n) > 1 if n > 1 else []
        self._orders: dict[tuple, list[int]] = {}
        for p in np.flatnonzero(twice):
            self._natural_order(int(p))
        del self._orders
        self._tree = None
        self.children = _Children(self._ptr, self._shown)
        self._folds: dict[int, list] = {}

    def _hidden_rows(self):
        """Rows shown inside another row rather than as children: a quantized weight's scales
        and zero points (given the tree; `self.rows` and `self.by_path` are set by then)."""
        if self._tree is not None and any(r.quant for r in self.rows):
            from inspector.core.quant.rows import quant_rows  # imports JAX: only when needed

            self.quant = quant_rows(self._tree, self.rows, self.by_path)
        return self.quant.hidden if self.quant is not None else ()

    def quant_group(self, i: int):
        """The quantized weight shown on row `i` (a `QuantGroup`), or None."""
        return None if self.quant is None else self.quant.groups.get(i)

    def group_bytes(self, group) -> int:
        """The bytes of a group's members as stored (codes, scales, zero points)."""
        return sum(self.rows[self.by_path[p]].nbytes for p in group.members.values()
                   if p in self.by_path)

    def _natural_order(self, p: int) -> None:
        """Orders the children of row `p` by natural key order, if that differs from JAX's."""
        a, b = self._ptr[p], self._ptr[p + 1]
        kids = self._kids[a:b]
        keys = tuple(self.rows[j].key for j in kids)
        order = self._orders.get(keys)  # repeated layers have the same keys: sort them once
        if order is None:
            order = self._orders[keys] = sorted(range(len(keys)),
                                                key=lambda k: natural_key(keys[k]))
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
        """The entries shown under a node or range: its children, folds, or ranges of them."""
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

    def has_children(self, entry) -> bool:
        """Whether anything shows under `entry` (folds and ranges always hold some)."""
        return entry[0] != "node" or self.children.count(entry[1]) > 0

    # labels ---------------------------------------------------------------------------------

    def label_parts(self, entry, root_label: str = "") -> tuple[list[str], str]:
        """Returns `(parts, secondary)`: the key and what the node is (with shape and size for
        a leaf) as separate parts, and for inner nodes, folds and ranges their totals."""
        if entry[0] == "fold":
            _, parent, lo, hi = entry
            kids = self.children.slice(parent, lo, hi)
            first, last = self.rows[kids[0]], self.rows[kids[-1]]
            return ([f"[{lo}\u2026{hi - 1}] \u00d7{hi - lo:,}", f"{first.key} \u2026 {last.key}",
                     node_text(first)],
                    f"{human_count(first.n_params)} params each · "
                    f"{human_bytes(first.nbytes * (hi - lo))} in all")
        if entry[0] == "range":
            _, parent, lo, hi = entry
            kids = self.children.slice(parent, lo, hi)
            first, last = self.rows[kids[0]].key, self.rows[kids[-1]].key
            leaves = sum(self.rows[j].n_leaves for j in kids)
            params = sum(self.rows[j].n_params for j in kids)
            nbytes = sum(self.rows[j].nbytes for j in kids)
            return [f"[{lo}–{hi - 1}]", f"{first} … {last}"], totals_text(leaves, params, nbytes)
        row = self.rows[entry[1]]
        key = row.key or root_label or "(root)"
        group = self.quant_group(entry[1])
        if group is not None and group.shape is not None:
            dtype = group.dtype if group.usable else row.dtype  # codes as they are
            return [f"[{group.names['logical']!r}]", shape_text(dtype, group.shape), group.layout,
                    human_bytes(self.group_bytes(group))], ""
        if row.kind == "leaf":
            if row.shape is None:
                return [key, node_text(row)], ""
            parts = [key, node_text(row), human_bytes(row.nbytes)]
            if row.sharding:  # P('data', None) over data=4, model=2
                parts.append(row.sharding.replace("PartitionSpec(", "P("))
            if row.quant:  # Q4_K · 4.5 bits/value · 9 MiB in the file
                parts.append(row.quant)
            return parts, ""
        if row.kind == "None" or row.kind == "opaque":  # ‹ListConfig› [3 items]
            return [key, node_text(row)], ""
        return ([key, node_text(row)],
                totals_text(row.n_leaves, row.n_params, row.nbytes) + self.order_note(entry[1]))

    def order_note(self, i: int) -> str:
        """For a node whose children are shown in another order than JAX's, what JAX's is."""
        if i not in self.reordered:
            return ""
        jax_first, shown_first = self.reordered[i]
        return f" · natural key order; JAX's order (keys sorted as text) puts {jax_first} " \
               f"before {shown_first}"


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
