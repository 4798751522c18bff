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

import numpy as np

from inspector.core import nodes
from inspector.core.lazy import LazyArray
from inspector.core.packed import structure_of
from inspector.core.quant import kinds


class QuantGroup:
    """One quantized weight: its members and what it is once dequantized (read-only).

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

    A record costs a few hundred nanoseconds: what every dict of one leaf layout shares (the
    scheme, shapes, layout, member names) is one `kinds.Kind`, the key paths are joined
    from the holding dict's path when read (for a dict of two leaves, the holding dict's
    path and its `(parent, key)` link too), and a group with no problems beyond its kind's
    gets its own `problems` list when that is first read.
    """

    __slots__ = ("_kind", "_at", "_up", "_key", "_problems", "_parent", "_members")

    scheme = property(lambda self: self._kind.scheme)
    shape = property(lambda self: self._kind.shape)
    dtype = property(lambda self: self._kind.dtype)
    layout = property(lambda self: self._kind.layout)
    block = property(lambda self: self._kind.block)
    names = property(lambda self: self._kind.names)
    usable = property(lambda self: self._kind.usable,
                      doc="Whether it can be dequantized: every member present, shapes "
                          "that tile.")

    @property
    def parent(self) -> tuple:
        """The holding dict's keys from the root, linked: `(parent's link, key)`."""
        try:
            key = self._key  # found in a dict of two leaves: `_parent` is the link above
        except AttributeError:
            return self._parent
        return (self._parent, key)  # not kept: a record is never changed once made

    @property
    def problems(self) -> list:
        try:
            return self._problems
        except AttributeError:  # none but its kind's: its own list, made when first read
            self._problems = list(self._kind.problems)
            return self._problems

    @property
    def _where(self) -> str:
        """The holding dict's key path: set, or joined when first read from the path of the
        dict above it (`_up`) and the last key (a group the walk found in a dict of two
        leaves)."""
        try:
            return self._at
        except AttributeError:
            self._at = at = f"{self._up}[{self.parent[1]!r}]"
            return at

    @property
    def path(self) -> str:
        return self._where + self._kind.frag

    @property
    def members(self) -> dict:
        try:
            return self._members
        except AttributeError:
            kind, at = self._kind, self._where
            self._members = dict(zip(kind.roles, [at + f for f in kind.frags], strict=True))
            return self._members

    @property
    def main(self) -> str | None:
        """The key path of the member whose row shows the group (its codes); None for a
        scale with no weight."""
        main = self._kind.main
        return None if main is None else self._where + main

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
    def text(self) -> str:
        """What `describe` shows beside the weight: the layout, where the scales are, and
        the problems (`fp8 e4m3 · 128x128 block scales in ['…weight_scale_inv']`)."""
        text, problems = self._kind.text, self.problems
        return "; ".join([text, *problems]) if problems else text

    def _fields(self) -> tuple:
        return (self.scheme, self.path, self.members, self.shape, self.dtype, self.problems,
                self.layout, self.block)

    def __eq__(self, other):
        if type(other) is not QuantGroup:
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # members and problems are mutable

    def __repr__(self) -> str:
        names = ("scheme", "path", "members", "shape", "dtype", "problems", "layout", "block")
        return "QuantGroup(" + ", ".join(
            f"{n}={v!r}" for n, v in zip(names, self._fields(), strict=True)) + ")"


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
        _walk(structure_of(tree), "", (), out, 0, {}, {})
    except nodes.DepthExceeded:
        raise nodes.too_deep(tree) from None
    finally:
        if collecting:
            gc.enable()
    return out


_NEW = object.__new__
_MAX_DEPTH = nodes.MAX_DEPTH
_UNSORTABLE = object()  # ends the signature of a dict whose keys do not all sort


def _walk(node, path: str, keys: tuple, out: list, depth: int, found: dict,
          frags: dict) -> None:
    # Hot: a 100,000-leaf checkpoint is searched in one pass, as cheaply as a bare walk of
    # its dicts allows. `found` maps a dict's leaf signature (keys, shapes, dtypes) to its
    # groups (`kinds.Kind`s, found once per leaf layout per call); `frags` a key to its
    # `['key']` fragment. Most dicts of a checkpoint hold arrays only: those are done by
    # their parent's loop (no frame), the common two-leaf one (`weight` + its scale, or
    # `weight` + `bias`) unrolled; their sources are read only when they hold a group. A
    # dict's own leaves are searched after its children, their groups put before the
    # children's (the order: a dict's own groups, then those of the dicts inside it). Keys
    # are kept as a linked pair (parent keys, key), flattened only where a group needs
    # them. One frame per level: the depth guard trips before Python's recursion limit.
    if depth > _MAX_DEPTH:
        raise nodes.DepthExceeded
    if type(node) is not dict:
        listed = _mapping_items(node) if isinstance(node, Mapping) else None
        if listed is None:  # a list, tuple, custom node or leaf: its children by keystr
            t = type(node)
            if t is np.ndarray or t is LazyArray:
                return
            kind, kids = nodes.children(node)
            if kind == nodes.LEAF:
                return
            for key, child in kids:
                if type(child) is not np.ndarray and type(child) is not LazyArray:
                    _walk(child, path + key, (keys, (key,)), out, depth + 1, found, frags)
            return
        node = dict(listed)
    try:
        inner, sortable = sorted(node), True
    except TypeError:  # keys of mixed types: JAX keeps insertion order
        inner, sortable = list(node), False
    lazy, ndarray = LazyArray, np.ndarray
    new, group = _NEW, QuantGroup
    mark = len(out)
    leafy = False
    prefix = _LAST_FILE[0]
    for k in inner:
        child = node[k]
        t = type(child)
        if t is dict:
            if len(child) == 2:
                (ka, a), (kb, b) = child.items()
                ta, tb = type(a), type(b)
                if ta is lazy and tb is lazy:  # a checkpoint's: signed by interned tokens
                    sig = (ka, kb, a.layout, b.layout)
                    kinds_ = found.get(sig)
                    if kinds_ is None:
                        kinds_ = found[sig] = _analysed(child, child)
                    if kinds_:
                        file = a._file  # one file (a reader's one string, else by name)
                        if (file is b._file and file is not None) or (
                                prefix and a.source.startswith(prefix) and
                                b.source.startswith(prefix)):  # not split: no shard check
                            for kind in kinds_:  # `_parent` + `_key`: the link made when read
                                g = new(group)
                                g._kind, g._up, g._parent, g._key = kind, path, keys, k
                                out.append(g)
                        else:
                            _records(kinds_, child, path + (frags.get(k) or _frag(frags, k)),
                                     (keys, k), out)
                            prefix = _LAST_FILE[0]
                    continue
                if (ta is lazy or ta is ndarray) and (tb is lazy or tb is ndarray):
                    kinds_ = found.get((ka, kb, a.shape, a.dtype, b.shape, b.dtype))
                    if kinds_ is None:
                        kinds_ = found[ka, kb, a.shape, a.dtype, b.shape, b.dtype] = \
                            _analysed(child, child)
                    if kinds_:
                        at = path + (frags.get(k) or _frag(frags, k))
                        if ((ta is ndarray or (prefix and a.source.startswith(prefix))) and
                                (tb is ndarray or (prefix and b.source.startswith(prefix)))):
                            link = (keys, k)
                            for kind in kinds_:
                                g = _NEW(QuantGroup)
                                g._kind, g._at, g._parent = kind, at, link
                                out.append(g)
                        else:
                            _records(kinds_, child, at, (keys, k), out)
                            prefix = _LAST_FILE[0]
                    continue
            elif child:
                sig = [*child]
                for v in child.values():
                    tv = type(v)
                    if tv is not lazy and tv is not ndarray:
                        break  # not arrays only: walked below as any dict
                    sig += (v.shape, v.dtype)
                else:
                    sig = tuple(sig)
                    kinds_ = found.get(sig)
                    if kinds_ is None:
                        kinds_ = found[sig] = _analysed(child, child)
                    if kinds_:
                        _records(kinds_, None if _one_file(child.values()) else child,
                                 path + (frags.get(k) or _frag(frags, k)), (keys, k), out)
                        prefix = _LAST_FILE[0]
                    continue
            else:
                continue
        elif t is lazy or t is ndarray or (hasattr(child, "dtype") and hasattr(child, "shape")):
            leafy = True
            continue
        _walk(child, f"{path}[{k!r}]", (keys, k), out, depth + 1, found, frags)
    if leafy:  # the dict's own array leaves (a checkpoint with flat dotted names)
        _own_leaves(node, inner, sortable, path, keys, out, mark, found)


def _frag(frags: dict, key) -> str:
    """`['key']`, kept for str keys (`1` and `True` are one dict key but two fragments)."""
    frag = f"[{key!r}]"
    if type(key) is str:
        frags[key] = frag
    return frag


def _own_leaves(node: dict, order: list, sortable: bool, path: str, keys: tuple, out: list,
                mark: int, found: dict) -> None:
    """The groups among a dict's own array leaves (`order`: its keys in JAX's order), put at
    `out[mark]`, before those of the dicts inside it."""
    leaves = {k: v for k, v in node.items() if type(k) is str and type(v) is not dict and (
        type(v) is LazyArray or type(v) is np.ndarray or (
            hasattr(v, "dtype") and hasattr(v, "shape")))}
    if not leaves:
        return
    sig = _signature(leaves) + (() if sortable else (_UNSORTABLE,))
    kinds_ = found.get(sig)
    if kinds_ is None:
        kinds_ = found[sig] = kinds.analyse(leaves, [k for k in order if k in leaves])
    if kinds_:
        records: list = []
        _records(kinds_, None if _one_file(leaves.values()) else leaves, path, keys, records)
        out[mark:mark] = records


def _signature(leaves: dict) -> tuple:
    """The keys, then each leaf's shape and dtype: what the groups among them depend on."""
    sig = [*leaves]
    for v in leaves.values():
        sig += (tuple(v.shape), getattr(v.dtype, "type", v.dtype))
    return tuple(sig)


def _mapping_items(node):
    try:
        return list(node.items())
    except Exception:  # a Mapping that cannot list itself: walk it as JAX flattens it
        return None


def _analysed(leaves: dict, node: dict) -> tuple:
    """The groups (`Kind`s) among a dict's array leaves."""
    return kinds.analyse(leaves, _order(node, leaves))


def _one_file(leaves) -> bool:
    """Whether the lazy ones among `leaves` all come from the file of the group checked
    before (sources read `file:tensor`): then none of their groups is split across shards."""
    prefix = _LAST_FILE[0]
    for v in leaves:
        if type(v) is LazyArray and not (prefix and v.source.startswith(prefix)):
            return False
    return True


def _records(found: tuple, leaves: dict | None, path: str, keys: tuple, out: list) -> None:
    """One `QuantGroup` per kind, at `path`; each checked for members in different files
    unless `leaves` is None."""
    new, group = _NEW, QuantGroup
    for kind in found:
        g = new(group)
        g._kind, g._at, g._parent = kind, path, keys
        problems = list(kind.problems) if kind.problems else []
        if leaves is not None:
            split = _split([(n, leaves[n]) for n in kind.keys])
            if split:
                problems.append(split)
        g._problems = problems
        out.append(g)


def _order(node: dict, leaves: dict) -> list:
    """The leaves' keys in JAX's order: sorted, unless the dict's keys do not sort."""
    try:
        order = sorted(node)
    except TypeError:
        order = list(node)
    return [k for k in order if k in leaves]


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
