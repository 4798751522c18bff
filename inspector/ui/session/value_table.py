"""The whole-tree value diff of the Compare tab: one row per leaf and per subtree, how much its
values changed (max |a-b|, relative L2, cosine, fraction changed), most changed first."""

from __future__ import annotations

import math

import jax

from inspector.core.packed import unpacked
from inspector.core.value_diff import leaf_value_stats, subtree_value_stats

COLUMNS = ("path", "kind", "size", "max_abs", "rel_l2", "cosine", "changed")


def _leaves(tree) -> dict:
    flat, _ = jax.tree_util.tree_flatten_with_path(unpacked(tree))
    return {tuple(jax.tree_util.keystr((k,)) for k in path): leaf for path, leaf in flat}


def _nbytes(x) -> int:
    return int(getattr(x, "nbytes", 0) or 0)


def value_table(a, b, rtol: float = 1e-5, atol: float = 1e-8, progress=None) -> list[dict]:
    """Rows for every leaf both trees have with the same shape, and for every subtree above
    them (figures aggregated as one vector: max, norm- and size-weighted), sorted by relative
    L2, largest first (NaN first: NaNs moved). Reads each leaf of both trees once.

    `progress(leaves done, leaves, bytes read, bytes)` is called as the leaves are reduced
    (lazy checkpoint leaves stream: a few at a time)."""
    la, lb = _leaves(a), _leaves(b)
    keys = [k for k, x in la.items() if k in lb and tuple(getattr(x, "shape", ())) ==
            tuple(getattr(lb[k], "shape", ())) and hasattr(x, "dtype")]
    report = None
    if progress is not None:  # leaves done -> also the bytes of both trees read so far
        read = [0]
        for k in keys:
            read.append(read[-1] + _nbytes(la[k]) + _nbytes(lb[k]))

        def report(done, total):
            progress(done, total, read[done], read[-1])

    stats = leaf_value_stats([(la[k], lb[k]) for k in keys], rtol, atol, progress=report)
    by_key = dict(zip(keys, stats, strict=True))
    rows = []
    for key, s in subtree_value_stats(by_key).items():
        rows.append({"path": "".join(key) or "(root)", "kind": "leaf" if key in by_key else
                     "subtree", "size": s.size, "max_abs": s.max_abs, "rel_l2": s.rel_l2,
                     "cosine": s.cosine, "changed": s.frac_changed})
    rows.sort(key=lambda r: (-(r["rel_l2"] if r["rel_l2"] == r["rel_l2"] else float("inf")),
                             r["path"]))
    return rows


# OrRd: pale (a relative L2 change of 1e-6 or less) to dark red (100% or more), on a log scale
_RAMP = ((255, 247, 236), (253, 212, 158), (252, 141, 89), (215, 48, 31), (127, 0, 0))
_LOW, _HIGH = -6.0, 0.0  # log10 of the relative L2 at either end of the ramp
UNCHANGED, NAN_COLOR = "#e8f5e9", "#7b1fa2"


def heat_color(rel_l2: float) -> str:
    """The heat colour of a relative L2 change: pale green when nothing changed, then from
    pale orange (1e-6) to dark red (>= 1) on a log scale; purple for NaN (NaNs moved).

    >>> heat_color(0.0), heat_color(1e-6), heat_color(1.0), heat_color(float("nan"))
    ('#e8f5e9', '#fff7ec', '#7f0000', '#7b1fa2')
    """
    if math.isnan(rel_l2):
        return NAN_COLOR
    if rel_l2 <= 0:
        return UNCHANGED
    t = (min(max(math.log10(rel_l2), _LOW), _HIGH) - _LOW) / (_HIGH - _LOW)
    x = t * (len(_RAMP) - 1)
    i = min(int(x), len(_RAMP) - 2)
    f = x - i
    rgb = (round(u + (v - u) * f) for u, v in zip(_RAMP[i], _RAMP[i + 1], strict=True))
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def heat_by_path(rows: list[dict]) -> dict[str, dict]:
    """{key path ('' for the root): {"color", "title"}} for each `value_table` row, to draw on
    the diff tree's rows: a subtree's colour is its norm-weighted relative L2 (its leaves as one
    vector), its title also gives the max |a-b| over its leaves."""
    out = {}
    for r in rows:
        path = "" if r["path"] == "(root)" else r["path"]
        out[path] = {"color": heat_color(r["rel_l2"]),
                     "title": f"rel L2 {r['rel_l2']:.3g} · max |a−b| {r['max_abs']:.3g} · "
                              f"cosine {r['cosine']:.6g} · {r['changed']:.2%} changed"}
    return out
