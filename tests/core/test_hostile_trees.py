"""Cyclic and absurdly deep trees: every entry point raises a TreeDepthError naming where."""

import dataclasses

import jax
import numpy as np
import pytest

import inspector
from inspector import TreeDepthError
from inspector.core import nodes


def nested(depth: int, leaf=None):
    """A list nested `depth` levels deep around one float32 leaf (the leaf at `depth`)."""
    tree = np.float32(1) if leaf is None else leaf
    for _ in range(depth):
        tree = [tree]
    return tree


def cyclic_list():
    a = [np.float32(1), [np.float32(2)]]
    a[1].append(a)  # a[1][1] is a
    return a


def cyclic_dict():
    d = {"w": np.zeros(2, np.float32), "sub": {}}
    d["sub"]["back"] = d["sub"]
    return d


CYCLE_LIST = ("The tree contains itself: the list at [1][1] is the same object as the root "
              "(a cycle). Pytrees must be acyclic: replace the reference with a copy, or "
              "remove it.")
CYCLE_DICT = ("The tree contains itself: the dict at ['sub']['back'] is the same object as its "
              "ancestor at ['sub'] (a cycle).")
DEEP = ("The tree nests 5,000 levels deep (at [0][0][0][0][0][0]...[0][0] (500 keys)); the "
        "inspector walks trees up to 500 levels deep.")

OPS = {
    "describe": lambda t: inspector.describe(t),
    "diff": lambda t: inspector.diff(t, t),
    "pack": lambda t: inspector.pack(t),
    "weighted_sum": lambda t: inspector.weighted_sum([t, t], [1, 1]),
    "stack": lambda t: inspector.stack([t, t]),
    "unstack": lambda t: inspector.unstack(t),
    "index_whole": lambda t: inspector.index(t, 0),
    "index_none": lambda t: inspector.index(t, None),
    "index_by_itself": lambda t: inspector.index(t, t),
    "run": lambda t: inspector.run(lambda x: x, t, repeats=1),
    "merge": lambda t: inspector.merge("linear", [t, t], weights=[1, 1]),
    "shard": lambda t: inspector.shard(t, inspector.mesh({"x": 1}), None),
    "quant_groups": lambda t: inspector.quant_groups(t),
    "dequantize": lambda t: inspector.dequantize(t),
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("make, message", [(cyclic_list, CYCLE_LIST), (cyclic_dict, CYCLE_DICT)],
                         ids=["list", "dict"])
def test_every_entry_point_names_the_cycle(op, make, message):
    with pytest.raises(TreeDepthError) as info:
        OPS[op](make())
    if op == "run":  # `run` flattens `(args, kwargs)`: paths start at the first argument, [0][0]
        message = message.replace(" at [", " at [0][0][").replace(" the root", " its ancestor at "
                                                                              "[0][0]")
    assert message in str(info.value)
    assert not isinstance(info.value, RecursionError | SystemError)


@pytest.mark.parametrize("op", OPS)
def test_every_entry_point_names_the_depth_of_a_5000_deep_tree(op):
    with pytest.raises(TreeDepthError) as info:
        OPS[op](nested(5000))
    # `run` flattens `(args, kwargs)`: two levels more
    assert (DEEP if op != "run" else DEEP.replace("5,000", "5,002")) in str(info.value)


def test_jax_itself_fails_with_a_bare_system_error_which_is_why_the_guard_exists():
    if nodes.jax_flattens_any_depth():  # JAX 0.11 flattens it: `flatten` checks depth itself
        assert len(jax.tree_util.tree_leaves(nested(5000))) == 1
        return
    with pytest.raises(SystemError):
        jax.tree_util.tree_flatten(nested(5000))


def test_where_jax_flattens_any_depth_the_guard_walks_each_large_structure_once(monkeypatch):
    """JAX 0.11 flattens 5,000 levels (seen on a GPU machine's jax 0.11.2): `flatten` then
    walks a structure of more than MAX_DEPTH nodes itself, once, and refuses it past the
    limit. Here JAX 0.10 is told it is such a JAX: 600 levels flatten without error there."""
    monkeypatch.setattr(nodes, "jax_flattens_any_depth", lambda: True)
    for op in ("pack", "weighted_sum", "stack", "index_whole"):
        with pytest.raises(TreeDepthError, match="The tree nests 600 levels deep"):
            OPS[op](nested(600))
    wide = {f"k{i}": [np.float32(i)] for i in range(600)}  # 1,201 nodes, 2 levels
    treedef = jax.tree_util.tree_structure(wide)
    nodes._SHALLOW.pop(treedef, None)
    packed = inspector.pack(wide)
    assert treedef in nodes._SHALLOW  # walked once; the next flatten of it looks it up
    assert float(packed.unpack()["k599"][0]) == 599.0
    assert nodes.flatten(nested(nodes.MAX_DEPTH))[1].num_leaves == 1  # at the limit: fine


def test_trees_up_to_the_limit_work_everywhere():
    tree = nested(nodes.MAX_DEPTH, leaf=np.arange(3, dtype=np.float32))
    rows = inspector.describe(tree)
    assert rows[-1].depth == nodes.MAX_DEPTH and rows[-1].shape == (3,)
    assert inspector.diff(tree, tree) == []
    out = inspector.weighted_sum([tree, tree], [1, 2])
    leaf = jax.tree.leaves(out)[0]
    np.testing.assert_array_equal(np.asarray(leaf), np.arange(3) * 3.0)
    assert jax.tree.leaves(inspector.index(tree, 1))[0] == 1.0


def test_one_level_more_is_refused_with_the_depth():
    tree = nested(nodes.MAX_DEPTH + 1)
    with pytest.raises(TreeDepthError, match="The tree nests 501 levels deep"):
        inspector.describe(tree)


def test_shared_subtrees_are_not_cycles():
    shared = {"w": np.ones(2, np.float32)}
    tree = {"a": shared, "b": shared, "c": [shared, [shared]]}
    assert [r.path for r in inspector.describe(tree) if r.kind == "leaf"] == [
        "['a']['w']", "['b']['w']", "['c'][0]['w']", "['c'][1][0]['w']"]
    nodes.check_depth(tree)  # no error


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Layer:
    w: object
    next: object


def test_a_cycle_through_a_registered_dataclass_is_named_too():
    layer = Layer(np.ones(2, np.float32), None)
    layer.next = {"again": layer}
    for op in (inspector.describe, inspector.pack):
        with pytest.raises(TreeDepthError, match=r"the Layer at \.next\['again'\] is the same "
                                                 "object as the root"):
            op(layer)
