"""Quantized weights in the tree view: a warning badge per problem, dequantized values.

A quantized weight is several leaves (codes, scales, zero points); a user thinks of it as one
weight. The tree shows the codes' row under the weight's logical name and shape, with its
layout in words and a warning badge per problem; the other members (scales, zero points,
group indices) are not shown as rows. Selecting it shows the dequantized values' statistics;
the raw codes are one switch away (`leaf_numbers.leaf_array(..., raw=True)`).
"""

from __future__ import annotations

import numpy as np

import inspector

WARNING = "#ed6c02"  # Material UI's warning colour, as the badges use


def badges(group) -> list[dict]:
    """One warning badge per problem (its first words; the whole sentence as its title)."""
    return [{"label": _badge_label(p), "color": "warning", "variant": "contained",
             "action": "quant", "title": p} for p in group.problems]


def _badge_label(problem: str) -> str:
    head = problem.split(":", 1)[0]
    return head if len(head) <= 24 else head[:23] + "…"


def dequantized_leaf(tree, group) -> np.ndarray | None:
    """The group's dequantized values (float32), computed by the same kernels as the op."""
    if not group.usable:
        return None
    from inspector.core.quant.rebuild import holder

    if isinstance(tree, inspector.PackedTree):
        tree = tree.unpack()  # views into its buffers
    members = holder(tree, group.steps)
    part = {n: members[n] for r, n in group.names.items() if r != "logical"}
    return np.asarray(inspector.dequantize(part, "float32")[group.names["logical"]])
