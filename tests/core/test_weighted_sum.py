import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import inspector
from inspector import (
    InspectorError,
    StructureMismatchError,
    UnsupportedLeafError,
    weighted_sum,
    weighted_sum_dtype,
)
from tests.helpers import tree_lists

S1 = [
    [[[[1, 2], [3, 4]], [2, 3]], [[[1, 2], [3, 4]], [2, 3]]],
    [[[[2, 3], [3, 4]], [5, 3]], [[[2, 3], [3, 4]], [5, 3]]],
    [[[[7, 1], [4, 4]], [6, 2]], [[[6, 4], [3, 7]], [7, 3]]],
]
S1_EXPECTED = [[[[26, 11], [21, 24]], [30, 15]], [[[23, 20], [18, 33]], [33, 18]]]


def s1_tree(t):
    """`[[int32[2,2], int32[2]], [int32[2,2], int32[2]]]` from the nested lists above."""
    return [[np.array(block[0], np.int32), np.array(block[1], np.int32)] for block in t]


@pytest.mark.parametrize("packed", [False, True])
def test_s1_integer_trees_and_weights_stay_int32(packed):
    trees = [s1_tree(t) for t in S1]
    if packed:
        trees = [inspector.pack(t) for t in trees]
    out = weighted_sum(trees, [1, 2, 3])
    if packed:
        assert isinstance(out, inspector.PackedTree)
        out = out.unpack()
    assert tree_lists(out) == S1_EXPECTED
    assert str(jax.tree.structure(out)) == "PyTreeDef([[*, *], [*, *]])"
    assert {np.asarray(x).dtype for x in jax.tree.leaves(out)} == {np.dtype(np.int32)}


def test_any_rank_where_the_matmul_trick_fails():
    rng = np.random.default_rng(0)
    trees = [{"w": rng.normal(size=(3, 4, 5)).astype(np.float32)} for _ in range(3)]
    weights = [0.2, -1.5, 3.0]
    stacked = jnp.stack([t["w"] for t in trees])
    with pytest.raises(TypeError, match="dot_general requires contracting dimensions"):
        jnp.asarray(weights) @ stacked
    ref = sum(w * t["w"].astype(np.float64) for w, t in zip(weights, trees, strict=True))
    np.testing.assert_allclose(weighted_sum(trees, weights)["w"], ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_low_precision_is_accumulated_in_float32_and_cast_once(dtype):
    # 0.1 * x summed over 10 trees: accumulating in bf16 drifts; in f32 it rounds once.
    x = np.linspace(1, 2, 64).astype(dtype)
    trees = [{"x": x} for _ in range(10)]
    out = weighted_sum(trees, [0.1] * 10)["x"]
    assert out.dtype == dtype
    exact = (sum(0.1 * x.astype(np.float64) for _ in range(10)))
    expected = np.float32(np.sum([np.float32(0.1) * x.astype(np.float32) for _ in range(10)],
                                 axis=0)).astype(dtype)
    assert np.array_equal(np.asarray(out), expected)
    naive = np.zeros_like(x)
    for _ in range(10):
        naive = (naive + np.asarray(0.1, dtype) * x).astype(dtype)
    err_ours = np.abs(np.asarray(out, np.float64) - exact).max()
    err_naive = np.abs(naive.astype(np.float64) - exact).max()
    assert err_ours < err_naive


def test_dtype_rule_is_stated_and_followed():
    assert weighted_sum_dtype("int32", [1, 2]) == np.int32
    assert weighted_sum_dtype("int8", [1, np.int64(2)]) == np.int8
    assert weighted_sum_dtype("int32", [1, 0.5]) == np.float32
    assert weighted_sum_dtype("bool", [1, 1]) == np.int32
    assert weighted_sum_dtype("float16", [1, 2]) == np.float16
    assert weighted_sum_dtype("complex64", [0.5, 0.5]) == np.complex64
    tree = {"i": np.array([1, 3], np.int32), "f": np.array([1.0], np.float16)}
    out = weighted_sum([tree, tree], [0.5, 0.25])
    assert out["i"].dtype == np.float32 and out["i"].tolist() == [0.75, 2.25]
    assert out["f"].dtype == np.float16
    ints = weighted_sum([tree, tree], [2, -1])
    assert ints["i"].dtype == np.int32 and ints["i"].tolist() == [1, 3]


def test_sgd_step_and_ema_are_weighted_sums():
    params = {"w": np.array([1.0, -2.0], np.float32)}
    grads = {"w": np.array([0.5, 0.5], np.float32)}
    lr = 0.1
    np.testing.assert_allclose(weighted_sum([params, grads], [1, -lr])["w"], [0.95, -2.05])
    a = 0.01
    np.testing.assert_allclose(weighted_sum([params, grads], [1 - a, a])["w"],
                               [0.995, -1.975], rtol=1e-6)


def test_wrong_number_of_weights():
    with pytest.raises(InspectorError, match="got 2 trees and 3 weights. Give exactly one"):
        weighted_sum([{"a": 1.0}, {"a": 2.0}], [1, 2, 3])
    with pytest.raises(InspectorError, match="no trees"):
        weighted_sum([], [])


def test_mismatch_lists_every_path_and_both_sides():
    a = {"w": np.zeros((3, 2)), "b": np.zeros(3), "c": np.zeros(1)}
    b = {"w": np.zeros((4, 2)), "b": np.zeros(3, np.int32), "d": np.zeros(1)}
    with pytest.raises(StructureMismatchError) as info:
        weighted_sum([a, a, b], [1, 1, 1])
    msg = str(info.value)
    assert msg.startswith("Cannot take a weighted sum of 3 trees: 4 differences")
    assert "['w']: (3, 2) in tree 0, (4, 2) in tree 2" in msg
    assert "['b']: float64 in tree 0, int32 in tree 2" in msg
    assert "['c']: in tree 0 (float64[1]), missing from tree 2" in msg
    assert "['d']: in tree 2 (float64[1]), not in tree 0" in msg


def test_non_numeric_leaves_are_refused_with_paths():
    with pytest.raises(UnsupportedLeafError, match=r"\['name'\]: str"):
        weighted_sum([{"name": "a", "x": 1.0}, {"name": "a", "x": 2.0}], [1, 1])


def test_none_subtrees_are_kept():
    tree = {"a": np.ones(2, np.float32), "b": None}
    out = weighted_sum([tree, tree], [1.0, 2.0])
    assert out["b"] is None and out["a"].tolist() == [3.0, 3.0]


_DTYPES = st.sampled_from([np.float32, np.float16, jnp.bfloat16, np.int32, np.int8])
_SHAPES = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


@settings(max_examples=40, deadline=None)
@given(
    shapes=st.lists(st.tuples(_SHAPES, _DTYPES), min_size=1, max_size=5),
    k=st.integers(1, 4),
    int_weights=st.booleans(),
    seed=st.integers(0, 2**16),
    packed=st.booleans(),
)
def test_matches_numpy_float64(shapes, k, int_weights, seed, packed):
    rng = np.random.default_rng(seed)
    weights = ([int(w) for w in rng.integers(-3, 4, k)] if int_weights
               else [float(w) for w in rng.normal(size=k)])
    trees = [
        {f"l{i}": (rng.integers(-20, 20, shape) if np.dtype(dt).kind == "i"
                   else rng.normal(size=shape)).astype(dt)
         for i, (shape, dt) in enumerate(shapes)}
        for _ in range(k)
    ]
    out = weighted_sum([inspector.pack(t) for t in trees] if packed else trees, weights)
    if packed:
        out = out.unpack()
    for name, leaf in trees[0].items():
        ref = sum(w * t[name].astype(np.float64) for w, t in zip(weights, trees, strict=True))
        got = np.asarray(out[name])
        assert got.dtype == weighted_sum_dtype(leaf.dtype, weights)
        assert got.shape == leaf.shape
        if got.dtype.kind == "i":
            wrapped = np.asarray(ref).astype(np.int64).astype(got.dtype)
            assert np.array_equal(got, wrapped)
        else:
            tol = {2: 1e-2, 4: 1e-5}[got.dtype.itemsize]
            scale = sum(abs(w) * np.abs(t[name].astype(np.float64)) for w, t in
                        zip(weights, trees, strict=True))
            assert np.all(np.abs(got.astype(np.float64) - ref) <= tol * (scale + 1e-30) + 1e-30)


def test_bfloat16_dtype_object_is_ml_dtypes():
    assert weighted_sum_dtype(ml_dtypes.bfloat16, [1.0]) == np.dtype(ml_dtypes.bfloat16)
