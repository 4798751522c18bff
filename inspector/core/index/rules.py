"""The rules of an index, shared by the leaf-by-leaf and the packed plans.

An index is normalised per leaf into a static pattern (which fixes the result shape) and
traced starts (the positions, so moving an index never recompiles); `index_pairs` walks an
index tree as a prefix of a tree; `raise_misfits` reports every leaf an index does not fit.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from inspector.core import nodes
from inspector.core.errors import (
    IndexOutOfRangeError,
    IndexParseError,
    InspectorError,
    StructureMismatchError,
    bullet_list,
)
from inspector.core.index.parse import format_index, parse_index

INDEX_ATOMS = (int, np.integer, slice, type(Ellipsis), str)


def _is_index(node, target) -> bool:
    """Whether `node` (in the index tree) is an index for the subtree `target`.

    A tuple facing an array is a multi-axis index (`(1, slice(None))`); facing a container it
    is structure, matched child by child. Write `"1, :"` to index a tuple subtree per axis.
    """
    if isinstance(node, INDEX_ATOMS) and not isinstance(node, bool):
        return True
    if type(node) is tuple and nodes.children(target)[0] == nodes.LEAF:
        return all(isinstance(i, INDEX_ATOMS) or i is None for i in node)
    return False


def normalize_index(index, shape: tuple[int, ...]):
    """Returns `(pattern, starts)` for one leaf, or raises IndexOutOfRangeError / InspectorError.

    `pattern` is static (it fixes the result shape): ("f",) keep an axis, ("i",) take one
    position, ("s", size, step, reversed) take a slice, ("n",) insert an axis. `starts` holds
    the traced integer positions, one per "i" and "s".
    """
    if isinstance(index, str):
        index = parse_index(index)
    if not isinstance(index, tuple):
        index = (index,)
    used = sum(1 for i in index if i is not Ellipsis and i is not None)
    if used > len(shape):
        raise InspectorError(
            f"index {format_index(index)!r} has {used} entries for a leaf of rank {len(shape)} "
            f"{shape}")
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (len(shape) - used) + index[at + 1:]
    else:
        index = index + (slice(None),) * (len(shape) - used)
    pattern, starts = [], []
    axis = 0
    for item in index:
        if item is None:
            pattern.append(("n",))
            continue
        n = shape[axis]
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            size = len(range(start, stop, step))
            if size == n and (step == 1 or n <= 1):
                pattern.append(("f",))
            elif size <= 1:
                # The step of an empty or one-element slice changes nothing (nor does it for a
                # whole axis of 0 or 1): one pattern for all of them keeps subtrees indexed
                # alike (packed) and shares their kernel.
                pattern.append(("s", size, 1, False))
                starts.append(start if size else 0)
            else:
                low = start if step > 0 else start + (size - 1) * step
                pattern.append(("s", size, abs(step), step < 0))
                starts.append(low if size else 0)
        else:
            i = int(item)
            if not -n <= i < n:
                raise IndexOutOfRangeError(f"index {i} is out of range for axis {axis} of size {n}")
            pattern.append(("i",))
            starts.append(i % n)
        axis += 1
    return tuple(pattern), starts


def result_size(pattern, shape: tuple[int, ...]) -> int:
    """The number of elements an index pattern keeps from a leaf of `shape`."""
    size, axis = 1, 0
    for p in pattern:
        if p[0] == "n":
            continue
        size *= shape[axis] if p[0] == "f" else (p[1] if p[0] == "s" else 1)
        axis += 1
    return size


def result_spec(pattern, sharding, rank: int) -> tuple:
    """The layout of an indexed leaf: a kept axis keeps its mesh axes (a slice too, when its
    size still divides over them), a taken position drops them, a new axis is not split."""
    spec = tuple(sharding.spec) + (None,) * (rank - len(sharding.spec))
    sizes = dict(sharding.mesh.shape)
    out, axis = [], 0
    for p in pattern:
        if p[0] == "n":
            out.append(None)
            continue
        entry = spec[axis]
        names = () if entry is None else (entry if isinstance(entry, tuple) else (entry,))
        parts = int(np.prod([sizes[n] for n in names], dtype=np.int64))
        if p[0] == "f" or (p[0] == "s" and p[1] % parts == 0):
            out.append(entry)
        elif p[0] == "s":
            out.append(None)
        axis += 1
    return tuple(out)


def index_kernel(pattern):
    def kernel(x, starts):
        axis = 0
        s = 0
        for p in pattern:
            if p[0] == "f":
                axis += 1
            elif p[0] == "n":
                x = jnp.expand_dims(x, axis)
                axis += 1
            elif p[0] == "i":
                x = lax.dynamic_index_in_dim(x, starts[s], axis, keepdims=False)
                s += 1
            else:
                _, size, step, rev = p
                extent = (size - 1) * step + 1 if size else 0
                x = lax.dynamic_slice_in_dim(x, starts[s], extent, axis)
                if step > 1:
                    x = lax.slice_in_dim(x, 0, extent, step, axis)
                if rev:
                    x = lax.rev(x, (axis,))
                s += 1
                axis += 1
        return x

    return kernel


def _pair(index_tree, tree, path: str, out: list, mismatches: list, depth: int = 0) -> None:
    """Walks `index_tree` as a prefix of `tree`, collecting (path, index, subtree) triples."""
    if index_tree is None:
        return  # None keeps its subtree as it is
    if _is_index(index_tree, tree):
        out.append((path, index_tree, tree))
        return
    kind_i, kids_i = nodes.children(index_tree)
    kind_t, kids_t = nodes.children(tree)
    if depth >= nodes.MAX_DEPTH and kids_i:
        raise nodes.DepthExceeded
    if kind_i == nodes.LEAF:
        mismatches.append(f"{path or '(root)'}: {index_tree!r} is not an index "
                          "(use an int, a slice, '...', a string like '1:3', or None)")
        return
    if kind_t == nodes.LEAF or kind_t == nodes.NONE:
        mismatches.append(f"{path or '(root)'}: the index tree has a {nodes.type_name(index_tree)}"
                          f" here, the tree has {nodes.type_name(tree)}")
        return
    by_key = dict(kids_t)
    keys_i = [k for k, _ in kids_i]
    if type(index_tree) is not type(tree) and not (
        isinstance(index_tree, list | tuple) and isinstance(tree, list | tuple)
    ):
        mismatches.append(f"{path or '(root)'}: the index tree has a {nodes.type_name(index_tree)}"
                          f" here, the tree has a {nodes.type_name(tree)}")
        return
    if set(keys_i) != set(by_key):
        missing = [k for k in by_key if k not in keys_i]
        extra = [k for k in keys_i if k not in by_key]
        detail = "; ".join(filter(None, [
            missing and f"no index for {', '.join(path + k for k in missing)}",
            extra and f"{', '.join(path + k for k in extra)} not in the tree",
        ]))
        mismatches.append(f"{path or '(root)'}: {detail}")
        return
    for key, child in kids_i:
        _pair(child, by_key[key], path + key, out, mismatches, depth + 1)


def index_pairs(index_tree, source) -> list[tuple]:
    """Returns `(path, index, subtree)` for each index in `index_tree` (strings parsed), after
    checking that `index_tree` is a prefix of `source` and every string parses.

    Raises:
        StructureMismatchError: `index_tree` is not a prefix of `source` (every place listed).
        IndexParseError: index strings cannot be parsed (each path named).
    """
    pairs: list = []
    mismatches: list[str] = []
    try:
        _pair(index_tree, source, "", pairs, mismatches)
    except nodes.DepthExceeded:
        raise nodes.too_deep(index_tree) from None
    if mismatches:
        raise StructureMismatchError(
            f"The index tree does not match the tree: {len(mismatches)} "
            f"{'place' if len(mismatches) == 1 else 'places'}.\n" + bullet_list(mismatches)
            + "\nThe index tree must be a prefix of the tree: give one index per subtree "
            "(':' keeps a subtree whole, None keeps it too)."
        )
    # Parse every string once, reporting every bad one.
    out, parse_errors = [], []
    for path, idx, subtree in pairs:
        if isinstance(idx, str):
            try:
                idx = parse_index(idx)
            except IndexParseError as e:
                parse_errors.append(f"{path or '(root)'}: {str(e).splitlines()[0]}")
        out.append((path, idx, subtree))
    if parse_errors:
        raise IndexParseError(
            f"Cannot parse {len(parse_errors)} index "
            f"{'string' if len(parse_errors) == 1 else 'strings'}.\n" + bullet_list(parse_errors)
        )
    return out


def raise_misfits(problems: list[str], kinds: set) -> None:
    """Raises the error for leaves an index does not fit (each line starts with a key path)."""
    error = IndexOutOfRangeError if kinds == {IndexOutOfRangeError} else InspectorError
    raise error(
        f"Cannot index the tree: {len(problems)} "
        f"{'leaf does' if len(problems) == 1 else 'leaves do'} not fit the index.\n"
        + bullet_list(problems)
        + "\nFix those indices (JAX would clamp them silently), or use ':' to keep a leaf."
    )
