"""Two trees compared: the union of their nodes, each with what differs there, for a lazy tree.

`compare(a, b)` runs `inspector.diff` (structure only: shapes and dtypes, no data read) and
merges both trees' `describe` rows into one pre-order list of every key path found in either
tree. Each node knows the differences recorded at its path (`missing`, `extra`, `shape`,
`dtype`, `type`) and how many lie below it, so a collapsed parent can say how many it hides.
`TreeDiff.index()` indexes those rows like any tree (`DiffIndex` is a `TreeIndex`), so the diff
tree is fed to the browser lazily, in ranges, exactly as the input tree is; with
`only_differences=True` it indexes just the nodes on a path to a difference.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

import inspector
from inspector.core.diff import DTYPE, EXTRA, MISSING, SHAPE, STATE, TYPE, value_difference
from inspector.core.node_text import human_bytes, node_text, plural, totals_text
from inspector.ui.session.tree_index import _SEP, ROOT_ID, TreeIndex

_INT_KEY = re.compile(r"^\[(-?\d+)\]$")

KINDS = (MISSING, EXTRA, SHAPE, DTYPE, TYPE, STATE)
"""Difference kinds in the order the summary and the badges list them (`state`, found only
between `Opaque` leaves, only when there is one: see `shown_kinds`)."""


def shown_kinds(counts) -> list[str]:
    """The kinds a summary lists: every kind, `state` only when some difference has it."""
    return [k for k in KINDS if k != STATE or counts.get(k, 0)]

BADGE_COLORS = {MISSING: "error", EXTRA: "warning", SHAPE: "secondary", DTYPE: "info",
                TYPE: "primary", STATE: "success"}
"""The MUI palette colour of each kind's badge."""

KIND_HELP = {
    MISSING: "in a (expected), not in b",
    EXTRA: "in b, not in a (expected)",
    SHAPE: "shapes differ",
    DTYPE: "dtypes differ",
    TYPE: "container or leaf kind differs",
    STATE: "objects (Opaque leaves) of one class with different content",
}


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


class TreeDiff:
    """Every node of `a` and `b` (matched by key path) and the differences between them.

    Attributes:
        a, b: the compared `Side`s (`a` the expected tree, the model; `b` the candidate).
        differences: `inspector.diff(a, b)`, in pre-order of key paths.
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
        self.differences = inspector.diff(a.tree, b.tree)
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
        self._indexes: dict[bool, DiffIndex] = {}
        self._lock = threading.Lock()

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

    # the rows, as the views ask for them ------------------------------------------------------

    def index(self, only_differences: bool = False) -> DiffIndex:
        """The `TreeIndex` of the union rows (built once), or of just the differing nodes."""
        with self._lock:
            index = self._indexes.get(only_differences)
            if index is None:
                keep = range(len(self.rows)) if not only_differences else [
                    i for i in range(len(self.rows)) if self.n_diff[i] or self.inherited[i]
                    or i == 0]
                index = DiffIndex(self, list(keep))
                self._indexes[only_differences] = index
            return index

    def default_expanded(self, only_differences: bool = False, budget: int = 200) -> list[str]:
        """Ids to expand at first: the way to every difference (matching subtrees stay
        closed), while fewer than `budget` items show; else the index's own default."""
        index = self.index(only_differences)
        opened: list[str] = []
        for d in self.differences[:budget]:
            opened += [i for i in index.reveal(d.path) if i not in opened]
        opened = opened or [ROOT_ID]
        if len(index.visible_ids(opened)) > budget:
            return index.default_expanded()
        return opened

    def row(self, path: str) -> int | None:
        """The union row at key path `path` (`ROOT_ID` or '' for the root), or None."""
        return self.by_path.get("" if path == ROOT_ID else path)

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

    def value_difference(self, path: str) -> tuple[float, float]:
        """`(max |a - b|, ||a - b|| / ||a||)` of the leaf at `path`: reads that leaf only.

        Raises:
            InspectorError: the leaf is not an array in both trees with one shape, or its data
                cannot be read (a damaged file).
        """
        from inspector.ui.session.leaf_numbers import leaf_array

        if not self.comparable(path):
            raise inspector.InspectorError(
                f"{path or ROOT_ID}: values compare only between array leaves of one shape.")
        x = leaf_array(self.a.tree, self.a.index, path)
        y = leaf_array(self.b.tree, self.b.index, path)
        return value_difference(x, y)

    def values_read(self, path: str, bins: int = 30) -> tuple[tuple[float, float], dict]:
        """`(value_difference(path), histograms)` from one read of the leaf in each tree; the
        histograms are of a and b (over one common range) and of b - a, over the finite values:
        `{"a": (counts, edges), "b": ..., "delta": ...}` (complex leaves by magnitude)."""
        from inspector.ui.session.leaf_numbers import leaf_array

        if not self.comparable(path):
            raise inspector.InspectorError(
                f"{path or ROOT_ID}: values compare only between array leaves of one shape.")
        x0 = leaf_array(self.a.tree, self.a.index, path)
        y0 = leaf_array(self.b.tree, self.b.index, path)
        return value_difference(x0, y0), _histograms(_real(x0), _real(y0), bins)

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


class DiffIndex(TreeIndex):
    """A `TreeIndex` over (some of) a `TreeDiff`'s union rows, whose items carry badges.

    Each differing node gets a coloured badge per difference kind (the items' `buttons`, which
    `pmui.Tree` draws at the row's end); a collapsed parent gets the number of differences it
    hides; a node inside a missing or extra subtree gets an outlined badge of that kind.
    """

    fold = False  # differing layers must stay apart, each with its badges

    def __init__(self, diff: TreeDiff, keep: list[int]):
        self.diff = diff
        self.union = keep  # this index's row -> the TreeDiff's row
        self.values: dict = {}  # leaf path -> (max_abs, rel_l2) or error text, set by the view
        self.heat: dict = {}  # node path -> {"color", "title"} of the whole-tree value diff
        super().__init__([diff.rows[i] for i in keep])

    def items(self, expanded, root_label: str = "", values=None, heat=None):
        """`TreeIndex.items`; `values` here is {leaf path: (max |Δ|, rel L2) or error text},
        `heat` {node path: {"color", "title"}} (`value_table.heat_by_path`), drawn on rows."""
        self.values = values or {}
        self.heat = heat or {}
        return super().items(expanded, root_label)

    def badges(self, i: int, expanded: bool) -> list[dict]:
        """The badges of this index's row `i` (as `pmui.Tree` item buttons)."""
        u = self.union[i]
        diff = self.diff
        out = [{"label": k, "color": BADGE_COLORS[k], "variant": "contained", "action": k}
               for k in diff.kinds[u]]
        if diff.inherited[u]:
            k = diff.inherited[u]
            out.append({"label": k, "color": BADGE_COLORS[k], "variant": "outlined",
                        "action": k})
        below = int(diff.n_diff[u]) - len(diff.kinds[u])
        if below and not expanded:
            out.append({"label": plural(below, "difference"), "color": "inherit",
                        "variant": "outlined", "action": "below"})
        return out

    def label(self, entry, root_label: str = "") -> tuple[str, str]:
        if entry[0] == "range":
            label, secondary = super().label(entry, root_label)
            n = sum(int(self.diff.n_diff[self.union[j]])
                    for j in self.children.slice(entry[1], entry[2], entry[3]))
            return label, secondary + (f" · {plural(n, 'difference')}" if n else "")
        i = entry[1]
        u = self.union[i]
        row = self.rows[i]
        key = row.key or root_label or "(root)"
        ia, ib = self.diff.sides[u]
        a = node_text(self.diff.a.index.rows[ia]) if ia >= 0 else None
        b = node_text(self.diff.b.index.rows[ib]) if ib >= 0 else None
        if a is not None and b is not None and a != b and (
                row.kind in ("leaf", "opaque") or TYPE in self.diff.kinds[u]):
            text = f"{a}  ≠  b: {b}"
        else:
            text = a if a is not None else b
        parts = [key, text]
        if row.kind == "leaf" and row.shape is not None and a == b:
            parts.append(human_bytes(row.nbytes))
        value = self.values.get(row.path)
        if isinstance(value, tuple):
            parts.append(f"max |Δ| {value[0]:.3g} · rel L2 {value[1]:.3g}")
        secondary = ""
        if row.kind not in ("leaf", "None", "opaque"):
            secondary = totals_text(row.n_leaves, row.n_params, row.nbytes)
            if ia < 0 or ib < 0:
                secondary += " · only in " + ("a" if ib < 0 else "b")
        return _SEP.join(parts), secondary

    def _item(self, entry, expanded, path, paths, values, root_label=""):
        item = super()._item(entry, expanded, path, paths, values, root_label)
        if entry[0] == "node":
            badges = self.badges(entry[1], item["id"] in expanded)
            if badges:
                item["buttons"] = badges
            heat = self.heat.get(self.rows[entry[1]].path)
            if heat is not None:
                item["heat"] = heat
        return item


def compare(a, b) -> TreeDiff:
    """Compares two loaded trees (`LoadedTree`s, or anything with `name`, `tree`, `index`).

    About 2.5 s for two 100k-leaf trees here (most of it `inspector.diff`): the session runs
    it in its worker thread, and builds the index there too.
    """
    diff = TreeDiff(Side(a.name, a.tree, a.index), Side(b.name, b.tree, b.index))
    diff.index()
    return diff


def _dict_order(key: str) -> tuple:
    """Sorts key strings as JAX sorts the dict keys they name (`[2]` before `[10]`)."""
    number = _INT_KEY.match(key)
    return (0, int(number.group(1)), "") if number else (1, 0, key)


def _real(x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "c":
        x = np.abs(x)
    return x.astype(np.float64).ravel()


def _histograms(x: np.ndarray, y: np.ndarray, bins: int) -> dict:
    out = {}
    both = np.concatenate([x[np.isfinite(x)], y[np.isfinite(y)]])
    if both.size:
        lo, hi = float(both.min()), float(both.max())
        lo, hi = (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)
        for name, v in (("a", x), ("b", y)):
            out[name] = np.histogram(v[np.isfinite(v)], bins=bins, range=(lo, hi))
    d = y - x
    d = d[np.isfinite(d)]
    if d.size:
        lo, hi = float(d.min()), float(d.max())
        lo, hi = (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)
        out["delta"] = np.histogram(d, bins=bins, range=(lo, hi))
    return out
