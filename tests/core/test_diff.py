import collections

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import inspector
from inspector import Difference, diff


def model():
    return {
        "dense": {"kernel": np.zeros((4, 3), np.float32), "bias": np.zeros(3, np.float32)},
        "norm": {"scale": np.ones(3, np.float32)},
        "blocks": [np.zeros(2), np.zeros(2)],
    }


def test_equal_trees_have_no_differences():
    assert diff(model(), model()) == []
    assert diff(model(), model(), values=True) == []


def test_every_kind_of_difference_with_its_path():
    ckpt = model()
    ckpt["dense"]["kernel"] = np.zeros((3, 4), np.float32)          # shape
    ckpt["norm"]["scale"] = np.ones(3, np.float16)                 # dtype
    del ckpt["dense"]["bias"]                                      # missing
    ckpt["norm"]["offset"] = np.zeros(3, np.float32)               # extra
    ckpt["blocks"] = tuple(ckpt["blocks"]) + (np.zeros(2),)        # type + extra
    got = [(d.path, d.kind, d.a, d.b) for d in diff(model(), ckpt)]
    assert got == [
        ("['blocks']", "type", "list", "tuple"),
        ("['blocks'][2]", "extra", None, "float64[2]"),
        ("['dense']['bias']", "missing", "float32[3]", None),
        ("['dense']['kernel']", "shape", (4, 3), (3, 4)),
        ("['norm']['scale']", "dtype", "float32", "float16"),
        ("['norm']['offset']", "extra", None, "float32[3]"),
    ]


def test_container_type_difference_still_compares_children():
    a = {"x": np.zeros(2)}
    b = collections.OrderedDict(x=np.zeros(3))
    assert [(d.path, d.kind) for d in diff(a, b)] == [("", "type"), ("['x']", "shape")]


def test_leaf_versus_subtree():
    d = diff({"a": np.zeros(2)}, {"a": {"w": np.zeros(2)}})
    assert d == [Difference("['a']", "type", "float64[2]", "dict of 1")]


def test_values_gives_max_abs_and_relative_l2():
    a = {"w": np.array([1.0, 2.0, 2.0]), "same": np.ones(2)}
    b = {"w": np.array([1.0, 2.5, 1.0]), "same": np.ones(2)}
    (d,) = diff(a, b, values=True)
    assert (d.path, d.kind, d.max_abs) == ("['w']", "value", 1.0)
    assert np.isclose(d.rel_l2, np.linalg.norm([0, 0.5, 1.0]) / 3.0)
    assert "max |a-b| = 1" in str(d)


def test_nan_in_the_same_places_is_equal_elsewhere_not():
    a = np.array([np.nan, 1.0])
    assert diff(a, a.copy(), values=True) == []
    (d,) = diff(a, np.array([1.0, np.nan]), values=True)
    assert np.isnan(d.max_abs)


def test_packed_and_plain_trees_compare_by_structure():
    assert diff(inspector.pack(model()), model()) == []


_LEAF = st.tuples(st.lists(st.integers(1, 3), max_size=2).map(tuple),
                  st.sampled_from(["float32", "int32", "float16"]))
_TREE = st.recursive(_LEAF, lambda kids: st.dictionaries(st.sampled_from("abcd"), kids,
                                                         max_size=3), max_leaves=8)


def _build(spec):
    if isinstance(spec, dict):
        return {k: _build(v) for k, v in spec.items()}
    shape, dtype = spec
    return np.zeros(shape, dtype)


@settings(max_examples=60, deadline=None)
@given(_TREE, _TREE)
def test_diff_is_symmetric_and_empty_only_for_equal_structure(sa, sb):
    a, b = _build(sa), _build(sb)
    ab, ba = diff(a, b), diff(b, a)
    swap = {"missing": "extra", "extra": "missing"}
    assert sorted((d.path, swap.get(d.kind, d.kind)) for d in ab) == sorted(
        (d.path, d.kind) for d in ba)
    assert (ab == []) == (inspector.describe(a) == inspector.describe(b))
