"""The heat of the Compare tab's whole-tree value diff (`inspector.core.diff.values.value_table`):
each row's relative L2 change as a colour, drawn on the diff tree's rows."""

from __future__ import annotations

import math

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
