"""Python-side checks run before any op: they name every bad key path at once.

JAX's own shape errors carry no key path, and the first one hides the rest; these checks read
only shapes and dtypes (never data), so they are cheap even for lazy checkpoints.
"""

from __future__ import annotations

from collections import defaultdict

import jax
import numpy as np

from inspector.core import nodes
from inspector.core.diff import DTYPE, EXTRA, MISSING, SHAPE, STATE, TYPE, diff
from inspector.core.errors import StructureMismatchError, UnsupportedLeafError, bullet_list
from inspector.core.leaves import leaf_info, unsupported_dtype
from inspector.core.opaque import Opaque
from inspector.core.packed import PackedTree, same_layout, structure_of

_NOUNS = {SHAPE: "differ in shape", DTYPE: "differ in dtype", MISSING: "are missing",
          EXTRA: "are extra", TYPE: "differ in container type",
          STATE: "are objects with different content"}


def flatten(tree) -> tuple[list, jax.tree_util.PyTreeDef]:
    """`jax.tree.flatten`, with packed trees seen as the tree they hold."""
    if isinstance(tree, PackedTree):
        return tree.leaves(), tree.treedef
    return nodes.flatten(tree)


def signature(leaves: list, treedef) -> tuple:
    """The structure, shapes and dtypes of a flattened tree (what a compile depends on)."""
    return treedef, tuple(leaf_info(x)[:2] for x in leaves)


def check_same_structure(trees: list, action: str, names: list[str] | None = None) -> None:
    """Raises unless every tree has the structure, leaf shapes and dtypes of `trees[0]`.

    Args:
        trees: two or more pytrees (or packed trees).
        action: what needs the match, for the message (`"Cannot stack 4 trees"`).
        names: what to call each tree in the message (default `tree 0`, `tree 1`, ...).

    Raises:
        StructureMismatchError: lists every differing key path, with both sides.
    """
    if same_layout(trees):
        return
    if not all(isinstance(t, PackedTree) for t in trees):
        flat = [flatten(t) for t in trees]
        sig0 = signature(*flat[0])
        if all(signature(*f) == sig0 for f in flat[1:]):
            return
    names = names or [f"tree {k}" for k in range(len(trees))]
    first = names[0]
    by_kind: dict[str, list[str]] = defaultdict(list)
    for k, tree in enumerate(trees[1:], start=1):
        for d in diff(trees[0], tree):
            where = d.path or "(root)"
            if d.kind == MISSING:
                line = f"{where}: in {first} ({d.a}), missing from {names[k]}"
            elif d.kind == EXTRA:
                line = f"{where}: in {names[k]} ({d.b}), not in {first}"
            else:
                line = f"{where}: {d.a} in {first}, {d.b} in {names[k]}"
            by_kind[d.kind].append(line)
    n = sum(len(v) for v in by_kind.values())
    counts = ", ".join(f"{len(v)} {_NOUNS[kind]}" for kind, v in by_kind.items())
    lines = [line for v in by_kind.values() for line in v]
    raise StructureMismatchError(
        f"{action}: {n} {'difference' if n == 1 else 'differences'} ({counts}).\n"
        + bullet_list(lines)
        + f"\nEvery tree needs the same structure, leaf shapes and dtypes as {first}."
    )


def check_array_leaves(tree, leaves: list, action: str) -> list:
    """Returns the leaves as arrays (numbers become 0-d arrays, lazy leaves stay lazy).

    Raises:
        UnsupportedLeafError: some leaves are not arrays or numbers; lists each key path.
    """
    out = []
    bad = []
    for i, leaf in enumerate(leaves):
        shape, dtype, _, _ = leaf_info(leaf)
        if shape is None:
            bad.append(i)
        elif not hasattr(leaf, "shape"):
            out.append(np.asarray(leaf, dtype=dtype))
        else:
            out.append(leaf)
    _check_jax_dtypes(tree, out, action)
    if bad:
        paths = key_paths(tree)
        raise UnsupportedLeafError(
            f"{action}: {len(bad)} leaves are not arrays.\n"
            + bullet_list(f"{paths[i]}: {_what(leaves[i])}" for i in bad)
            + "\nOperations need array or number leaves; None subtrees are kept as they are."
            + ("\nOpaque leaves are objects a checkpoint describes (its training code's "
               "classes): select the arrays, e.g. the checkpoint's ['state_dict']."
               if any(isinstance(leaves[i], Opaque) for i in bad) else "")
        )
    return out


def _check_jax_dtypes(tree, arrays: list, action: str) -> None:
    """Refuses dtypes JAX would misread or reject: other-endian bytes and long doubles."""
    # the distinct dtypes only: 100k-leaf trees have a handful
    if not any(unsupported_dtype(d) for d in {x.dtype for x in arrays}):
        return
    wrong = [(i, dt, why) for i, x in enumerate(arrays)
             if (why := unsupported_dtype(dt := np.dtype(x.dtype)))]
    paths = key_paths(tree)
    raise UnsupportedLeafError(
        f"{action}: {len(wrong)} leaves have a dtype JAX cannot compute on.\n"
        + bullet_list(f"{paths[i]}: {dt.str}, {why}" for i, dt, why in wrong)
        + "\nNothing was computed (JAX would reject them, or read swapped bytes as values)."
    )


def _what(leaf) -> str:
    if isinstance(leaf, Opaque):
        return f"Opaque {leaf.type} ({leaf.summary()}), an object, not an array"
    return type(leaf).__name__


def key_paths(tree) -> list[str]:
    """The key path of every leaf, in flattening order."""
    tree = structure_of(tree)
    return [jax.tree_util.keystr(p) for p, _ in nodes.flatten(tree, with_path=True)[0]]
