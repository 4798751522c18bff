"""Quantized weights on a tree's rows: one row per group, the other members inside it.

A quantized weight is several leaves (codes, scales, zero points); a user thinks of it as one
weight. Every front (the app's tree, the command line's `show`) shows the codes' row under the
weight's logical name and shape, and does not list the other members (scales, zero points,
group indices) as rows of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

_MAIN_ROLES = ("weight", "blocks", "qweight")


@dataclass
class QuantRows:
    """The groups of one tree by the row of their main member, and the rows not shown."""

    groups: dict = field(default_factory=dict)  # row -> QuantGroup
    hidden: set = field(default_factory=set)


def quant_rows(tree, rows: list, by_path: dict) -> QuantRows | None:
    """The tree's quantized weights placed on its rows; None when no row carries `quant`."""
    if not any(map(attrgetter("quant"), rows)):
        return None
    from inspector.core.quant.groups import quant_groups

    out = QuantRows()
    for g in quant_groups(tree):
        main = next((g.members[r] for r in _MAIN_ROLES if r in g.members), None)
        if main is None or main not in by_path:
            continue  # a scale with no weight: its own row stays, with its problem
        out.groups[by_path[main]] = g
        out.hidden.update(by_path[p] for r, p in g.members.items()
                          if p != main and p in by_path)
    return out
