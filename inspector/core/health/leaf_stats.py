"""`LeafStats`: one leaf's (or subtree's) figures from a scan."""

from __future__ import annotations

from typing import NamedTuple


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
