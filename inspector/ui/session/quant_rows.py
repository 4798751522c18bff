"""Quantized weights in the tree view: one row per group, its problems as badges.

A quantized weight is several leaves (codes, scales, zero points); a user thinks of it as one
weight. The tree shows the codes' row under the weight's logical name and shape, with its
layout in words and a warning badge per problem; the other members (scales, zero points,
group indices) are not shown as rows. Selecting it shows the dequantized values' statistics;
the raw codes are one switch away (`leaf_numbers.leaf_array(..., raw=True)`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

import inspector

_MAIN_ROLES = ("weight", "blocks", "qweight")
WARNING = "#ed6c02"  # Material UI's warning colour, as the badges use


@dataclass
class QuantRows:
    """The groups of one tree by the row of their main member, and the rows not shown."""

    groups: dict = field(default_factory=dict)  # row -> QuantGroup
    hidden: set = field(default_factory=set)


def quant_rows(tree, rows: list, by_path: dict) -> QuantRows | None:
    """The tree's quantized weights placed on its rows; None when no row carries `quant`."""
    if not any(map(attrgetter("quant"), rows)):
        return None
    out = QuantRows()
    for g in inspector.quant_groups(tree):
        main = next((g.members[r] for r in _MAIN_ROLES if r in g.members), None)
        if main is None or main not in by_path:
            continue  # a scale with no weight: its own row stays, badge and all
        out.groups[by_path[main]] = g
        out.hidden.update(by_path[p] for r, p in g.members.items()
                          if p != main and p in by_path)
    return out


def badges(group) -> list[dict]:
    """One warning badge per problem (its first words; the whole sentence as its title)."""
    return [{"label": _badge_label(p), "color": "warning", "variant": "contained",
             "action": "quant", "title": p} for p in group.problems]


def _badge_label(problem: str) -> str:
    head = problem.split(":", 1)[0]
    return head if len(head) <= 24 else head[:23] + "…"


def logical_key(group) -> str:
    """The key shown for the group's row (`['gate_up_proj']`, `['weight']`)."""
    return f"[{group.names['logical']!r}]"


def dequantized_leaf(tree, group) -> np.ndarray | None:
    """The group's dequantized values (float32), computed by the same kernels as the op."""
    if not group.usable:
        return None
    from inspector.core.quant.dequantize import holder

    if isinstance(tree, inspector.PackedTree):
        tree = tree.unpack()  # views into its buffers
    members = holder(tree, group.steps)
    part = {n: members[n] for r, n in group.names.items() if r != "logical"}
    return np.asarray(inspector.dequantize(part, "float32")[group.names["logical"]])
