"""Leaves with their key paths, both as jax `keystr` text and as the keys themselves.

`align` reads every leaf's path, shape and dtype (never its data); `convert` and the exported
code need the keys back from the `keystr` text an `Alignment` stores (`parse_keystr`).
"""

from __future__ import annotations

import ast
import re

import jax
import numpy as np

from inspector.core import nodes
from inspector.core.errors import InspectorError
from inspector.core.lazy import LazyArray
from inspector.core.leaves import dtype_name, leaf_info
from inspector.core.packed import PackedTree

_tu = jax.tree_util
_KEY = re.compile(r"""\[('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|-?\d+)\]|\.([A-Za-z_]\w*)""")


def _key(k) -> tuple[str, object]:
    """A jax key object as (its keystr fragment, its plain value)."""
    t = type(k)
    if t is _tu.DictKey:
        return f"[{k.key!r}]", k.key
    if t is _tu.SequenceKey:
        return f"[{k.idx}]", k.idx
    if t is _tu.GetAttrKey:
        return f".{k.name}", k.name
    if t is _tu.FlattenedIndexKey:
        return f"[{k.key}]", k.key
    text = _tu.keystr((k,))
    return text, text


def leaves(tree) -> tuple[list, list, list, list]:
    """Returns `(paths, keys, specs, values)` of every leaf in flattening order.

    `paths[i]` is the keystr text, `keys[i]` the tuple of plain keys, `specs[i]` its
    `(shape, dtype name)` (None for leaves that are no arrays), `values[i]` the leaf.
    Plain dicts, lists and tuples are walked in Python (JAX's `tree_flatten_with_path` and
    `keystr` cost several microseconds a leaf: seconds at 100,000 leaves); other nodes as
    JAX flattens them.
    """
    if isinstance(tree, PackedTree):
        tree = tree.unpack()
    out: tuple[list, list, list, list] = ([], [], [], [])
    try:
        _walk(tree, "", (), out, 0)
    except _NotPlain:
        return _leaves_by_jax(tree)
    return out


class _NotPlain(Exception):
    """A node the fast walk does not know (JAX's registry decides its children)."""


_PLAIN_LEAVES = (np.ndarray, LazyArray, jax.ShapeDtypeStruct)


def _walk(node, path: str, keys: tuple, out, depth: int) -> None:
    t = type(node)
    if t is dict or t is list or t is tuple:
        if depth >= nodes.MAX_DEPTH:
            raise _NotPlain
        paths, all_keys, specs, values = out
        items = ((k, node[k]) for k in nodes.sorted_keys(node)) if t is dict else \
            enumerate(node)
        for k, child in items:
            text = f"{path}[{k!r}]" if t is dict else f"{path}[{k}]"
            if type(child) in _PLAIN_LEAVES:  # most leaves: no call of their own
                paths.append(text)
                all_keys.append((*keys, k))
                specs.append((child.shape, dtype_name(child.dtype)))
                values.append(child)
            else:
                _walk(child, text, (*keys, k), out, depth + 1)
    elif node is None:
        return
    elif t in _PLAIN_LEAVES or isinstance(node, jax.Array | np.generic) or \
            t in (bool, int, float, complex):
        shape, dtype, _, _ = leaf_info(node)
        out[0].append(path)
        out[1].append(keys)
        out[2].append((tuple(shape), dtype))
        out[3].append(node)
    else:
        raise _NotPlain


def _leaves_by_jax(tree) -> tuple[list, list, list, list]:
    flat, _ = nodes.flatten(tree, with_path=True)
    cache: dict = {}
    paths, keys, specs, values = [], [], [], []
    for path, leaf in flat:
        texts, plain = [], []
        for k in path:
            got = cache.get(k)
            if got is None:
                got = cache[k] = _key(k)
            texts.append(got[0])
            plain.append(got[1])
        paths.append("".join(texts))
        keys.append(tuple(plain))
        shape, dtype, _, _ = leaf_info(leaf)
        specs.append(None if shape is None else (tuple(shape), dtype))
        values.append(leaf)
    return paths, keys, specs, values


def parse_keystr(text: str) -> tuple:
    """The keys of a jax keystr path (`"['a'][0].b"` -> `('a', 0, 'b')`).

    Raises:
        InspectorError: the text is not a keystr path.

    >>> parse_keystr("['encoder']['layer_3'][0]")
    ('encoder', 'layer_3', 0)
    """
    keys, at = [], 0
    for m in _KEY.finditer(text):
        if m.start() != at:
            break
        quoted, attr = m.groups()
        if attr is not None:
            keys.append(attr)
        elif quoted[0] in "'\"":  # repr of a str: literal_eval only when it has escapes
            keys.append(quoted[1:-1] if "\\" not in quoted else ast.literal_eval(quoted))
        else:
            keys.append(int(quoted))
        at = m.end()
    if at != len(text):
        raise InspectorError(
            f"{text!r} is not a key path in jax keystr form (e.g. \"['encoder']['layer'][0]\"). "
            "Give paths as `inspector.describe` shows them.")
    return tuple(keys)


def build(paths_values: list[tuple[tuple, object]]):
    """Nested dicts (lists where every key of a level is 0..n-1 ints) from (keys, value)."""
    root: dict = {}
    for keys, value in paths_values:
        node = root
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return _lists(root)


def _lists(node):
    if not isinstance(node, dict):
        return node
    out = {k: _lists(v) for k, v in node.items()}
    if out and all(isinstance(k, int) for k in out) and sorted(out) == list(range(len(out))):
        return [out[i] for i in range(len(out))]
    return out
