"""What the Health and Timeline views draw from a `Scan` or a `Timeline`: colours of the tree
rows by a chosen figure (with the legend's stops), the scan table's rows."""

from __future__ import annotations

import math

import numpy as np

COLOR_BY = ("non-finite", "norm", "max |x|", "zeros fraction")
"""The figures a scanned tree's rows can be coloured by."""
NONFINITE_COLOR = "#c62828"
CLEAN_COLOR = "#e8f5e9"
_RAMP = ((255, 247, 236), (253, 212, 158), (252, 141, 89), (215, 48, 31), (127, 0, 0))
TABLE_COLUMNS = ("path", "dtype", "shape", "size", "nan", "posinf", "neginf", "zeros", "min",
                 "max", "mean", "std", "l2", "max_abs")


def ramp(t: float) -> str:
    """A colour from pale orange (0) to dark red (1)."""
    t = min(max(t, 0.0), 1.0) * (len(_RAMP) - 1)
    i = min(int(t), len(_RAMP) - 2)
    f = t - i
    rgb = (round(u + (v - u) * f) for u, v in zip(_RAMP[i], _RAMP[i + 1], strict=True))
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def figure_of(stats, color_by: str) -> float:
    """The value a row is coloured by."""
    if color_by == "non-finite":
        return float(stats.nonfinite)
    if color_by == "norm":
        return stats.l2
    if color_by == "max |x|":
        return stats.max_abs
    return stats.zeros_fraction


class Colouring:
    """Row colours of one scan by one figure: non-finite counts red/green; the others on a
    log scale (norm, max |x|) or linear (zeros fraction) between the leaves' extremes."""

    def __init__(self, scan, color_by: str):
        self.scan, self.color_by = scan, color_by
        values = np.array([figure_of(s, color_by) for s in scan.leaves], np.float64)
        values = values[np.isfinite(values)]
        self.log = color_by in ("norm", "max |x|")
        if self.log:
            values = np.log10(values[values > 0]) if (values > 0).any() else np.zeros(1)
        self.low = float(values.min()) if values.size else 0.0
        self.high = float(values.max()) if values.size else 1.0
        if color_by == "zeros fraction":
            self.low, self.high = 0.0, 1.0
        self._cache: dict[str, dict | None] = {}

    def color(self, value: float) -> str:
        if self.color_by == "non-finite":
            return NONFINITE_COLOR if value else CLEAN_COLOR
        if not math.isfinite(value):
            return "#9e9e9e"
        if self.log:
            value = math.log10(value) if value > 0 else self.low
        span = self.high - self.low
        return ramp((value - self.low) / span if span else 0.0)

    def heat(self, path: str) -> dict | None:
        """`{"color", "title"}` of the node at `path` (a leaf, or a subtree's aggregate), or
        None when no scanned leaf lies there."""
        if path not in self._cache:
            try:
                stats = self.scan.leaf(path)
            except KeyError:
                try:
                    stats = self.scan.subtree(path)
                except KeyError:
                    self._cache[path] = None
                    return None
            value = figure_of(stats, self.color_by)
            text = f"{int(value):,}" if self.color_by == "non-finite" else f"{value:.4g}"
            self._cache[path] = {"color": self.color(value), "title": f"{self.color_by}: {text}"}
        return self._cache[path]

    def legend(self) -> list[tuple[str, str]]:
        """`(colour, text)` stops for the legend."""
        if self.color_by == "non-finite":
            return [(CLEAN_COLOR, "all finite"), (NONFINITE_COLOR, "holds NaN/Inf")]
        stops = []
        for t in (0.0, 0.5, 1.0):
            v = self.low + t * (self.high - self.low)
            stops.append((ramp(t), f"{10 ** v:.3g}" if self.log else f"{v:.2f}"))
        return stops


def table_rows(scan, only_nonfinite: bool = False) -> list[tuple]:
    """The scan table's rows (`TABLE_COLUMNS`), every leaf or only those with NaN/Inf."""
    leaves = scan.nonfinite() if only_nonfinite else scan.leaves
    return [(s.path, s.dtype, str(s.shape), s.size, s.nan, s.posinf, s.neginf, s.zeros, s.min,
             s.max, s.mean, s.std, s.l2, s.max_abs) for s in leaves]
