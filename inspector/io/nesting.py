"""Flat checkpoint keys (`"encoder.layer0.weight"`) to nested dicts and back.

Formats that store a flat name -> array mapping (safetensors, npz, PyTorch state dicts) name
nesting with a separator inside the key. The inspector reads:

- `.` as the separator in every such format (the PyTorch / Hugging Face convention);
- `/` as a second separator in npz files (the `flax.traverse_util.flatten_dict(sep="/")` one).

`"layers.0.weight"` becomes `{"layers": {"0": {"weight": ...}}}`: list indices come back as the
string keys `"0"`, `"1"`, ... (the file does not say whether the writer had a list or a dict).
A key that is both an array and a prefix of another key (`"a"` and `"a.b"`) cannot be nested;
it is refused with a `LoadError` naming both keys, rather than silently renamed.

`save` writes the separator `.` for dict keys and list/tuple positions alike, and refuses keys
that contain `.` or `/` themselves, so that what it writes reads back as the same nesting.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from inspector.core.errors import InspectorError, bullet_list
from inspector.core.lazy import LazyArray
from inspector.io.file_error import file_error

SEPARATOR = "."
"""Joins the keys of nested containers into one flat key, in every format `save` writes."""

RESERVED = (".", "/")
"""Characters a key may not contain when saved: a reader would split the key on them."""


def unflatten(
    flat: Iterable[tuple[str, Any]],
    path: str | os.PathLike,
    separators: tuple[str, ...] = (SEPARATOR,),
) -> dict:
    """Returns nested dicts built from `(flat_key, value)` pairs, splitting keys on `separators`.

    Args:
        flat: the pairs, in the order the dicts should list them.
        path: the file they came from (named in errors).
        separators: the characters that separate nesting levels inside a key.

    Returns:
        A dict of dicts whose leaves are the values.

    Raises:
        LoadError: some key is both a value and the parent of other keys (every such pair is
            named), or two keys name the same place (`"a.b"` and `"a/b"` in an npz).

    >>> unflatten([("a.b", 1), ("a.c", 2), ("d", 3)], "x.safetensors")
    {'a': {'b': 1, 'c': 2}, 'd': 3}
    """
    flat = flat if isinstance(flat, list) else list(flat)
    if len(separators) == 1:
        fast = _unflatten_fast(flat, separators[0])
        if fast is not None:
            return fast
    splitter = re.compile("|".join(re.escape(s) for s in separators))
    root: dict = {}
    owner: dict[tuple[str, ...], str] = {}  # place -> the flat key that put a value or dict there
    clashes: list[str] = []
    for key, value in flat:
        parts = tuple(splitter.split(key))
        node = root
        for depth in range(len(parts)):
            place, part = parts[: depth + 1], parts[depth]
            last = depth == len(parts) - 1
            if part not in node:
                node[part] = value if last else {}
                owner[place] = key
            elif last or not isinstance(node[part], dict):
                clashes.append(f"{_owner_of(owner, place)!r} and {key!r}")
                break
            if not last:
                node = node[part]
    if clashes:
        raise file_error(
            path,
            f"{len(clashes)} pair(s) of keys clash: a key cannot be an array and also hold other "
            f"keys, and two keys cannot name the same place (keys nest on "
            f"{' and '.join(repr(s) for s in separators)})",
            "Rename the clashing keys, e.g. with the library that wrote the file.",
            details=bullet_list(clashes),
        )
    return root


def _unflatten_fast(flat: list, separator: str) -> dict | None:
    """`unflatten` with one separator, one dict lookup per key (its parent's prefix): 106,453
    keys in a fraction of the walk above. None when some keys clash (the walk names them)."""
    root: dict = {}
    containers: dict[str, dict] = {}  # "a.b" -> the dict at that place
    for key, value in flat:
        parent, found, name = key.rpartition(separator)
        node = root if not found else containers.get(parent)
        if node is None:
            node = _container(root, containers, parent, separator)
            if node is None:
                return None
        if name in node:
            return None
        node[name] = value
    return root


def _container(root: dict, containers: dict, prefix: str, separator: str) -> dict | None:
    """The dict at `prefix`, made (with its missing ancestors) if absent; None if a value is
    there instead. Starts from the nearest ancestor already made, not from the root."""
    parent, found, name = prefix.rpartition(separator)
    node = root if not found else containers.get(parent)
    if node is None:
        node = _container(root, containers, parent, separator)
        if node is None:
            return None
    child = node.get(name)
    if child is None:
        child = node[name] = containers[prefix] = {}
    elif containers.get(prefix) is not child:
        return None  # a value there, not a dict of keys
    return child


def _owner_of(owner: Mapping[tuple[str, ...], str], place: tuple[str, ...]) -> str:
    # A place inside a dict that was itself a value has no owner: name that value's key.
    while place not in owner:
        place = place[:-1]
    return owner[place]


def flatten(tree: Any) -> dict[str, Any]:
    """Returns `{flat_key: leaf}` for a nested dict/list/tuple of arrays, keys joined with `.`.

    None and empty containers hold no arrays and are skipped. Leaves are returned as given
    (NumPy arrays, JAX arrays, `LazyArray`, NumPy or Python scalars), not read.

    Args:
        tree: dicts (string or integer keys), lists and tuples, with array leaves.

    Returns:
        The leaves by flat key, in the tree's order.

    Raises:
        InspectorError: the tree is a bare leaf, a key contains `.` or `/`, or some leaf is not
            an array (a string, an object, an unsupported container); every offending key path
            is named, in `jax.tree_util.keystr` form.

    >>> flatten({"layers": [{"w": 1.0}, {"w": 2.0}], "b": None})
    {'layers.0.w': 1.0, 'layers.1.w': 2.0}
    """
    if not isinstance(tree, (dict, list, tuple)):
        raise InspectorError(
            "Cannot save a bare leaf: the formats store named arrays.\n"
            "Wrap it in a dict, e.g. save({'x': array}, path)."
        )
    flat: dict[str, Any] = {}
    bad_keys: list[str] = []
    bad_leaves: list[str] = []

    def walk(node: Any, names: tuple[str, ...], keystr: str) -> None:
        if node is None:
            return
        if isinstance(node, dict):
            for key, child in node.items():
                child_keystr = f"{keystr}[{key!r}]"
                if isinstance(key, bool) or not isinstance(key, (str, int)):
                    bad_keys.append(f"{child_keystr}: keys must be strings or integers")
                elif any(c in str(key) for c in RESERVED):
                    bad_keys.append(f"{child_keystr}: the key contains '.' or '/'")
                else:
                    walk(child, (*names, str(key)), child_keystr)
        elif isinstance(node, (list, tuple)):
            for index, child in enumerate(node):
                walk(child, (*names, str(index)), f"{keystr}[{index}]")
        elif is_array_leaf(node):
            flat[SEPARATOR.join(names)] = node
        else:
            bad_leaves.append(f"{keystr}: {type(node).__name__} {_short_repr(node)}")

    walk(tree, (), "")
    if bad_keys or bad_leaves:
        lines = bad_keys + bad_leaves
        raise InspectorError(
            f"Cannot save the tree: {len(bad_keys)} key(s) cannot be written and "
            f"{len(bad_leaves)} leaf/leaves are not arrays.\n"
            + bullet_list(lines)
            + "\nsafetensors and npz store numeric arrays under keys joined with '.'; "
            "convert or drop the other leaves and rename keys that contain '.' or '/'."
        )
    return flat


def is_array_leaf(leaf: Any) -> bool:
    """Returns whether `leaf` can be saved as an array: a numeric array or scalar.

    >>> is_array_leaf(np.zeros(2)), is_array_leaf(3), is_array_leaf("3"), is_array_leaf(None)
    (True, True, False, False)
    """
    if isinstance(leaf, (bool, int, float, complex)):
        return np.asarray(leaf).dtype.kind in "biufc"  # not an int too big for int64 (object)
    if isinstance(leaf, (np.generic, np.ndarray, LazyArray)):
        return leaf.dtype.kind in "biufcV"  # never reads a LazyArray
    # JAX arrays (and other array libraries) without importing them: shape, dtype, __array__
    if all(hasattr(leaf, name) for name in ("shape", "dtype", "__array__")):
        try:
            return np.dtype(leaf.dtype).kind in "biufcV"
        except TypeError:
            return False
    return False


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
