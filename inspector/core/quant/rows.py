"""Quantized weights on a tree's rows: one row per group, the other members inside it.

A quantized weight is several leaves (codes, scales, zero points); a user thinks of it as one
weight. Every front (the app's tree, the command line's `show`) shows the codes' row under the
weight's logical name and shape, and does not list the other members (scales, zero points,
group indices) as rows of their own.

`describe` searches the tree once (`mark`); the `TreeIndex` built on the same rows takes that
search over (`quant_rows`) instead of searching again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

from inspector.core.quant.groups import quant_groups


@dataclass
class QuantRows:
    """The groups of one tree by the row of their main member, and the rows not shown."""

    groups: dict = field(default_factory=dict)  # row -> QuantGroup
    hidden: set = field(default_factory=set)


_HANDED: list = [None]  # (rows, id(tree), groups) of the last `mark`, until a `quant_rows` takes it


def mark(tree, rows: list) -> None:
    """Puts each group's text (`QuantGroup.text`) on the row of its codes (`Row.quant`; a
    scale with no weight: on the scale's row). `rows` are `describe(tree)`'s, changed in
    place."""
    groups = quant_groups(tree)
    _HANDED[0] = (rows, id(tree), groups) if groups else None
    if not groups:
        return
    texts = {}
    for g in groups:
        texts[g.main or next(iter(g.members.values()))] = g.text
    get = texts.get
    for i, row in enumerate(rows):
        text = get(row.path)
        if text is not None:
            rows[i] = row._replace(quant=text)


def quant_rows(tree, rows: list, by_path: dict) -> QuantRows | None:
    """The tree's quantized weights placed on its rows; None when no row carries `quant`."""
    if not any(map(attrgetter("quant"), rows)):
        return None
    handed, _HANDED[0] = _HANDED[0], None
    if handed is not None and handed[0] is rows and handed[1] == id(tree):
        groups = handed[2]  # the search `describe` made for these rows
    else:
        groups = quant_groups(tree)
    out = QuantRows()
    for g in groups:
        main = g.main
        if main is None or main not in by_path:
            continue  # a scale with no weight: its own row stays, with its problem
        out.groups[by_path[main]] = g
        out.hidden.update(by_path[p] for p in g.members.values() if p != main and p in by_path)
    return out
