"""Quantized weights scanned as their values: each whole group (`quant_groups`: fp8 + scale,
MXFP4, GPTQ, AWQ) becomes one lazy float32 leaf at its logical key path, dequantized
(`core.quant.dequantize`) when the scan reads it, so memory still holds one group at a time;
its members (codes, scales, zero points) are not scanned on their own."""

from __future__ import annotations

import weakref

import numpy as np

from inspector.core.lazy import LazyArray
from inspector.core.packed import PackedTree
from inspector.core.quant.dequantize import dequantize
from inspector.core.quant.groups import QuantGroup, quant_groups
from inspector.core.quant.rebuild import edits_of, holder, rebuild_tree

_HAS_GROUPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def has_groups(tree) -> bool:
    """Whether `tree` holds a quantized weight that can be dequantized (per packed layout,
    looked for once: a layout is shared by every tree of its structure)."""
    if isinstance(tree, PackedTree):
        found = _HAS_GROUPS.get(tree.layout)
        if found is None:
            found = _HAS_GROUPS[tree.layout] = any(g.usable for g in quant_groups(tree))
        return found
    return any(g.usable for g in quant_groups(tree))


def dequantized_view(tree):
    """`tree` with each usable quantized group replaced by a lazy float32 leaf of its values
    (the tree itself when there is none)."""
    groups = [g for g in quant_groups(tree) if g.usable]
    if not groups:
        return tree
    leaves = {id(g): LazyArray(g.shape, "float32", _Reader(tree, g),
                               source=f"dequantized {g.scheme} weight {g.path}")
              for g in groups}
    return rebuild_tree(tree, (), edits_of(groups), leaves)


class _Reader:
    """Dequantizes one group: its members alone, as a small tree of their own."""

    __slots__ = ("group", "tree")

    def __init__(self, tree, group: QuantGroup):
        self.tree, self.group = tree, group

    def __call__(self) -> np.ndarray:
        names = self.group.names
        node = holder(self.tree, self.group.steps)
        members = {v: node[v] for k, v in names.items() if k != "logical"}
        return np.asarray(dequantize(members, "float32")[names["logical"]])
