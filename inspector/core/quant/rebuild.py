"""A dequantized tree's structure: each quantized group's members replaced by its output,
every other leaf as it is (the per-group path's result, `dequantize.py`, and the packed
path's layout, `dequantize_packed.py`)."""

from __future__ import annotations

import jax

from inspector.core import nodes
from inspector.core.quant.groups import QuantGroup


def holder(tree, steps: tuple):
    """The dict that holds a group's members, found by its steps from the root."""
    node = tree
    for step in steps:
        if type(step) is tuple:  # a keystr step through a list, tuple or custom node
            _, kids = nodes.children(node)
            node = dict(kids)[step[0]]
        else:
            node = node[step]
    return node


def edits_of(groups: list[QuantGroup], steps_of: list | None = None) -> dict:
    """Per holder (its steps): the members to drop and the logical weights to add; and under
    the key `_BELOW`, per steps from the root, the next steps towards a holder (so each
    execution's rebuild walks only those paths: scanning every holder at every node cost
    25-100 ms an execution for 420 groups). `steps_of`: each group's steps, if known (a
    group makes them from its links at each read)."""
    edits: dict = {}
    below: dict = {}
    for n, g in enumerate(groups):
        steps = g.steps if steps_of is None else steps_of[n]
        here = edits.get(steps)
        if here is None:
            here = edits[steps] = (set(), [])
        here[0].update([v for k, v in g.names.items() if k != "logical"])
        here[1].append(g)
        for i in range(len(steps) - 1, -1, -1):  # upwards, until a known link
            kids = below.get(steps[:i])
            if kids is None:
                below[steps[:i]] = {steps[i]}
            elif steps[i] in kids:
                break  # the path above is there already
            else:
                kids.add(steps[i])
    edits[_BELOW] = below
    return edits


_BELOW = object()  # never a tuple of steps


def rebuild_tree(node, steps: tuple, edits: dict, outputs: dict):
    """The tree with each group's members replaced by its output (other leaves as they are)."""
    nexts = edits[_BELOW].get(steps, ())
    here = edits.get(steps)
    if here is None and not nexts:
        return node
    if isinstance(node, dict) or (here is not None and hasattr(node, "items")):
        items = dict(node.items())
        if here is not None:
            drop, add = here
            items = {k: v for k, v in items.items() if k not in drop}
            for g in add:
                items[g.names["logical"]] = outputs[id(g)]
        for k in nexts:
            if type(k) is not tuple:
                items[k] = rebuild_tree(items[k], (*steps, k), edits, outputs)
        if type(node) is dict:
            return items
        try:
            return type(node)(items)
        except Exception:  # a mapping that cannot be built from a dict: give a plain dict
            return items
    keyed, treedef = jax.tree_util.tree_flatten_with_path(
        node, is_leaf=lambda x: x is not node)
    kids = [(jax.tree_util.keystr(p), c) for p, c in keyed]
    rebuilt = [rebuild_tree(c, (*steps, (k,)), edits, outputs) if (k,) in nexts else c
               for k, c in kids]
    return jax.tree_util.tree_unflatten(treedef, rebuilt)
