"""What one dict's leaves hold, found once per leaf layout: the groups among them, relative
to the dict (`Kind`), shared by every dict of that layout.

A 100,000-leaf checkpoint has tens of thousands of dicts of leaves but a handful of layouts
(the same `weight` + `weight_scale_inv` shapes in every layer), so the finders run once per
layout and each dict only pays for a dictionary look-up and a record per group.
"""

from __future__ import annotations

from inspector.core.quant import schemes as S

_SCALE_ENDS = ("weight_scale_inv", "weight_scale", "scale_weight")
MARKS = (*_SCALE_ENDS, "_blocks", "_scales", "qweight", "qzeros", "scales", "g_idx")
BLOCKING = ("no scale", "no weight", "no codes", "missing", "unknown")
MAIN_ROLES = ("weight", "blocks", "qweight")


class Kind:
    """One group as found among a dict's leaves, with everything that does not depend on
    where the dict is: its fields, the key fragments of its members, its text."""

    __slots__ = ("scheme", "shape", "dtype", "layout", "block", "names", "frag", "roles",
                 "frags", "keys", "problems", "main", "text", "usable")

    def __init__(self, scheme, logical, members: dict, shape, dtype, problems, layout, block):
        self.scheme, self.shape, self.dtype = scheme, shape, dtype
        self.layout, self.block = layout, block
        self.names = {**members, "logical": logical}
        self.frag = f"[{logical!r}]"  # the logical weight's key fragment
        self.roles = tuple(members)
        self.frags = tuple(f"[{n!r}]" for n in members.values())
        self.keys = tuple(members.values())  # the members' raw keys in the dict
        self.problems = tuple(problems)
        # the fragment of the member whose row shows the group (None: a scale on its own)
        self.main = next((self.frags[self.roles.index(r)] for r in MAIN_ROLES
                          if r in members), None)
        scales = [self.frags[self.roles.index(r)] for r in ("scale", "scales") if r in members]
        where = f" in [{_short(scales[0])}]" if scales and layout else ""
        self.text = layout + where
        self.usable = shape is not None and not any(
            p.startswith(BLOCKING) or "does not tile" in p for p in problems)


def _short(frag: str) -> str:
    """`'…weight_scale_inv'` for a key fragment (dotted names keep their last part)."""
    name = frag[1:-1].strip("'\"")
    return f"'…{name.rsplit('.', 1)[1]}'" if "." in name else f"'{name}'"


def hit(leaves: dict) -> bool:
    """Whether any leaf may be a member: float8 codes, or a member's name."""
    fp8 = S.FP8_TYPES
    return any(type(k) is str and k.endswith(MARKS) or getattr(v.dtype, "type", None) in fp8
               for k, v in leaves.items())


def analyse(leaves: dict, order: list) -> tuple:
    """The groups among one dict's leaves (`leaves`: key -> leaf; `order`: their keys in
    JAX's order), as `Kind`s sorted by logical name."""
    from inspector.core.quant import finders

    if not hit(leaves):
        return ()
    node = {k: leaves[k] for k in order if type(k) is str}
    taken: set = set()
    fp8 = [k for k, v in node.items() if getattr(v.dtype, "type", None) in S.FP8_TYPES]
    found = [finders.fp8_group(node, name, taken) for name in fp8]
    found.extend(finders.scale_orphans(node, taken))
    found.extend(finders.mxfp4_groups(node, taken))
    found.extend(finders.int4_group(node, taken))
    return tuple(Kind(*g) for g in sorted(found, key=lambda g: g[1]))
