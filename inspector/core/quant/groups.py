"""`quant_groups(tree)`: the quantized weights of a tree, each found as one logical weight.

A quantized checkpoint stores a weight as several leaves (codes, scales, zero points, group
indices) that only mean something together. The groups are found by the members' names and
dtypes among the siblings of each dict, from shapes and dtypes alone: a lazy checkpoint is not
read. What is wrong is listed in `QuantGroup.problems`, never raised: a float8 weight with no
scale beside it (its figures are off by the missing factor), a scale with no weight, shapes
that do not tile, members that live in different files of a sharded checkpoint.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from inspector.core import nodes
from inspector.core.lazy import LazyArray
from inspector.core.packed import structure_of
from inspector.core.quant import schemes as S


@dataclass(frozen=True)
class QuantGroup:
    """One quantized weight: its members and what it is once dequantized.

    Attributes:
        scheme: "fp8", "mxfp4", "gptq" or "awq".
        path: the logical weight's key path (`['mlp']['up_proj']['weight']`); for MXFP4 the
            name without `_blocks`, for GPTQ / AWQ the `['weight']` beside `qweight`.
        members: role -> key path of each member leaf (fp8: "weight", "scale"; mxfp4:
            "blocks", "scales"; gptq / awq: "qweight", "qzeros", "scales", and "g_idx").
        shape: the dequantized weight's shape (None when the codes are missing).
        dtype: the dtype its producer dequantizes to (bfloat16 for fp8 and mxfp4, the
            scales' dtype for gptq / awq); None when unknown.
        problems: what is wrong, one sentence each; empty when the group is whole.
        layout: how the scales cover the weight, in words (`fp8 e4m3 · 128x128 block scales`).
        block: the block each scale covers (one length per weight dimension), if known.
        parent, names: where the members live (the holding dict's keys from the root, and
            each role's own key there, with the "logical" key), for `dequantize`; not shown
            or compared.
    """

    scheme: str
    path: str
    members: dict
    shape: tuple[int, ...] | None
    dtype: str | None
    problems: list = field(default_factory=list)
    layout: str = ""
    block: tuple | None = None
    parent: tuple = field(default=(), repr=False, compare=False)
    names: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def steps(self) -> tuple:
        """The steps from the root to the dict holding the members: raw dict keys, and
        `(keystr,)` for a step through a list, tuple or custom node."""
        out, link = [], self.parent
        while link:
            link, key = link[0], link[1]
            out.append(key)
        return tuple(reversed(out))

    @property
    def usable(self) -> bool:
        """Whether it can be dequantized: every member present, shapes that tile."""
        return self.shape is not None and not any(
            p.startswith(_BLOCKING) or "does not tile" in p for p in self.problems)

    @property
    def text(self) -> str:
        """What `describe` shows beside the weight: the layout, where the scales are, and
        the problems (`fp8 e4m3 · 128x128 block scales in ['…weight_scale_inv']`)."""
        scales = [self.members[r] for r in ("scale", "scales") if r in self.members]
        where = f" in [{_short(scales[0])}]" if scales and self.layout else ""
        return "; ".join([self.layout + where, *self.problems]) if self.problems \
            else self.layout + where


_BLOCKING = ("no scale", "no weight", "no codes", "missing", "unknown")


def _short(path: str) -> str:
    """`'…weight_scale_inv'` for the last key of a path (dotted names keep their last part)."""
    key = path[path.rfind("[") + 1:-1] if path.endswith("]") else path
    name = key.strip("'\"")
    return f"'…{name.rsplit('.', 1)[1]}'" if "." in name else f"'{name}'"


def quant_groups(tree) -> list[QuantGroup]:
    """Returns every quantized weight of `tree` (a `QuantGroup` each), dict by dict in JAX's
    key order (a dict's own groups by logical name, then those of the dicts inside it).

    Finds FP8 weights with per-tensor, per-channel or block scales (`weight_scale_inv`,
    `weight_scale`, `scale_weight`), MXFP4 (`X_blocks` + `X_scales`), GPTQ and AWQ int4
    (`qweight`, `qzeros`, `scales`, `g_idx`), in plain dicts and dict-like nodes at any
    depth, with flat dotted names too (`"mlp.up_proj.weight"`). Reads shapes and dtypes only.

    >>> import ml_dtypes
    >>> tree = {"up": {"weight": np.zeros((256, 384), ml_dtypes.float8_e4m3fn),
    ...                "weight_scale_inv": np.ones((2, 3), np.float32)}}
    >>> [(g.scheme, g.path, g.shape, g.layout) for g in quant_groups(tree)]
    [('fp8', "['up']['weight']", (256, 384), 'fp8 e4m3 · 128x128 block scales')]
    """
    out: list[QuantGroup] = []
    collecting = gc.isenabled()
    gc.disable()  # tens of thousands of small acyclic records: no cycles to collect (2-3x)
    try:
        _walk(structure_of(tree), "", (), out, 0)
    except nodes.DepthExceeded:
        raise nodes.too_deep(tree) from None
    finally:
        if collecting:
            gc.enable()
    return out


_SCALE_ENDS = ("weight_scale_inv", "weight_scale", "scale_weight")
_MARKS = (*_SCALE_ENDS, "_blocks", "_scales", "qweight", "qzeros", "scales", "g_idx")
_FOUND: dict = {}  # a dict's leaf signature -> the groups among them (relative to the dict)
_FOUND_LIMIT = 4096
_NEW = object.__new__
_SET = object.__setattr__
_MAX_DEPTH = nodes.MAX_DEPTH


def _walk(node, path: str, keys: tuple, out: list, depth: int) -> None:
    # Hot: a 100,000-leaf checkpoint is searched in one pass. A dict's leaves are looked at
    # once each (a dtype and a name suffix), in the dict's own order; the dicts that may hold
    # groups are matched by their leaves' (name, shape, dtype) signature, so the 50,000 layers
    # of one model are analysed once per distinct layer layout, not once each; only the keys
    # of the dicts inside are sorted (JAX's order). One frame per level: the depth guard must
    # trip before Python's recursion limit.
    if depth > _MAX_DEPTH:
        raise nodes.DepthExceeded
    if type(node) is not dict:
        listed = _mapping_items(node) if isinstance(node, Mapping) else None
        if listed is not None:
            node = dict(listed)
        else:  # a list, tuple, custom node or leaf: its children by keystr
            t = type(node)
            if t is np.ndarray or t is LazyArray:
                return
            kind, kids = nodes.children(node)
            if kind == nodes.LEAF:
                return
            for key, child in kids:
                if type(child) is not np.ndarray and type(child) is not LazyArray:
                    _walk(child, path + key, (keys, (key,)), out, depth + 1)
            return
    inner = sig = None
    hit = False
    text = True  # every key a str: the leaves sort by name, as JAX sorts the dict
    fp8_types, marks, lazy, ndarray, str_ = S.FP8_TYPES, _MARKS, LazyArray, np.ndarray, str
    for k, v in node.items():
        t = type(v)
        if t is dict:
            if inner is None:
                inner = [k]
            else:
                inner.append(k)
            if text and type(k) is not str_:
                text = False
        elif t is lazy or t is ndarray or (hasattr(v, "dtype") and hasattr(v, "shape")):
            if type(k) is str_:
                code = v.dtype.type
                if sig is None:
                    sig = [k, v.shape, code]
                else:
                    sig += (k, v.shape, code)
                if not hit and (code in fp8_types or k.endswith(marks)):
                    hit = True
            else:
                text = False
        else:
            if inner is None:
                inner = [k]
            else:
                inner.append(k)
            if text and type(k) is not str_:
                text = False
    if hit:
        _emit(node, sig, text, path, keys, out)
    if inner is not None:
        if len(inner) > 1:
            if text:
                inner.sort()
            else:
                inside = set(inner)
                inner = [k for k in _sorted(node) if k in inside]
        for k in inner:
            # keys as a linked pair (parent keys, key): flattened only where a group needs them
            _walk(node[k], f"{path}[{k!r}]", (keys, k), out, depth + 1)


def _sorted(node):
    try:
        return sorted(node)
    except TypeError:  # keys of mixed types: JAX keeps insertion order
        return list(node)


def _mapping_items(node):
    try:
        return list(node.items())
    except Exception:  # a Mapping that cannot list itself: walk it as JAX flattens it
        return None


def _emit(node: dict, sig: list, text: bool, path: str, keys: tuple, out: list) -> None:
    """The groups of one dict's leaves (`sig`: name, shape, dtype type of each, in the dict's
    order), found once per signature and given this dict's paths."""
    if not text:
        sig.append(_INSERTION_ORDER)
    sig = tuple(sig)
    found = _FOUND.get(sig)
    if found is None:
        if len(_FOUND) >= _FOUND_LIMIT:
            _FOUND.clear()
        found = _FOUND[sig] = _analyse(node, sig, text)
    if not found:
        return
    new, set_, group, last = _NEW, _SET, QuantGroup, _LAST_FILE
    for shared, frag, roles, frags, names, problems in found:
        problems = list(problems) if problems else []
        if type(node[names[0]]) is LazyArray:
            # Sources read `file:tensor`; most groups' members share the file of the group
            # before them, which settles them with a `startswith` each.
            prefix = last[0]
            for n in names:
                leaf = node[n]
                if not prefix or type(leaf) is not LazyArray or \
                        not leaf.source.startswith(prefix):
                    split = _split([(n, node[n]) for n in names])
                    if split:
                        problems.append(split)
                    break
        g = new(group)
        # The dataclass is frozen: its fields are set once here, bypassing the frozen
        # __setattr__ (the generated __init__ costs ~3 us a group; 50,000 groups: 150 ms).
        values = shared.copy()
        values["path"] = path + frag
        values["members"] = dict(zip(roles, [path + f for f in frags], strict=True))
        values["problems"] = problems
        values["parent"] = keys
        set_(g, "__dict__", values)
        out.append(g)


_INSERTION_ORDER = object()  # ends the signature of a dict whose keys do not all sort


def _analyse(node: dict, sig: tuple, text: bool) -> list:
    """The groups among one dict's leaves, relative to it (cached by signature)."""
    from inspector.core.quant import finders

    names = set(sig[0:len(sig) - (not text):3])
    order = sorted(names) if text else [k for k in _sorted(node) if k in names]
    leaves = [(k, node[k]) for k in order]
    node = dict(leaves)
    taken: set = set()
    fp8 = [k for k, v in leaves if v.dtype.type in S.FP8_TYPES]
    found = [finders.fp8_group(node, name, taken) for name in fp8]
    found.extend(finders.scale_orphans(node, taken))
    found.extend(finders.mxfp4_groups(node, taken))
    found.extend(finders.int4_group(node, taken))
    return [({"scheme": scheme, "shape": shape, "dtype": dtype, "layout": layout,
              "block": block, "names": {**members, "logical": logical}},
             f"[{logical!r}]", tuple(members), tuple(f"[{n!r}]" for n in members.values()),
             tuple(members.values()), tuple(problems))
            for scheme, logical, members, shape, dtype, problems, layout, block
            in sorted(found, key=lambda g: g[1])]


_LAST_FILE = [""]  # the file prefix (`path:`) of the last group checked


def _split(members: list) -> str | None:
    """`split across shards: …` when a group's lazy members (`(name, leaf)`) come from
    different files."""
    files = {}
    for name, leaf in members:
        if type(leaf) is LazyArray:
            source = leaf.source
            cut = source.rfind(":")
            files[name] = source[:cut] if cut > 0 else source
    if files:
        _LAST_FILE[0] = next(iter(files.values())) + ":"
    if len(set(files.values())) < 2:
        return None
    return "split across shards: " + ", ".join(
        f"{name} in {file.replace(chr(92), '/').rsplit('/', 1)[-1]}"
        for name, file in files.items())
