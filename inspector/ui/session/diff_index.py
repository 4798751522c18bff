"""The Compare view's tree: the two trees' union (`inspector.core.diff.union.DiffUnion`) indexed
for a lazy tree, each node with badges for what differs there, and a shared leaf's values read on
selection.

`compare(a, b)` builds the union (structure only: no data read); `TreeDiff.index()` indexes its
rows like any tree (`DiffIndex` is a `TreeIndex`), so the diff tree is fed to the browser lazily,
in ranges, exactly as the input tree is; with `only_differences=True` it indexes just the nodes
on a path to a difference. A selected leaf's figures come from `leaf_value_stats`, as the
library's `diff(values=True)` and the value table's do.
"""

from __future__ import annotations

import threading

import numpy as np

import inspector
from inspector.core.diff import DTYPE, EXTRA, MISSING, SHAPE, STATE, TYPE
from inspector.core.diff.union import DiffUnion, Side
from inspector.core.leaves import unsupported_dtype
from inspector.core.node_text import human_bytes, node_text, plural, totals_text
from inspector.ui.session.tree_index import _SEP, ROOT_ID, TreeIndex

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


class TreeDiff(DiffUnion):
    """The union of `a` and `b` (`DiffUnion`) as the Compare view reads it: indexed for the
    lazy tree, what opens at first, and a shared leaf's values."""

    def __init__(self, a: Side, b: Side):
        super().__init__(a, b)
        self._indexes: dict[bool, DiffIndex] = {}
        self._lock = threading.Lock()

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

    def values_read(self, path: str, bins: int = 30) -> tuple[tuple[float, float], dict]:
        """`((max |a - b|, ||a - b|| / ||a||), histograms)` of the leaf at `path`, from one
        read of it in each tree. The figures are `diff(values=True)`'s (`leaf_value_stats`);
        the histograms are of a and b (over one common range) and of b - a, over the finite
        values: `{"a": (counts, edges), "b": ..., "delta": ...}` (complex leaves by magnitude).

        Raises:
            InspectorError: the leaf is not a numeric array in both trees with one shape, its
                values are not on this host, or its data cannot be read (a damaged file).
        """
        from inspector.core.diff.values import leaf_value_stats
        from inspector.ui.session.leaf_numbers import leaf_array

        where = path or ROOT_ID
        if not self.comparable(path):
            raise inspector.InspectorError(
                f"{where}: values compare only between array leaves of one shape.")
        x = _computable(leaf_array(self.a.tree, self.a.index, path), where, self.a.name)
        y = _computable(leaf_array(self.b.tree, self.b.index, path), where, self.b.name)
        stats = leaf_value_stats([(x, y)])[0]
        return (stats.max_abs, stats.rel_l2), _histograms(_real(x), _real(y), bins)


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
        `heat` {node path: {"color", "title"}} (`value_heat.heat_by_path`), drawn on rows."""
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


def _computable(x, where: str, name: str) -> np.ndarray:
    """`x` as an array the value kernels take: big-endian and long-double leaves in float64
    (complex128), as `diff(values=True)` would need them cast."""
    if x is None:
        raise inspector.InspectorError(
            f"{where}: the values of {name} are not on this host (spread over several hosts) "
            "or not an array.")
    x = np.asarray(x)
    if x.dtype.kind in "USOMm":  # text, bytes, objects, dates (bfloat16 and float8: kind V)
        raise inspector.InspectorError(
            f"{where}: {name} holds {x.dtype} values, which have no difference to measure.")
    if unsupported_dtype(x.dtype):
        x = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    return x


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
