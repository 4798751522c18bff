"""`LeafStats`: one leaf's (or subtree's) figures from a scan."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class LeafStats(NamedTuple):
    """One leaf's figures (or a subtree's, from `Scan.subtree`); immutable (a NamedTuple, as
    `Row` is: a scan of 100k leaves builds 100k of them, and a frozen dataclass costs several
    times as much to build).

    Counts are exact. `min`, `max`, `mean`, `std` (population), `l2` (Euclidean norm) and
    `max_abs` are over the finite elements (NaN and Inf are counted, not measured), computed on
    the device in float32 (float64 leaves in float64 when JAX has x64 on) per row of at most
    1,024 elements, rows combined in float64; NaN where there is no finite element.

    Attributes:
        path: the key path (keystr form); dtype: the leaf's dtype (`"mixed"` for a subtree of
        several); shape: the leaf's shape (None for a subtree); size: elements.
    """

    path: str
    dtype: str
    shape: tuple[int, ...] | None
    size: int
    nan: int
    posinf: int
    neginf: int
    zeros: int
    min: float
    max: float
    mean: float
    std: float
    l2: float
    max_abs: float

    @property
    def nonfinite(self) -> int:
        """NaN + Inf elements."""
        return self.nan + self.posinf + self.neginf

    @property
    def zeros_fraction(self) -> float:
        return self.zeros / self.size if self.size else 0.0


_COUNTS = ("nan", "posinf", "neginf", "zeros")
_VALUES = ("min", "max", "mean", "std", "l2", "max_abs")


class LeafTable(Sequence):
    """The `LeafStats` of many leaves kept as columns (one NumPy array per figure), each
    `LeafStats` built when it is asked for: a scan of 100k leaves would spend most of its time
    building tuples nobody reads (a view colours the rows it shows).

    Args:
        paths, dtypes, shapes: one per leaf (lists, kept as given); sizes: elements per leaf.
        figures: `nan`, `posinf`, `neginf`, `zeros` (counts) and `min`, `max`, `mean`, `std`,
            `l2`, `max_abs` (float64), one array each, one entry per leaf.
    """

    def __init__(self, paths, dtypes, shapes, sizes, figures: dict, dtype_column=None):
        # lists are kept as given (a scan passes its layout's lists, never changed): copying
        # three lists of 100k entries took ~2 ms of a 100k-leaf scan
        self.paths, self.dtypes, self.shapes = (v if isinstance(v, list) else list(v)
                                                for v in (paths, dtypes, shapes))
        self.columns = {"size": np.asarray(sizes, np.int64)}
        self.columns.update({k: np.asarray(figures[k]).astype(np.int64) for k in _COUNTS})
        self.columns.update({k: np.asarray(figures[k], np.float64) for k in _VALUES})
        # fromiter: `np.asarray` of 100k dtype objects took 12 ms (it inspects each one);
        # `dtype_column`: that array already built (a scan keeps one per layout)
        self.columns["dtype"] = dtype_column if dtype_column is not None else \
            np.fromiter(self.dtypes, object, len(self.dtypes))
        self._built: list | None = None

    @classmethod
    def concat(cls, tables: list[LeafTable]) -> LeafTable:
        """One table of `tables`' leaves, in order."""
        if len(tables) == 1:
            return tables[0]
        figures = {k: np.concatenate([t.columns[k] for t in tables] or [np.zeros(0)])
                   for k in (*_COUNTS, *_VALUES, "size")}
        return cls([p for t in tables for p in t.paths], [d for t in tables for d in t.dtypes],
                   [s for t in tables for s in t.shapes], figures["size"], figures)

    def select(self, index: np.ndarray) -> LeafTable:
        """The table of leaves `index` (positions), in that order."""
        index = np.asarray(index, np.int64)
        figures = {k: self.columns[k][index] for k in (*_COUNTS, *_VALUES, "size")}
        take = index.tolist()
        return LeafTable([self.paths[i] for i in take], [self.dtypes[i] for i in take],
                         [self.shapes[i] for i in take], figures["size"], figures)

    def _all(self) -> list[LeafStats]:
        if self._built is None:
            c = self.columns
            counts = [c[k].tolist() for k in ("size", *_COUNTS)]
            values = [c[k].tolist() for k in _VALUES]
            self._built = list(map(LeafStats._make, zip(
                self.paths, self.dtypes, self.shapes, *counts, *values, strict=True)))
        return self._built

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i):
        if self._built is not None or isinstance(i, slice):
            return self._all()[i]
        if i < 0:
            i += len(self.paths)
        if not 0 <= i < len(self.paths):
            raise IndexError(i)
        c = self.columns
        return LeafStats(self.paths[i], self.dtypes[i], self.shapes[i],
                         *(int(c[k][i]) for k in ("size", *_COUNTS)),
                         *(float(c[k][i]) for k in _VALUES))

    def __iter__(self):
        return iter(self._all())

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"LeafTable({len(self)} leaves)"
