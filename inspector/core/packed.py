"""Packed trees: a pytree's leaves held in one flat buffer per dtype.

XLA compiles one fusion per leaf, and compile time grows faster than the leaf count (about a
minute at 10,000 leaves). An elementwise op over a packed tree is one kernel per dtype, whatever
the leaf count, and compiles in well under a second. Leaves are views into the buffers, so
unpacking on the host is free. `pack` fills host buffers; `packed_reads.read_packed` fills device
buffers.
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, field
from functools import cached_property, partial

import jax
import numpy as np

from inspector.core import nodes
from inspector.core.errors import StructureMismatchError, UnsupportedLeafError, bullet_list
from inspector.core.host_read import fill, host_array
from inspector.core.lazy import stored_as
from inspector.core.leaves import dtype_name, leaf_info
from inspector.core.mapped_groups import MappedGroup


@dataclass(frozen=True, slots=True)
class Slot:
    """Where one leaf lives: `buffers[group][..., offset : offset + size]`, reshaped to
    `lead + shape` (`lead`: the layout's leading dimensions, shared by every leaf).

    `pack` names each buffer (group) after its dtype; an op's result keeps its inputs' group
    names even where the dtype changes (int32 leaves with float weights become float32).
    `stored` is how the leaf's file held it when that was quantized (a GGUF `Q4_K` read as
    float32: `LazyArray.quant`'s type), so `dequantize` of the packed tree still knows it.
    """

    group: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    stored: str | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True, eq=False)
class Layout:
    """A packed tree's structure: its treedef, one `Slot` per leaf, each group's length, and
    the leading dimensions `lead` every leaf shares.

    Buffers have shape `lead + (size,)`. With `lead == ()` (what `pack` makes) each leaf is a
    contiguous run of its buffer. A stacked tree (`stack` of packed trees, or
    `pack(tree, lead_dims=1)`) keeps its model axis as the buffers' leading axis, so stack,
    unstack and an index on that axis are each one kernel per dtype, whatever the leaf count.

    Hashable and cheap to compare, because it is part of every compile-cache and plan-cache
    key: the hash is computed once, and layouts are interned (`pack` of two trees of one
    structure gives the very same `Layout` object), so comparing them is an identity check,
    not a walk over 20,000 slots on every op.
    """

    treedef: jax.tree_util.PyTreeDef
    slots: tuple[Slot, ...]
    sizes: dict[str, int] = field(hash=False)
    lead: tuple[int, ...] = ()

    @cached_property
    def _key(self):
        return (self.treedef, self.slots, self.lead)

    @cached_property
    def structure(self):
        """The tree with a `jax.ShapeDtypeStruct` per leaf; built once, shared by every packed
        tree of this layout (describe and diff of 100k-leaf trees would rebuild it each time)."""
        specs = [jax.ShapeDtypeStruct(self.lead + s.shape, np.dtype(s.dtype)) for s in self.slots]
        return self.treedef.unflatten(specs)

    @cached_property
    def ordinals(self) -> dict[int, int]:
        """`id(leaf)` of each leaf of `structure` -> its position in flattening order (the
        structure's leaves are distinct objects), so a walk over `structure` finds slots
        without building key paths."""
        return {id(x): i for i, x in enumerate(jax.tree_util.tree_leaves(self.structure))}

    @cached_property
    def group_dtypes(self) -> dict[str, str]:
        """Each group's dtype (every slot of a group has its dtype)."""
        return {s.group: s.dtype for s in self.slots}

    @cached_property
    def _derived(self) -> dict:
        return {}

    def with_lead(self, lead: tuple[int, ...], dtypes: dict | None = None) -> Layout:
        """This layout with other leading dimensions (and group dtypes, if given); the same
        object for the same arguments, so ops on its results compare layouts by identity."""
        key = (tuple(lead), tuple(sorted(dtypes.items())) if dtypes else None)
        found = self._derived.get(key)
        if found is None:
            slots = self.slots if not dtypes else tuple(
                Slot(s.group, dtypes[s.group], s.shape, s.offset) for s in self.slots)
            found = self._derived[key] = interned(
                Layout(self.treedef, slots, self.sizes, tuple(lead)))
        return found

    @cached_property
    def _hash(self) -> int:
        return hash(self._key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other or (
            isinstance(other, Layout) and self._hash == other._hash and self._key == other._key
        )


_LAYOUTS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_LAYOUTS_LOCK = threading.Lock()


def interned(layout: Layout) -> Layout:
    """The one live `Layout` equal to `layout` (itself if there is none yet)."""
    with _LAYOUTS_LOCK:
        found = _LAYOUTS.get(layout._key)
        if found is None:
            _LAYOUTS[layout._key] = found = layout
        return found


class PackedTree:
    """A pytree whose leaves are held as one flat buffer per dtype (NumPy or JAX arrays).

    Build one with `pack(tree)`; get the tree back with `.unpack()`. `describe`, `diff` and the
    ops accept packed trees directly; `weighted_sum` of packed trees runs one kernel per dtype.

    >>> p = pack({"w": np.ones((2, 2), np.float32), "b": np.arange(2, dtype=np.float32)})
    >>> p.n_leaves, p.nbytes, sorted(p.buffers)
    (2, 24, ['float32'])
    >>> p.unpack()["b"].tolist()
    [0.0, 1.0]
    """

    __slots__ = ("layout", "buffers")

    def __init__(self, layout: Layout, buffers: dict):
        self.layout = layout
        self.buffers = buffers

    @property
    def n_leaves(self) -> int:
        return len(self.layout.slots)

    @property
    def nbytes(self) -> int:
        return sum(int(b.size) * np.dtype(b.dtype).itemsize for b in self.buffers.values())

    @property
    def devices(self) -> set:
        """The devices holding the buffers (empty when they are host NumPy arrays)."""
        out = set()
        for b in self.buffers.values():
            if isinstance(b, jax.Array):
                out |= b.sharding.device_set
        return out

    def structure(self):
        """Returns the tree with a `jax.ShapeDtypeStruct` for each leaf (no data touched).

        The one way to the packed tree's structure: its treedef, key paths, shapes and dtypes
        all follow from it (`jax.tree_util.tree_flatten_with_path(p.structure())`).
        """
        return self.layout.structure

    @property
    def treedef(self) -> jax.tree_util.PyTreeDef:
        """The tree's `PyTreeDef` (leaves in JAX's flattening order)."""
        return self.layout.treedef

    def leaf(self, n: int):
        """Returns leaf `n` (in flattening order): a view into its buffer on the host, or a JAX
        array sliced on the device; the other leaves are not touched.

        >>> p = pack([np.zeros(2, np.float32), np.arange(3, dtype=np.float32)])
        >>> p.leaf(1).tolist()
        [0.0, 1.0, 2.0]
        """
        s = self.layout.slots[n]
        lead = self.layout.lead
        buf = _host_view(self.buffers[s.group])
        if type(buf) is MappedGroup:  # where it lies in its file
            return buf.view(s.offset, s.size).reshape(s.shape)
        if buf is not None:
            return buf[..., s.offset : s.offset + s.size].reshape(lead + s.shape)
        return _take(self.buffers[s.group], s.offset, lead, s.shape)

    def leaves(self) -> list:
        """Returns the leaves: views into the buffers (host) or JAX arrays sliced on device."""
        host = {k: _host_view(b) for k, b in self.buffers.items()}
        lead = self.layout.lead
        out = []
        for s in self.layout.slots:
            buf = host[s.group]
            if type(buf) is MappedGroup:  # where it lies in its file
                out.append(buf.view(s.offset, s.size).reshape(s.shape))
            elif buf is not None:
                out.append(buf[..., s.offset : s.offset + s.size].reshape(lead + s.shape))
            else:
                out.append(_take(self.buffers[s.group], s.offset, lead, s.shape))
        return out

    def with_dtypes(self, buffers: dict) -> PackedTree:
        """Returns a packed tree of this layout over new buffers (same groups, maybe new dtypes)."""
        dtypes = {g: dtype_name(b.dtype) for g, b in buffers.items()}
        if dtypes == self.layout.group_dtypes:
            return PackedTree(self.layout, buffers)
        return PackedTree(self.layout.with_lead(self.layout.lead, dtypes), buffers)

    def unpack(self):
        """Returns the pytree, with leaves as views into the buffers where possible."""
        return self.layout.treedef.unflatten(self.leaves())

    def __repr__(self) -> str:
        groups = ", ".join(f"{k}[{int(v.size)}]" for k, v in self.buffers.items())
        return f"PackedTree({self.n_leaves} leaves; {groups})"


def is_packed(tree) -> bool:
    """Whether `tree` is a `PackedTree`."""
    return isinstance(tree, PackedTree)


def structure_of(tree):
    """The structure to describe or compare: a packed tree's `structure()`, any other tree
    as it is (its leaves' shapes and dtypes are read without touching data)."""
    return tree.structure() if isinstance(tree, PackedTree) else tree


def unpacked(tree):
    """The pytree itself: a packed tree unpacked (leaves are views), any other tree as it is."""
    return tree.unpack() if isinstance(tree, PackedTree) else tree


def same_layout(trees) -> bool:
    """Whether every tree is packed with one layout (so they match without a diff)."""
    trees = list(trees)
    return bool(trees) and all(isinstance(t, PackedTree) for t in trees) and all(
        t.layout == trees[0].layout for t in trees[1:])


def _host_view(buf):
    """A NumPy view of a buffer when that costs no copy (NumPy, or a JAX array on the CPU);
    a `MappedGroup` as it is (its leaves are views of its file's map)."""
    if isinstance(buf, np.ndarray | MappedGroup):
        return buf
    if isinstance(buf, jax.Array) and buf.is_fully_addressable:
        devs = buf.sharding.device_set
        if len(devs) == 1 and next(iter(devs)).platform == "cpu":
            return np.asarray(buf)  # zero-copy on the CPU backend
    return None


@partial(jax.jit, static_argnames="size")
def _dynamic_take(buf, offset, size: int):
    return jax.lax.dynamic_slice_in_dim(buf, offset, size, axis=buf.ndim - 1)


def _take(buf, offset: int, lead: tuple[int, ...], shape: tuple[int, ...]):
    # The offset is traced: one compile per distinct leaf size, not one per leaf.
    return _dynamic_take(buf, np.int32(offset), math.prod(shape)).reshape(lead + shape)


def pack(tree, lead_dims: int = 0) -> PackedTree:
    """Returns `tree` packed into one flat host buffer per dtype.

    Every leaf must be an array (NumPy, JAX, lazy) or a Python number; lazy leaves are read
    one at a time straight into their slot, so packing a checkpoint holds one copy of it.

    Args:
        tree: the pytree (a packed tree is returned as it is).
        lead_dims: how many leading dimensions every leaf shares and the buffers keep as
            their own (1 for a stacked ensemble: then `unstack` and an index on the model
            axis are one kernel per dtype). 0 packs each leaf contiguously.

    Raises:
        UnsupportedLeafError: some leaves are not arrays; every such key path is listed.
        TreeDepthError: the tree contains itself or nests too deep.
        StructureMismatchError: `lead_dims > 0` and the leaves do not share those dimensions.

    >>> p = pack({"a": np.zeros((2, 3)), "b": np.ones((2,))}, lead_dims=1)
    >>> p.layout.lead, p.buffers["float64"].shape, p.unpack()["b"].tolist()
    ((2,), (2, 4), [1.0, 1.0])
    """
    if isinstance(tree, PackedTree):
        return tree
    return pack_planned(*plan_layout(tree, lead_dims))


def pack_planned(layout: Layout, leaves: list) -> PackedTree:
    """`pack` of the `(layout, leaves)` `plan_layout` gave: host buffers, each leaf read or
    copied into its slot once."""
    lead = layout.lead
    # aligned and faulted in at once; file leaves are read straight into their slots
    buffers = {d: host_array(lead + (n,), d) for d, n in layout.sizes.items()}
    fill([(leaf, buffers[s.group][..., s.offset : s.offset + s.size])
          for leaf, s in zip(leaves, layout.slots, strict=True)])
    return PackedTree(layout, buffers)


def plan_layout(tree, lead_dims: int = 0) -> tuple[Layout, list]:
    """Returns the `Layout` `pack(tree, lead_dims)` would make, and the leaves, reading no data.

    Raises:
        as `pack`.
    """
    leaves, treedef = nodes.flatten(tree)
    infos = [leaf_info(x) for x in leaves]
    bad = [i for i, (shape, *_) in enumerate(infos) if shape is None]
    if bad:
        paths = [jax.tree_util.keystr(p) for p, _ in nodes.flatten(tree, with_path=True)[0]]
        raise UnsupportedLeafError(
            f"Cannot pack the tree: {len(bad)} leaves are not arrays.\n"
            + bullet_list(f"{paths[i]}: {type(leaves[i]).__name__}" for i in bad)
            + "\nReplace them with arrays, or drop them from the tree (None is allowed)."
        )
    lead = _common_lead(tree, [shape for shape, *_ in infos], lead_dims)
    sizes: dict[str, int] = {}
    slots = []
    for leaf, (shape, dtype, _, _) in zip(leaves, infos, strict=True):
        offset = sizes.get(dtype, 0)
        slots.append(Slot(dtype, dtype, shape[len(lead):], offset, stored_as(leaf)))
        sizes[dtype] = offset + math.prod(shape[len(lead):])
    return interned(Layout(treedef, tuple(slots), sizes, lead)), leaves


def _common_lead(tree, shapes: list, lead_dims: int) -> tuple[int, ...]:
    """The `lead_dims` leading dimensions every leaf shares, or a StructureMismatchError."""
    if lead_dims == 0 or not shapes:
        return ()
    leads = [tuple(s[:lead_dims]) if len(s) >= lead_dims else None for s in shapes]
    common = max(set(leads) - {None}, key=leads.count, default=None)
    bad = [i for i, lead in enumerate(leads) if lead != common]
    if bad or common is None:
        paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
        raise StructureMismatchError(
            f"Cannot pack the tree with {lead_dims} leading dimension(s): {len(bad)} leaves do "
            f"not start with {common}.\n"
            + bullet_list(f"{paths[i]}: shape {shapes[i]}" for i in bad)
            + "\nPack with lead_dims=0, or fix those leaves' shapes.")
    return common
