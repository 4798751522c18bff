"""Layout transforms: what turns a source leaf's layout into the target's.

Only transforms that make the shapes equal are considered: a transpose (any permutation), a
reshape that keeps element order (only singleton axes added or dropped), or none. Where a
kind of module has several that fit (a square Linear kernel fits both the identity and the
transpose), one transform is chosen for the whole kind: the one most of its pairs fit (the
non-square kernels decide), then the frameworks' convention (torch `weight` -> Flax `kernel`:
(1, 0); Conv1d OIW -> WIO (2, 1, 0); Conv2d OIHW -> HWIO (2, 3, 1, 0)), then the identity.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import numpy as np

NONE, TRANSPOSE, RESHAPE = "none", "transpose", "reshape"


@dataclass(frozen=True, slots=True)
class Transform:
    """How a source leaf becomes its target leaf.

    Attributes:
        kind: "none", "transpose" or "reshape".
        perm: the axes permutation (`np.transpose(x, perm)`) for a transpose.
        shape: the new shape for a reshape (element order kept: only singleton axes change).
        cast: "float32 -> bfloat16" where the dtypes differ (the value is cast to the
            target's dtype), else None.
    """

    kind: str = NONE
    perm: tuple[int, ...] | None = None
    shape: tuple[int, ...] | None = None
    cast: str | None = None

    def __str__(self) -> str:
        text = {TRANSPOSE: f"transpose {self.perm}", RESHAPE: f"reshape {self.shape}"}.get(
            self.kind, "none")
        return f"{text}, cast {self.cast}" if self.cast else text

    def out_shape(self, shape: tuple) -> tuple:
        """The shape a source leaf of `shape` has after this transform."""
        if self.kind == TRANSPOSE:
            return tuple(shape[i] for i in self.perm)
        if self.kind == RESHAPE:
            return tuple(self.shape)
        return tuple(shape)

    def apply(self, x: np.ndarray, dtype=None) -> np.ndarray:
        """The transform applied with NumPy (the reference `convert` is tested against)."""
        if self.kind == TRANSPOSE:
            x = np.transpose(x, self.perm)
        elif self.kind == RESHAPE:
            x = np.reshape(x, self.shape)
        return x if dtype is None else np.asarray(x, dtype=dtype)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "perm": None if self.perm is None else list(self.perm),
                "shape": None if self.shape is None else list(self.shape), "cast": self.cast}

    @staticmethod
    def from_dict(d: dict) -> Transform:
        perm, shape = d.get("perm"), d.get("shape")
        return make(d.get("kind", NONE), None if perm is None else tuple(perm),
                    None if shape is None else tuple(shape), d.get("cast"))


_MADE: dict[tuple, Transform] = {}


def make(kind: str, perm=None, shape=None, cast=None) -> Transform:
    """A `Transform`, shared between the pairs that use the same one (100,000 pairs, a few
    distinct transforms)."""
    key = (kind, perm, shape, cast)
    t = _MADE.get(key)
    if t is None:
        if kind == TRANSPOSE and perm == tuple(range(len(perm))):
            kind, perm = NONE, None
        t = _MADE[key] = Transform(kind, perm, shape, cast)
    return t


def compatible_key(shape: tuple) -> tuple:
    """Shapes with equal keys can be made equal by some transform (sorted non-singleton dims)."""
    return tuple(sorted(d for d in shape if d != 1))


def fits(src: tuple, tgt: tuple) -> bool:
    """Whether some transform turns `src` into `tgt`."""
    return compatible_key(src) == compatible_key(tgt)


_PERMS: dict[tuple, tuple] = {}


def feasible(src: tuple, tgt: tuple) -> tuple[tuple[int, ...], ...]:
    """Every permutation `p` with `src[p] == tgt` (empty for different ranks), cached."""
    key = (src, tgt)
    got = _PERMS.get(key)
    if got is None:
        if len(src) != len(tgt) or sorted(src) != sorted(tgt):
            got = ()
        else:
            got = tuple(p for p in itertools.permutations(range(len(src)))
                        if all(src[i] == t for i, t in zip(p, tgt, strict=True)))
        _PERMS[key] = got
    return got


# torch -> Flax layouts by rank: Linear (out, in) -> (in, out); Conv1d OIW -> WIO; Conv2d
# OIHW -> HWIO; Conv3d OIDHW -> DHWIO.
_TORCH_TO_FLAX = {2: (1, 0), 3: (2, 1, 0), 4: (2, 3, 1, 0), 5: (2, 3, 4, 1, 0)}


def convention(src_leaf: str, tgt_leaf: str, rank: int) -> tuple[int, ...] | None:
    """The frameworks' usual permutation for a torch `weight` <-> Flax `kernel` of `rank`."""
    perm = _TORCH_TO_FLAX.get(rank)
    if perm is None:
        return None
    if src_leaf == "weight" and tgt_leaf == "kernel":
        return perm
    if src_leaf == "kernel" and tgt_leaf == "weight":
        return tuple(int(i) for i in np.argsort(perm))
    return None


def choose(kind: tuple, shapes) -> tuple[tuple | None, str]:
    """The permutation one kind of module uses, and why.

    Args:
        kind: `(source leaf name, target leaf name, source rank, target rank)`.
        shapes: the `(source shape, target shape)` of every pair of that kind, as a list or
            as a dict of counts.

    Returns:
        `(perm, reason)`; perm None where the ranks differ (reshapes only).
    """
    src_leaf, tgt_leaf, src_rank, tgt_rank = kind
    if src_rank != tgt_rank:
        return None, "reshape (ranks differ)"
    per = shapes if isinstance(shapes, dict) else Counter(shapes)  # few distinct pairs
    total = sum(per.values())
    counts: Counter = Counter()
    for pair, n in per.items():
        for p in feasible(*pair):
            counts[p] += n
    if not counts:
        return None, "no permutation fits"
    best = max(counts.values())
    tied = [p for p, n in counts.items() if n == best]
    prior = convention(src_leaf, tgt_leaf, src_rank)
    identity = tuple(range(src_rank))
    perm = (prior if prior in tied else identity if identity in tied else min(tied))
    what = f"'{src_leaf}' -> '{tgt_leaf}' rank {src_rank}"
    if len(tied) == 1:
        forced = sum(n for pair, n in per.items() if feasible(*pair) == (perm,))
        why = (f"the layout every {what} pair fits ({forced} of {total} fit no other)"
               if forced else f"the layout every {what} pair fits")
    else:
        source = "the torch/Flax convention" if perm == prior else "the identity"
        why = f"{source} for {what} (the shapes fit {len(tied)} layouts)"
    return perm, why


def for_pair(src: tuple, tgt: tuple, src_dtype: str, tgt_dtype: str,
             perm: tuple | None) -> Transform:
    """The transform of one pair given its kind's permutation (its own if that one does not
    fit it); None if no transform fits."""
    cast = None if src_dtype == tgt_dtype else f"{src_dtype} -> {tgt_dtype}"
    if len(src) == len(tgt):
        options = feasible(src, tgt)
        if not options:
            return None
        if perm not in options:
            ident = tuple(range(len(src)))
            perm = ident if ident in options else options[0]
        return make(TRANSPOSE, perm, None, cast)
    if compatible_key(src) == compatible_key(tgt) and \
            tuple(d for d in src if d != 1) == tuple(d for d in tgt if d != 1):
        return make(RESHAPE, None, tuple(tgt), cast)
    return None
