"""One leaf's numbers: its array, its short values, min/max/mean/std, NaN and Inf counts, and a
histogram.

Computed with NumPy on that leaf only (a packed tree's leaf is a view into its buffer), so
selecting a leaf of a 100k-leaf checkpoint reads one leaf. The views (`leaf_stats_view.py`, the
tree and diff views) show these numbers.
"""

from __future__ import annotations

import numpy as np

import inspector
from inspector.ui.session.quant_rows import dequantized_leaf
from inspector.ui.session.tree_index import ROOT_ID, TreeIndex

_BINS = 30


def opaque_content(tree, index: TreeIndex, path: str, limit: int = 4000) -> tuple[str, str]:
    """Returns `(type, content)` of the `Opaque` leaf at `path`: its dotted class name and its
    plain content (`Opaque.plain()`) pretty-printed, cut at `limit` characters."""
    import pprint

    leaf = index.flat_leaves(tree)[index.leaf_number[index.row_of(path)]]
    text = pprint.pformat(leaf.plain(), width=72, compact=True, sort_dicts=False)
    return leaf.type, text if len(text) <= limit else text[:limit] + " …"


def leaf_array(tree, index: TreeIndex, path: str, raw: bool = False):
    """Returns the leaf at key `path` as a NumPy array, or None (not a leaf, not an array).

    The row of a quantized weight gives its dequantized values (float32), or with `raw` the
    stored codes."""
    row_i = index.row_of(path)
    if row_i is None or row_i not in index.leaf_number:
        return None
    group = index.quant_group(row_i)
    if group is not None and not raw and group.usable:
        return dequantized_leaf(tree, group)
    n = index.leaf_number[row_i]
    if isinstance(tree, inspector.PackedTree):
        return np.asarray(tree.leaf(n))
    leaf = index.flat_leaves(tree)[n]
    if not hasattr(leaf, "shape") and not isinstance(leaf, bool | int | float | complex):
        return None
    if not getattr(leaf, "is_fully_addressable", True):
        return None  # spread over several hosts: gathering it would need every host
    return np.asarray(leaf)


TEXT_CHARS = 40
"""The most characters of a string leaf shown beside its row."""


def short_values(tree, index: TreeIndex, row_i: int, limit: int = 8) -> str | None:
    """The values of a leaf of at most `limit` elements, on one line (`[[26, 11], [21, 24]]`),
    a string leaf's text (`'leaky_relu'`, cut at `TEXT_CHARS`), or None for bigger leaves and
    leaves whose data is not in memory (lazy checkpoint leaves)."""
    row = index.rows[row_i]
    if row_i not in index.leaf_number:
        return None
    if row.shape is None:  # a checkpoint's hyper-parameters hold strings: say which
        if isinstance(tree, inspector.PackedTree):
            return None
        leaf = index.flat_leaves(tree)[index.leaf_number[row_i]]
        if not isinstance(leaf, str):
            return None
        return repr(leaf if len(leaf) <= TEXT_CHARS else leaf[:TEXT_CHARS - 1] + "…")
    if row.n_params > limit:
        return None
    if not isinstance(tree, inspector.PackedTree):
        leaf = index.flat_leaves(tree)[index.leaf_number[row_i]]
        if isinstance(leaf, inspector.LazyArray) or not getattr(leaf, "is_fully_addressable",
                                                                  True):
            return None
    x = leaf_array(tree, index, row.path or ROOT_ID)
    if x is None:
        return None
    if x.dtype.kind not in "biufc":
        x = x.astype(np.float32)
    text = np.array2string(x, separator=", ", precision=4, suppress_small=True,
                           max_line_width=10**6)
    return " ".join(text.split()).replace("[ ", "[")


def leaf_stats(x: np.ndarray) -> dict:
    """Returns `{size, min, max, mean, std, nan, inf}` of an array (NaN/Inf excluded from the
    moments; complex leaves are measured by magnitude; `None` where there is nothing to say).

    >>> s = leaf_stats(np.array([1.0, np.nan, 3.0, np.inf], np.float32))
    >>> s["min"], s["max"], s["mean"], s["nan"], s["inf"]
    (1.0, 3.0, 2.0, 1, 1)
    """
    x = np.asarray(x)
    if x.dtype.kind == "c":
        x = np.abs(x)
    if x.dtype.kind not in "biuf":
        x = x.astype(np.float32)  # bfloat16 and friends (ml_dtypes) read as float32
    if x.dtype.kind == "b":
        x = x.astype(np.int8)
    out = {"size": int(x.size), "nan": 0, "inf": 0,
           "min": None, "max": None, "mean": None, "std": None}
    if x.dtype.kind == "f":
        out["nan"] = int(np.isnan(x).sum())
        out["inf"] = int(np.isinf(x).sum())
        finite = x[np.isfinite(x)] if out["nan"] or out["inf"] else x
    else:
        finite = x
    if finite.size:
        wide = finite.astype(np.float64)
        out["min"] = finite.min().item()
        out["max"] = finite.max().item()
        out["mean"] = float(wide.mean())
        out["std"] = float(wide.std())
    return out


def histogram(x: np.ndarray, bins: int = _BINS) -> tuple[np.ndarray, np.ndarray]:
    """Returns `(counts, edges)` over the finite values (empty arrays when there are none)."""
    x = np.asarray(x)
    if x.dtype.kind == "c":
        x = np.abs(x)
    x = x.astype(np.float64).ravel()
    x = x[np.isfinite(x)]
    if not x.size:
        return np.zeros(0), np.zeros(0)
    lo, hi = x.min(), x.max()
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return np.histogram(x, bins=bins, range=(lo, hi))
