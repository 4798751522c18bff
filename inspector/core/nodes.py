"""How the inspector walks a pytree one level at a time: node kinds and keyed children.

JAX's own flatteners give leaves only (no `None`, no empty containers, no inner nodes), so
`describe` and `diff` walk level by level. Plain dicts, lists, tuples and `None` take a fast
path in Python (the common case, and 100k-leaf trees must describe in well under a second);
everything else asks JAX's registry, so custom nodes appear exactly as JAX flattens them.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from inspector.core.lazy import LazyArray

tree_util = jax.tree_util

# Kinds of node, as shown in `Row.kind` and `Difference` records.
DICT, LIST, TUPLE, NAMEDTUPLE, DATACLASS, CUSTOM, NONE, LEAF = (
    "dict", "list", "tuple", "namedtuple", "dataclass", "custom", "None", "leaf",
)

_ARRAY_TYPES = (np.ndarray, np.generic, jax.Array, LazyArray, jax.ShapeDtypeStruct)
_SCALAR_TYPES = (bool, int, float, complex)


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
    if isinstance(node, _ARRAY_TYPES) or t in _SCALAR_TYPES:
        return LEAF, None
    if isinstance(node, tuple) and hasattr(t, "_fields"):
        # JAX's one-level flattener mislabels namedtuple keys; the fields are the truth.
        return NAMEDTUPLE, [(f".{f}", getattr(node, f)) for f in t._fields]
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


def type_name(node) -> str:
    """The node's class name as a user knows it (`dict`, `FrozenDict`, `Params`, `ndarray`)."""
    return type(node).__name__
