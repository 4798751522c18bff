"""Two trees compared node by node: the union of their nodes, each with what differs there.

`DiffUnion(a, b)` runs `diff` (structure only: shapes and dtypes, no data read) and merges both
trees' `describe` rows (their `TreeIndex`es) into one pre-order list of every key path found in
either tree. Each node knows the differences recorded at its path (`missing`, `extra`, `shape`,
`dtype`, `type`, `state`) and how many lie below it, so a collapsed parent can say how many it
hides. The app's Compare view indexes these rows lazily (`inspector.ui.session.diff_index`);
the values of a shared leaf are compared by `values.leaf_value_stats`, the one
implementation the library's `diff(values=True)` and the command line use too.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from inspector.core.diff.structure import DTYPE, EXTRA, MISSING, SHAPE, STATE, TYPE, diff
from inspector.core.node_text import node_text, plural, totals_text
from inspector.core.tree_index import TreeIndex

__all__ = ["KINDS", "DiffUnion", "Side", "shown_kinds"]

_INT_KEY = re.compile(r"^\[(-?\d+)\]$")
ROOT = "(root)"

KINDS = (MISSING, EXTRA, SHAPE, DTYPE, TYPE, STATE)
"""Difference kinds in the order the summary and the badges list them (`state`, found only
between `Opaque` leaves, only when there is one: see `shown_kinds`)."""


def shown_kinds(counts) -> list[str]:
    """The kinds a summary lists: every kind, `state` only when some difference has it."""
    return [k for k in KINDS if k != STATE or counts.get(k, 0)]


@dataclass(frozen=True)
class Side:
    """One compared tree: its name, the tree and its `TreeIndex`."""

    name: str
    tree: object
    index: TreeIndex

    @property
    def totals(self) -> tuple[int, int, int]:
        """`(leaves, params, bytes)` of the whole tree."""
        root = self.index.root
        return root.n_leaves, root.n_params, root.nbytes


class DiffUnion:
    """Every node of `a` and `b` (matched by key path) and the differences between them.

    Attributes:
        a, b: the compared `Side`s (`a` the expected tree, the model; `b` the candidate).
        differences: `diff(a, b)` (structure only), in pre-order of key paths.
        rows: one `Row` per node of the union, pre-order (`a`'s row where `a` has the node).
        sides: per row, `(row in a, row in b)`, -1 where that tree lacks the node.
        kinds: per row, the kinds of the differences recorded at that path.
        inherited: per row, `missing` / `extra` for a node inside such a subtree (which has
            the difference recorded at its root), else ''.
        n_diff: per row, the number of differences at or below it.
        counts: differences per kind.
        matched: leaves present in both trees with the same shape and dtype.
    """

    def __init__(self, a: Side, b: Side):
        self.a, self.b = a, b
        self.differences = diff(a.tree, b.tree)
        self.rows: list = []
        self.sides: list[tuple[int, int]] = []
        parent: list[int] = []
        self._merge(0, 0, -1, parent)
        self.by_path = {row.path: i for i, row in enumerate(self.rows)}
        n = len(self.rows)
        self.kinds: list[tuple[str, ...]] = [()] * n
        self.n_diff = np.zeros(n, np.int64)
        for d in self.differences:
            i = self.by_path.get(d.path)
            if i is None:  # cannot happen: every difference is at a node of a or b
                continue
            self.kinds[i] = (*self.kinds[i], d.kind)
            while i >= 0:
                self.n_diff[i] += 1
                i = parent[i]
        self.inherited = [""] * n
        for i, (ia, ib) in enumerate(self.sides):
            if not self.kinds[i] and (ia < 0 or ib < 0):
                self.inherited[i] = MISSING if ib < 0 else EXTRA
        self.counts = Counter(d.kind for d in self.differences)
        self.matched = sum(
            1 for i, (ia, ib) in enumerate(self.sides)
            if ia >= 0 and ib >= 0 and self.rows[i].kind == "leaf"
            and a.index.rows[ia].kind == b.index.rows[ib].kind == "leaf" and not self.kinds[i])

    def _merge(self, ia: int, ib: int, up: int, parent: list[int]) -> None:
        """Appends the node at `ia` / `ib` (-1: absent) and its children, union of both."""
        A, B = self.a.index, self.b.index
        me = len(self.rows)
        self.rows.append(A.rows[ia] if ia >= 0 else B.rows[ib])
        self.sides.append((ia, ib))
        parent.append(up)
        kids_a = A.children[ia] if ia >= 0 else []
        kids_b = B.children[ib] if ib >= 0 else []
        if not kids_b:
            for i in kids_a:
                self._merge(i, -1, me, parent)
            return
        if not kids_a:
            for j in kids_b:
                self._merge(-1, j, me, parent)
            return
        if A.rows[ia].kind == B.rows[ib].kind == "dict":
            # JAX sorts dict keys, so the union does too (ints as numbers, strings as text).
            a_key = {A.rows[i].key: i for i in kids_a}
            b_key = {B.rows[j].key: j for j in kids_b}
            for key in sorted(a_key.keys() | b_key.keys(), key=_dict_order):
                self._merge(a_key.get(key, -1), b_key.get(key, -1), me, parent)
            return
        # Keep both trees' orders: each child of b that a lacks goes just before the next
        # child that both share.
        at_b = {B.rows[j].key: k for k, j in enumerate(kids_b)}
        in_a = {A.rows[i].key for i in kids_a}
        p = 0
        for i in kids_a:
            q = at_b.get(A.rows[i].key)
            if q is None:
                self._merge(i, -1, me, parent)
                continue
            for j in kids_b[p:q]:
                if B.rows[j].key not in in_a:
                    self._merge(-1, j, me, parent)
            p = max(p, q + 1)
            self._merge(i, kids_b[q], me, parent)
        for j in kids_b[p:]:
            if B.rows[j].key not in in_a:
                self._merge(-1, j, me, parent)

    def row(self, path: str) -> int | None:
        """The union row at key path `path` ('(root)' or '' for the root), or None."""
        return self.by_path.get("" if path == ROOT else path)

    def comparable(self, path: str) -> bool:
        """Whether `path` is an array leaf in both trees with one shape (its values compare)."""
        i = self.row(path)
        if i is None:
            return False
        ia, ib = self.sides[i]
        if ia < 0 or ib < 0:
            return False
        ra, rb = self.a.index.rows[ia], self.b.index.rows[ib]
        return ra.kind == rb.kind == "leaf" and ra.shape is not None and ra.shape == rb.shape

    def describe_side(self, path: str, side: str) -> str:
        """What `side` ('a' or 'b') has at `path`: `float32[4,3]`, `dict of 2`, or `—`."""
        i = self.row(path)
        if i is None:
            return "—"
        k = self.sides[i][0 if side == "a" else 1]
        if k < 0:
            return "—"
        return node_text((self.a if side == "a" else self.b).index.rows[k])

    def summary_lines(self) -> list[str]:
        """The summary as lines of text (tests and the notebook read it; the view draws it)."""
        n = len(self.differences)
        parts = [f"{self.counts.get(k, 0)} {k}" for k in shown_kinds(self.counts)]
        lines = [f"{plural(n, 'difference')}: {', '.join(parts)}; "
                 f"{plural(self.matched, 'leaf', 'leaves')} match."]
        for side in (self.a, self.b):
            lines.append(f"{side.name}: {totals_text(*side.totals)}")
        return lines


def _dict_order(key: str) -> tuple:
    """Sorts key strings as JAX sorts the dict keys they name (`[2]` before `[10]`)."""
    number = _INT_KEY.match(key)
    return (0, int(number.group(1)), "") if number else (1, 0, key)
