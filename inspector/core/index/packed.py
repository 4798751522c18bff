"""An index on a packed stack's leading axes: one kernel per dtype, planned once per index.

A packed stack (`stack` of packed trees, `pack(tree, lead_dims=1)`) holds each dtype's leaves
in one buffer of shape `lead + (size,)`, and each subtree's leaves are one contiguous range of
it. An index (or one index per subtree) on the leading axes alone is then one kernel per dtype:
it indexes each range's leading axes with that subtree's traced starts and writes the piece
into a donated output buffer (`dynamic_update_slice`: in place, at one core's copy speed;
`concatenate` of the pieces ran at 40% of it, a per-element gather at 20%). On the CPU, when
one source supplies most of a large buffer, that source is first copied whole, over all cores,
and a second kernel writes the other pieces over it (`_passes`).

Walking the index tree against 20,000 leaves and checking each one costs hundreds of
milliseconds of Python, while the kernels run in one or two. What that walk yields (the kernels'
static runs and the starts) depends on the layout and the index only, never on the data, so it
is cached per (layout, index): re-runs, timed repeats and other trees of the same layout (new
data, e.g. a reloaded checkpoint) plan in microseconds; a tree of another structure has another
layout, hence another entry.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from inspector.core import caches, nodes
from inspector.core.errors import IndexOutOfRangeError, InspectorError
from inspector.core.index.rules import (
    INDEX_ATOMS,
    index_kernel,
    index_pairs,
    normalize_index,
    raise_misfits,
)
from inspector.core.out_buffers import output_buffer
from inspector.core.packed import Layout, PackedTree
from inspector.core.plan import Call, Plan

_MAX_RUNS = 16  # past this many subtree ranges per buffer, a per-element row index is used
_MAX_RECIPES = 64
_RECIPES: OrderedDict[tuple, _Recipe | None] = OrderedDict()
_LOCK = threading.Lock()
_NO_RECIPE = object()


@dataclass(frozen=True)
class _Kernel:
    """One dtype's kernel: which buffer, its static runs (or per-element rows)."""

    group: str
    runs: tuple  # ((start, stop, row, lead pattern), ...) over the buffer's last axis
    rows: np.ndarray | None  # per-element row of `starts` (many subtrees, one position each)


@dataclass(frozen=True)
class _Recipe:
    """Everything a packed index plan needs apart from the buffers themselves."""

    new_lead: tuple[int, ...]
    result: Layout
    kernels: tuple[_Kernel, ...]
    starts: np.ndarray  # one row of traced positions per (subtree, lead pattern)


def plan_packed_index(tree: PackedTree, index_tree, device) -> Plan | None:
    """The one-kernel-per-dtype plan of `index(tree, index_tree)`, or None when the index
    reaches inside the leaves (or results differ in leading shape): then go leaf by leaf.

    Raises:
        as `indexing.plan_index` (the index is checked against every leaf).
    """
    key = _cache_key(tree.layout, index_tree)
    recipe = _NO_RECIPE if key is None else _lookup(key)
    if recipe is _NO_RECIPE:
        recipe = _recipe(tree.layout, index_tree)
        if key is not None:
            _store(key, recipe)
    if recipe is None:
        return None
    calls, nbytes, last = [], 0, []
    for kernel in recipe.kernels:
        buf = tree.buffers[kernel.group]
        dt = jax.dtypes.canonicalize_dtype(buf.dtype)
        size = tree.layout.sizes[kernel.group]
        out = output_buffer((*recipe.new_lead, size), dt, device)
        whole = math.prod(out.shape) * np.dtype(dt).itemsize
        if kernel.rows is not None:
            k = tree.layout.lead[0]
            calls.append(Call(("index_packed_rows", tuple(buf.shape), str(dt),
                               str(kernel.rows.dtype)),
                              lambda k=k: _rows_kernel(k), [out, buf, kernel.rows], donate=(0,),
                              carry=True))
            nbytes += kernel.rows.nbytes
        else:
            # one pass, or a whole-buffer pass then the other runs written over it (chained:
            # each pass writes into the previous one's output)
            for n, runs in enumerate(_passes(kernel.runs, size, whole, device.platform)):
                calls.append(Call(("index_packed", tuple(buf.shape), str(dt), runs,
                                   recipe.starts.shape),
                                  lambda runs=runs: _packed_kernel(runs),
                                  [out, buf, recipe.starts], donate=(0,), carry=n == 0,
                                  chain=n > 0))
        last.append(len(calls) - 1)
        nbytes += whole
    groups = [kernel.group for kernel in recipe.kernels]

    def assemble(outputs):
        buffers = {group: outputs[i] for group, i in zip(groups, last, strict=True)}
        return PackedTree(recipe.result, buffers).with_dtypes(buffers)

    return Plan("index", device, calls, assemble, nbytes, nbytes)


def cached_recipes() -> int:
    """How many (layout, index) plans are cached (for tests)."""
    return len(_RECIPES)


def _cache_key(layout: Layout, index_tree) -> tuple | None:
    """(layout, the index tree frozen), or None when the index tree cannot be a key."""
    leaves, treedef = jax.tree_util.tree_flatten(index_tree)
    types = tuple(map(type, leaves))  # 1 and True are equal keys; their types are not
    if slice in types:  # slices are unhashable before Python 3.12
        leaves = [(x.start, x.stop, x.step) if type(x) is slice else x for x in leaves]
    key = (layout, treedef, types, tuple(leaves))
    try:
        hash(key)
    except TypeError:  # an unhashable leaf (an array as an index): plan it afresh, it fails
        return None
    return key


def _lookup(key):
    with _LOCK:
        if key in _RECIPES:
            _RECIPES.move_to_end(key)
            return _RECIPES[key]
    return _NO_RECIPE


def _store(key, recipe) -> None:
    with _LOCK:
        _RECIPES[key] = recipe
        while len(_RECIPES) > _MAX_RECIPES:
            _RECIPES.popitem(last=False)


def _recipe(layout: Layout, index_tree) -> _Recipe | None:
    """Checks the index against every leaf (each distinct shape once per subtree) and works
    out the kernels; None when the index cannot be one kernel per dtype."""
    lead = layout.lead
    entries: list = [None] * len(layout.slots)  # per leaf: (pattern, starts, which subtree)
    problems, kinds = [], set()
    for pair_id, (path, idx, subtree, ordinals, shapes) in enumerate(_subtrees(layout, index_tree)):
        seen: dict = {}  # leaf shape -> (pattern, starts), or the error
        for n, shape in zip(ordinals, shapes, strict=True):
            got = seen.get(shape)
            if got is None:
                try:
                    got = normalize_index(idx, shape)
                except (IndexOutOfRangeError, InspectorError) as e:
                    got = e
                seen[shape] = got
            if not isinstance(got, Exception):
                entries[n] = (*got, pair_id)
        if any(isinstance(got, Exception) for got in seen.values()):
            for leaf_path, leaf in nodes.flatten(subtree(), with_path=True)[0]:
                got = seen[leaf.shape]
                if isinstance(got, Exception):
                    kinds.add(type(got))
                    problems.append(f"{path}{jax.tree_util.keystr(leaf_path)}: {got}")
    if problems:
        raise_misfits(problems, kinds)
    if not entries or any(e is None for e in entries):
        return None  # a subtree kept with None: its leaves keep their leading axes
    # Subtrees may index the leading axes differently (`:` here, `::-1` or `1` there) as long
    # as every result has the same leading shape; each (subtree, pattern) gets a row of starts.
    new_leads, rows_of = set(), {}
    for pattern, st, pair_id in entries:
        head = pattern[: len(lead)]
        if any(p[0] != "f" for p in pattern[len(lead):]) or any(p[0] == "n" for p in head):
            return None
        new_leads.add(tuple(n if p[0] == "f" else p[1]
                            for n, p in zip(lead, head, strict=True) if p[0] != "i"))
        rows_of.setdefault((pair_id, head), st)
    if len(new_leads) != 1:
        return None
    (new_lead,) = new_leads
    row_ids = {key: i for i, key in enumerate(rows_of)}
    starts = np.zeros((len(rows_of), max(1, *(len(st) for st in rows_of.values()))), np.int32)
    for key, st in rows_of.items():
        starts[row_ids[key], : len(st)] = st
    ranges: dict[str, list] = {g: [] for g in layout.sizes}
    for slot, (pattern, _, pair_id) in zip(layout.slots, entries, strict=True):
        runs, row = ranges[slot.group], row_ids[(pair_id, pattern[: len(lead)])]
        if runs and runs[-1][2] == row and runs[-1][1] == slot.offset:
            runs[-1] = (runs[-1][0], slot.offset + slot.size, row, runs[-1][3])
        else:
            runs.append((slot.offset, slot.offset + slot.size, row, pattern[: len(lead)]))
    one_position = {key[1] for key in rows_of} == {(("i",),)}
    kernels = []
    for group in layout.sizes:
        runs, rows = tuple(ranges[group]), None
        if len(runs) > _MAX_RUNS and one_position:
            # Many subtrees, one position each: which row each element comes from is data
            # (a small int per element), so the kernel compiles once whatever the index tree.
            rows = np.repeat(starts[[r[2] for r in runs], 0], [r[1] - r[0] for r in runs])
            rows = rows.astype(np.int8 if lead[0] < 128 else np.int32)
            runs = ()
        kernels.append(_Kernel(group, runs, rows))
    return _Recipe(new_lead, layout.with_lead(new_lead), tuple(kernels), starts)


def _subtrees(layout: Layout, index_tree):
    """Yields `(path, index, subtree(), leaf ordinals, leaf shapes)` for each index in the
    index tree (`subtree()` gives the structure below it, for error messages)."""
    if isinstance(index_tree, INDEX_ATOMS) and not isinstance(index_tree, bool):
        # One index for the whole tree (the common case): the shapes come from the slots,
        # without building the tree's structure (20 us per leaf) on a first call.
        ((path, idx, _),) = index_pairs(index_tree, None)
        lead = layout.lead
        yield (path, idx, lambda: layout.structure, range(len(layout.slots)),
               [lead + s.shape for s in layout.slots])
        return
    ordinals = layout.ordinals
    for path, idx, subtree in index_pairs(index_tree, layout.structure):
        leaves = nodes.flatten(subtree)[0]
        yield (path, idx, lambda subtree=subtree: subtree, [ordinals[id(x)] for x in leaves],
               [x.shape for x in leaves])


def _rows_kernel(k: int):
    def kernel(out, buf, rows):
        del out  # donated: the result is written into it
        picked = buf[0]
        for i in range(1, k):
            picked = jnp.where(rows == i, buf[i], picked)
        return picked

    return kernel


_BASE_SHARE = 0.8
"""From this share of a buffer taken from one (position, pattern), that source is copied whole
first and the other runs written over it (see `_passes`)..."""
_BASE_BYTES = 4 * 2**20
"""...when the result buffer has at least this many bytes (below, one kernel: a second
dispatch would cost more than the copy gains)."""


def _passes(runs: tuple, size: int, nbytes: int, platform: str) -> list[tuple]:
    """The kernels (runs each, in order) that write one dtype's result.

    Each run is written in place into the donated output (`dynamic_update_slice`), and XLA's
    CPU backend runs an in-place update on one thread. A plain slice of the whole buffer it
    splits over the cores: on 2 cores here, 31-35 GB/s against 21-27 GB/s for the update
    (P = 1e7 and 5e7 float32, K = 4 and 8, one model supplying 90-99% of the buffer). So on
    the CPU, when one row (and leading pattern) supplies at least `_BASE_SHARE` of the buffer,
    the whole of that row is copied first, and a second kernel writes the other runs over it.
    The bytes written twice cost twice: with the slice 1.3 times as fast as the update,
    copying the whole row gains from a share of 1 / 1.3 = 0.77. Two kernels, not one: within
    one kernel XLA copies the slice into a temporary first (5 GB/s). On an H100 the update ran
    as fast as the slice (per-subtree index 0.48-0.50 of the copy, one index 0.47-0.50).
    """
    if platform != "cpu" or len(runs) < 2 or nbytes < _BASE_BYTES:
        return [runs]
    share: dict[tuple, int] = {}
    for a, b, row, head in runs:
        share[row, head] = share.get((row, head), 0) + b - a
    (row, head), most = max(share.items(), key=lambda item: item[1])
    if most < _BASE_SHARE * size:
        return [runs]
    rest = tuple(r for r in runs if (r[2], r[3]) != (row, head))
    return [((0, size, row, head),), rest] if rest else [((0, size, row, head),)]


def _packed_kernel(runs):
    def kernel(out, buf, starts):
        # Each piece is written in place into the donated output: one pass at copy speed.
        for a, b, row, head in runs:
            piece = index_kernel((*head, ("f",)))(buf[..., a:b], starts[row])
            out = lax.dynamic_update_slice_in_dim(out, piece, a, axis=out.ndim - 1)
        return out

    return kernel


caches.register_mapping("packed index plans", _RECIPES, _LOCK)
