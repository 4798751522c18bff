"""`diff(a, b)`: every structural (and optionally value) difference between two trees."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inspector.core import nodes
from inspector.core.errors import UnsupportedLeafError, bullet_list
from inspector.core.leaves import leaf_info, unsupported_dtype
from inspector.core.node_text import container_text, shape_text
from inspector.core.opaque import Opaque
from inspector.core.tolerance import ATOL, RTOL

MISSING, EXTRA, SHAPE, DTYPE, TYPE, VALUE = "missing", "extra", "shape", "dtype", "type", "value"
STATE = "state"


@dataclass(frozen=True, slots=True)
class Difference:
    """One way two trees differ at one key path.

    Attributes:
        path: the key path in JAX `keystr` form.
        kind: `missing` (in `a`, not in `b`), `extra` (in `b`, not in `a`), `shape`, `dtype`,
            `type` (container or leaf kind differs, or two `Opaque`s' classes), `state` (two
            `Opaque`s of one class hold different content) or `value` (with `values=True`).
        a, b: what each side has there: a shape, a dtype name, a type name, or a short
            description of the missing/extra subtree; `None` for the side that lacks it.
        max_abs: for `value`: max |a - b| over the leaf (NaN where the NaN patterns differ).
        rel_l2: for `value`: ||a - b|| / ||a|| (inf when `a` is all zeros).
        cosine: for `value`: <a, b> / (||a|| ||b||), in float32.
        frac_changed: for `value`: the fraction of elements with |a - b| > atol + rtol |b|.
    """

    path: str
    kind: str
    a: object
    b: object
    max_abs: float | None = None
    rel_l2: float | None = None
    cosine: float | None = None
    frac_changed: float | None = None

    def __str__(self) -> str:
        where = self.path or "(root)"
        if self.kind == MISSING:
            return f"{where}: missing from the second tree (first has {self.a})"
        if self.kind == EXTRA:
            return f"{where}: only in the second tree ({self.b})"
        if self.kind == VALUE:
            return (f"{where}: values differ, max |a-b| = {self.max_abs:.6g}, "
                    f"rel L2 = {self.rel_l2:.3g}, cosine = {self.cosine:.7g}, "
                    f"{self.frac_changed:.3%} changed")
        return f"{where}: {self.kind} {self.a} vs {self.b}"


def diff(a, b, values: bool = False, rtol: float = RTOL, atol: float = ATOL,
         device=None, progress=None) -> list[Difference]:
    """Returns every difference between trees `a` and `b`, in pre-order of key paths.

    Children are matched by key (dict key, index, attribute), so a dict-vs-FrozenDict or
    list-vs-tuple node is reported once as `type` and its children are still compared.
    Think of `a` as the expected tree (the model) and `b` as the candidate (the checkpoint).

    Args:
        a, b: pytrees (or packed trees, or trees of lazy checkpoint leaves).
        values: also compare the values of leaves that match in shape; reads their data (each
            leaf once, lazy leaves a few at a time) and reduces each pair with a compiled kernel
            (one per distinct shape and dtypes): max |a-b|, relative L2, cosine, and the
            fraction of elements changed beyond `atol + rtol * |b|`.
        rtol, atol: that tolerance (np.isclose's defaults).
        device: where the value reductions run.
        progress: `progress(done, total)` after each chunk of leaves compared.

    Returns:
        A list of `Difference`; empty when the trees agree.

    Raises:
        TreeDepthError: a tree contains itself or nests deeper than `nodes.MAX_DEPTH` levels.

    >>> [str(d) for d in diff({"w": np.zeros(3), "b": 1}, {"w": np.zeros(4)})]
    ["['b']: missing from the second tree (first has int32[])", "['w']: shape (3,) vs (4,)"]
    """
    if values:
        from inspector.core.packed import unpacked

        a, b = unpacked(a), unpacked(b)
    else:  # structure only: JAX is not imported for plain trees
        a, b = nodes.structure_of(a), nodes.structure_of(b)
    out: list = []
    try:
        _compare(a, b, "", values, out, 0)
    except nodes.DepthExceeded:
        raise nodes.too_deep(a, b) from None
    if values:
        from inspector.core.diff.values import leaf_value_stats

        pending = [d for d in out if isinstance(d, _Pending)]
        wrong = [f"{p.path or '(root)'}: {np.dtype(x.dtype).str}, {why}" for p in pending
                 for x in (p.a, p.b) if (why := unsupported_dtype(getattr(x, "dtype", "f4")))]
        if wrong:
            raise UnsupportedLeafError(
                f"Cannot compare values: {len(wrong)} leaves have a dtype JAX cannot compute "
                f"on.\n" + bullet_list(wrong) + "\nNothing was compared."
            )
        stats = iter(leaf_value_stats([(p.a, p.b) for p in pending], rtol, atol, device,
                                      progress))
        done = []
        for d in out:
            if isinstance(d, _Pending):
                s = next(stats)
                if s.max_abs != 0:
                    done.append(Difference(d.path, VALUE, None, None, s.max_abs, s.rel_l2,
                                           s.cosine, s.frac_changed))
            else:
                done.append(d)
        out = done
    return out


@dataclass(frozen=True, slots=True)
class _Pending:
    """Two same-shape leaves whose values are compared once the walk is over (all at once)."""

    path: str
    a: object
    b: object


def summary(node) -> str:
    """A short description of a subtree (`float32[3,2]`, `dict of 4`, `None`)."""
    if isinstance(node, Opaque):
        return node.summary()
    kind, kids = nodes.children(node)
    if kind == nodes.LEAF:
        shape, dtype, _, _ = leaf_info(node)
        if shape is None:
            return type(node).__name__
        return shape_text(dtype, shape)
    if kind == nodes.NONE:
        return "None"
    return container_text(nodes.type_name(node), len(kids))


def _compare(a, b, path: str, values: bool, out: list, depth: int) -> None:
    kind_a, kids_a = nodes.children(a)
    kind_b, kids_b = nodes.children(b)
    if kind_a == nodes.LEAF and kind_b == nodes.LEAF:
        _compare_leaves(a, b, path, values, out)
        return
    if kind_a == nodes.LEAF or kind_b == nodes.LEAF:
        out.append(Difference(path, TYPE, summary(a), summary(b)))
        return
    if depth >= nodes.MAX_DEPTH and (kids_a or kids_b):
        raise nodes.DepthExceeded
    if type(a) is not type(b):
        out.append(Difference(path, TYPE, nodes.type_name(a), nodes.type_name(b)))
    b_by_key = dict(kids_b)
    a_keys = set()
    for key, child_a in kids_a:
        a_keys.add(key)
        if key in b_by_key:
            _compare(child_a, b_by_key[key], path + key, values, out, depth + 1)
        else:
            out.append(Difference(path + key, MISSING, summary(child_a), None))
    for key, child_b in kids_b:
        if key not in a_keys:
            out.append(Difference(path + key, EXTRA, None, summary(child_b)))


def _compare_leaves(a, b, path: str, values: bool, out: list) -> None:
    if type(a) is Opaque or type(b) is Opaque:  # `type is`: the 100k-leaf walk stays cheap
        if type(a) is not type(b):
            out.append(Difference(path, TYPE, summary(a), summary(b)))
        elif a.type != b.type:
            out.append(Difference(path, TYPE, a.type, b.type))
        elif a != b:
            out.append(Difference(path, STATE, _content(a), _content(b)))
        return
    shape_a, dtype_a, _, _ = leaf_info(a)
    shape_b, dtype_b, _, _ = leaf_info(b)
    if shape_a is None or shape_b is None:
        if type(a) is not type(b):
            out.append(Difference(path, TYPE, type(a).__name__, type(b).__name__))
        return
    if shape_a != shape_b:
        out.append(Difference(path, SHAPE, shape_a, shape_b))
    if dtype_a != dtype_b:
        out.append(Difference(path, DTYPE, dtype_a, dtype_b))
    if values and shape_a == shape_b:
        out.append(_Pending(path, a, b))


def _content(x: Opaque) -> str:
    text = repr(x.plain())
    return f"{x.summary()} = {text if len(text) <= 80 else text[:79] + '…'}"
