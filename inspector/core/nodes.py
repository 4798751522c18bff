"""How the inspector walks a pytree one level at a time: node kinds and keyed children.

JAX's own flatteners give leaves only (no `None`, no empty containers, no inner nodes), so
`describe` and `diff` walk level by level. Plain dicts, lists, tuples and `None` take a fast
path in Python (the common case, and 100k-leaf trees must describe in well under a second);
everything else asks JAX's registry, so custom nodes appear exactly as JAX flattens them.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading

import numpy as np

from inspector.core import caches
from inspector.core.errors import TreeDepthError
from inspector.core.lazy import LazyArray

# Kinds of node, as shown in `Row.kind` and `Difference` records.
DICT, LIST, TUPLE, NAMEDTUPLE, DATACLASS, CUSTOM, NONE, LEAF = (
    "dict", "list", "tuple", "namedtuple", "dataclass", "custom", "None", "leaf",
)

_HOST_ARRAY_TYPES = (np.ndarray, np.generic, LazyArray)
_SCALAR_TYPES = (bool, int, float, complex)
_JAX: tuple = ()


def jax_parts():
    """`(jax.tree_util, (jax.Array, jax.ShapeDtypeStruct))`, or None while JAX is not imported.

    Until something imports JAX, no object is a JAX array or a node registered with JAX's
    pytree registry, so walking a tree of NumPy or lazy checkpoint leaves (`describe`, `diff`,
    the command line's `show`) does not pay JAX's import (about half a second).
    """
    global _JAX
    if not _JAX:
        jax = sys.modules.get("jax")
        if jax is None or not hasattr(jax, "Array"):
            return None
        _JAX = (jax.tree_util, (jax.Array, jax.ShapeDtypeStruct))
    return _JAX


def sorted_keys(d: dict) -> list:
    # JAX sorts dict keys when they are sortable and keeps insertion order otherwise.
    try:
        return sorted(d)
    except TypeError:
        return list(d)


def children(node):
    """Returns `(kind, [(key_str, child), ...])`, or `(LEAF, None)` for a leaf.

    Key strings are JAX `keystr` fragments (`['w']`, `[0]`, `.bias`), so a child's full path
    is its parent's path plus its key string. Children come in JAX's flattening order.
    """
    t = type(node)
    if t is dict:
        return DICT, [(f"[{k!r}]", node[k]) for k in sorted_keys(node)]
    if t is list:
        return LIST, [(f"[{i}]", c) for i, c in enumerate(node)]
    if t is tuple:
        return TUPLE, [(f"[{i}]", c) for i, c in enumerate(node)]
    if node is None:
        return NONE, []
    if isinstance(node, _HOST_ARRAY_TYPES) or t in _SCALAR_TYPES:
        return LEAF, None
    if isinstance(node, tuple) and hasattr(t, "_fields"):
        # JAX's one-level flattener mislabels namedtuple keys; the fields are the truth.
        return NAMEDTUPLE, [(f".{f}", getattr(node, f)) for f in t._fields]
    parts = jax_parts()
    if parts is None:  # JAX not imported: nothing can be registered with it
        return LEAF, None
    tree_util, array_types = parts
    if isinstance(node, array_types):
        return LEAF, None
    try:
        keyed, _ = tree_util.flatten_one_level_with_keys(node)
    except ValueError:
        return LEAF, None
    kind = DATACLASS if dataclasses.is_dataclass(node) else CUSTOM
    if isinstance(node, dict):
        kind = DICT
    elif isinstance(node, list):
        kind = LIST
    return kind, [(tree_util.keystr((k,)), c) for k, c in keyed]


def structure_of(tree):
    """What `describe` and `diff` walk: a packed tree's structure, any other tree as it is.

    A `PackedTree` exists only once `inspector.core.packed` (which imports JAX) is imported,
    so plain trees are walked without importing it.
    """
    packed = sys.modules.get("inspector.core.packed")
    return tree if packed is None else packed.structure_of(tree)


def type_name(node) -> str:
    """The node's class name as a user knows it (`dict`, `FrozenDict`, `Params`, `ndarray`)."""
    return type(node).__name__


# How deep the inspector walks. Its walkers recurse once per level, and so does JAX's flattener
# (in C++, counted against Python's recursion limit of 1,000, including the caller's frames: a
# Panel callback already sits 100-200 frames deep), so trees nest at most this deep: leaves
# at depth MAX_DEPTH at most (the root is at depth 0).
MAX_DEPTH = 500


class DepthExceeded(Exception):
    """Raised by a recursive walker `MAX_DEPTH` levels down; its caller turns it into
    `too_deep(tree)`, which walks the tree again without recursion to say why."""


def too_deep(*trees) -> TreeDepthError:
    """The error for trees a walker found too deep: a cycle's key path, or the depth."""
    for tree in trees:
        check_depth(tree)
    return TreeDepthError(f"The tree nests deeper than {MAX_DEPTH} levels.")


def flatten(tree, with_path: bool = False):
    """`jax.tree_util.tree_flatten` (or `tree_flatten_with_path`), guarded.

    Raises:
        TreeDepthError: the tree contains itself or nests too deep for JAX to flatten; the
            message names the cycle's key path or the depth (JAX up to 0.10 reports a bare
            `SystemError` from its C++ flattener). A tree of more than `MAX_DEPTH` nodes
            is walked once per structure, as `check_depth` does, and refused past
            `MAX_DEPTH` levels: the same rule on every JAX (0.10 flattens up to about 950
            levels, 0.11 any depth).
    """
    from jax import tree_util

    try:
        out = (tree_util.tree_flatten_with_path(tree) if with_path
               else tree_util.tree_flatten(tree))
    except (RecursionError, SystemError) as e:
        if not isinstance(e, RecursionError) and not isinstance(e.__cause__, RecursionError):
            raise
        check_depth(tree)
        raise TreeDepthError(
            "JAX could not flatten the tree: it ran out of Python's recursion limit "
            f"({_recursion_limit()}) partway; the tree nests less than {MAX_DEPTH} levels, so "
            "the call stack around it was already deep. Flatten the tree's deepest branches."
        ) from e
    treedef = out[1]
    if treedef.num_nodes > MAX_DEPTH and treedef not in _SHALLOW:
        check_depth(tree)  # raises past MAX_DEPTH; equal structures have equal depths
        with _SHALLOW_LOCK:
            _SHALLOW[treedef] = None
            while len(_SHALLOW) > 64:
                _SHALLOW.pop(next(iter(_SHALLOW)))
    return out


_SHALLOW: dict = {}  # structures of more than MAX_DEPTH nodes found no deeper than MAX_DEPTH
_SHALLOW_LOCK = threading.Lock()


@functools.cache
def jax_flattens_any_depth() -> bool:
    """Whether this JAX flattens a tree nested past Python's recursion limit (then `flatten`
    checks the depth itself). JAX 0.10 fails there with a bare `SystemError`; 0.11 does not."""
    from jax import tree_util

    tree: object = 0
    for _ in range(_recursion_limit() + 100):
        tree = [tree]
    try:
        tree_util.tree_flatten(tree)
    except (RecursionError, SystemError):
        return False
    return True


def check_depth(tree) -> None:
    """Walks `tree` without recursion; raises if it contains itself or nests past `MAX_DEPTH`.

    The walkers call it once they find themselves `MAX_DEPTH` levels down (a cycle looks like
    endless depth), so the message can tell a cycle from a deep tree and name where.

    Raises:
        TreeDepthError: names the cycle's key path (and the ancestor it repeats), or the depth
            and the key path of the deepest branch.
    """
    # Each frame: (node, key, iterator over its children); `on_path` holds the ids of the
    # containers on the current branch, so a container met again below itself is a cycle.
    kind, kids = children(tree)
    if kind == LEAF:
        return
    stack = [(tree, "", iter(kids))]
    on_path = {id(tree): 0}
    while stack:
        _, _, kids_iter = stack[-1]
        step = next(kids_iter, None)
        if step is None:
            node, _, _ = stack.pop()
            on_path.pop(id(node), None)
            continue
        key, child = step
        kind, kids = children(child)
        if kind == LEAF:
            continue
        keys = [k for _, k, _ in stack[1:]] + [key]
        if id(child) in on_path:
            ancestor = keys[: on_path[id(child)]]
            raise TreeDepthError(
                f"The tree contains itself: the {type_name(child)} at {_path(keys)} is the same "
                f"object as {'the root' if not ancestor else 'its ancestor at ' + _path(ancestor)}"
                " (a cycle). Pytrees must be acyclic: replace the reference with a copy, or "
                "remove it."
            )
        if len(keys) >= MAX_DEPTH and kids:
            depth = _deepest(child, len(keys))
            raise TreeDepthError(
                f"The tree nests {depth:,} levels deep (at {_path(keys)}); the inspector walks "
                f"trees up to {MAX_DEPTH} levels deep. Flatten the deepest branches (e.g. a list "
                "of layers instead of layers nested in each other)."
            )
        on_path[id(child)] = len(keys)
        stack.append((child, key, iter(kids)))


def _deepest(node, depth: int) -> int:
    """The depth of the deepest leaf or empty container below `node` (at `depth`), iteratively."""
    deepest, todo, seen = depth, [(node, depth)], set()
    while todo:
        node, d = todo.pop()
        kind, kids = children(node)
        if kind == LEAF or kind == NONE or id(node) in seen:
            continue
        seen.add(id(node))
        deepest = max(deepest, d + 1 if kids else d)
        todo.extend((c, d + 1) for _, c in kids)
    return deepest


def _path(keys: list[str], head: int = 6, tail: int = 2) -> str:
    """A key path, shortened in the middle when long: `[0][0]...[0][1] (5,000 keys)`."""
    if len(keys) <= head + tail + 1:
        return "".join(keys)
    return f"{''.join(keys[:head])}...{''.join(keys[-tail:])} ({len(keys):,} keys)"


def _recursion_limit() -> int:
    import sys

    return sys.getrecursionlimit()


caches.register_mapping("depth-checked structures", _SHALLOW, _SHALLOW_LOCK)
caches.register_function("JAX depth probe", jax_flattens_any_depth)
