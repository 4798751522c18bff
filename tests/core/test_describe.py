import collections
import dataclasses
import enum

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inspector
from inspector import LazyArray, describe


class Point(collections.namedtuple("Point", "x y")):
    pass


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Linear:
    w: np.ndarray
    b: np.ndarray


@jax.tree_util.register_pytree_node_class
class NoKeys:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def tree_flatten(self):
        return (self.a, self.b), "aux"

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


class WithKeys:
    def __init__(self, first, second):
        self.first, self.second = first, second


jax.tree_util.register_pytree_with_keys(
    WithKeys,
    lambda n: (((jax.tree_util.GetAttrKey("first"), n.first),
                 (jax.tree_util.GetAttrKey("second"), n.second)), None),
    lambda aux, ch: WithKeys(*ch),
)


def _tree():
    return {
        "z": np.zeros((2, 3), np.float32),
        "a": [1, 2.5, None],
        "p": Point(np.ones(4, np.int8), jnp.ones((), jnp.bfloat16)),
        "lin": Linear(np.ones((3, 2), np.float16), np.zeros(3, np.float16)),
        "nk": NoKeys(np.ones(1), "text"),
        "wk": WithKeys(jax.ShapeDtypeStruct((5, 5), jnp.float32), ()),
    }


def test_rows_are_preorder_and_leaves_line_up_with_jax():
    tree = _tree()
    rows = describe(tree)
    leaf_rows = [r for r in rows if r.kind == "leaf"]
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    assert [r.path for r in leaf_rows] == [jax.tree_util.keystr(p) for p, _ in flat]
    # pre-order: each row's parent (nearest earlier row one level up) is a prefix of its path
    for i, row in enumerate(rows[1:], start=1):
        parent = next(r for r in reversed(rows[:i]) if r.depth == row.depth - 1)
        assert row.path.startswith(parent.path) and row.path == parent.path + row.key


def test_kinds_shapes_dtypes_and_totals():
    rows = {r.path: r for r in describe(_tree())}
    assert rows[""].kind == "dict" and rows[""].n_children == 6
    assert [k for k in rows if k.count("[") == 1 and "." not in k] == [
        "['a']", "['lin']", "['nk']", "['p']", "['wk']", "['z']"]  # sorted, as JAX sorts
    assert rows["['a']"].kind == "list"
    assert (rows["['a'][0]"].dtype, rows["['a'][0]"].shape) == ("int32", ())
    assert rows["['a'][1]"].dtype == "float32"
    assert rows["['a'][2]"].kind == "None" and rows["['a'][2]"].n_leaves == 0
    assert rows["['p']"].kind == "namedtuple" and rows["['p']"].type_name == "Point"
    assert rows["['p'].y"].dtype == "bfloat16" and rows["['p'].y"].device == str(jax.devices()[0])
    assert rows["['lin']"].kind == "dataclass"
    assert rows["['lin'].w"].shape == (3, 2) and rows["['lin'].w"].nbytes == 12
    assert rows["['nk']"].kind == "custom"
    assert rows["['nk'][<flat index 1>]"].shape is None  # a string leaf: no shape
    assert rows["['wk']"].kind == "custom" and rows["['wk'].first"].n_params == 25
    assert rows["['wk'].second"].kind == "tuple" and rows["['wk'].second"].n_children == 0
    z = rows["['z']"]
    assert (z.shape, z.dtype, z.nbytes, z.n_params, z.n_leaves) == ((2, 3), "float32", 24, 6, 1)
    # Totals on the root are the sums over leaves.
    leaves = [r for r in rows.values() if r.kind == "leaf"]
    assert rows[""].n_leaves == len(leaves) == len(jax.tree.leaves(_tree()))
    assert rows[""].n_params == sum(r.n_params for r in leaves)
    assert rows[""].nbytes == sum(r.nbytes for r in leaves)


def test_lazy_leaves_are_described_without_reading():
    reads = []

    def reader():
        reads.append(1)
        return np.zeros((1000, 1000), np.float32)

    rows = describe({"big": LazyArray((1000, 1000), "float32", reader, source="t")})
    assert rows[1].shape == (1000, 1000) and rows[1].nbytes == 4_000_000
    assert rows[1].type_name == "LazyArray"
    assert reads == []


def test_packed_tree_describes_as_its_tree():
    tree = {"a": np.ones((2, 2), np.float32), "b": [np.arange(3), None]}
    plain = describe(tree)
    packed = describe(inspector.pack(tree))
    strip = [(r.path, r.kind, r.shape, r.dtype, r.n_params) for r in plain]
    assert [(r.path, r.kind, r.shape, r.dtype, r.n_params) for r in packed] == strip


def test_ordered_dict_keeps_its_order():
    rows = describe(collections.OrderedDict([("b", 1), ("a", 2)]))
    assert [r.path for r in rows] == ["", "['b']", "['a']"]


@pytest.mark.parametrize(("leaf", "dtype"), [(True, "bool"), (7, "int32"), (2.5, "float32"),
                                             (1j, "complex64"), (np.float64(3.0), "float64")])
def test_scalar_leaves(leaf, dtype):
    # Python numbers are shown as JAX holds them; NumPy scalars keep their own dtype.
    row = describe(leaf)[0]
    assert (row.kind, row.shape, row.n_params, row.dtype) == ("leaf", (), 1, dtype)


def test_key_paths_match_jax_for_equal_keys_of_other_types():
    # `describe` remembers each str key's `['key']` during a call: a StrEnum member equal to
    # an earlier str key, and 1 / True, keep their own reprs, as in JAX's key paths
    class Color(enum.StrEnum):
        RED = "red"

    tree = {"a": {"red": np.zeros(2)}, "b": {Color.RED: np.zeros(3)},
            "c": {True: np.zeros(1)}, "d": {1: np.ones(1)}}
    leaves = [r.path for r in describe(tree) if r.kind == "leaf"]
    assert leaves == [jax.tree_util.keystr(p)
                      for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
    assert leaves[1:] == ["['b'][<Color.RED: 'red'>]", "['c'][True]", "['d'][1]"]
