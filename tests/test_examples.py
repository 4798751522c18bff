"""The built-in example trees: the scenarios of SCENARIOS.md, exactly, and a big checkpoint."""

from __future__ import annotations

import doctest
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import inspector
from inspector import examples
from tests.helpers import assert_tree_allclose, tree_lists


def test_s1_trees_are_the_scenario():
    t1, t2, t3 = examples.s1_trees()
    assert [x.dtype for x in jax.tree.leaves(t1)] == [np.int32] * 4
    assert str(jax.tree.structure(t1)) == "PyTreeDef([[*, *], [*, *]])"
    assert tree_lists(t2)[0][1] == [5, 3]


def test_s1_weighted_sum_gives_the_expected_tree():
    out = inspector.weighted_sum(examples.s1_trees(), examples.S1_WEIGHTS)
    assert tree_lists(out) == examples.S1_EXPECTED
    assert {x.dtype for x in jax.tree.leaves(out)} == {np.dtype(np.int32)}


def test_s2_index_gives_the_expected_tree():
    out = inspector.index(examples.s2_tree(), examples.s2_index_tree())
    assert jax.tree.map(lambda x: np.asarray(x).tolist(), out,
                        is_leaf=lambda x: x is None) == examples.S2_EXPECTED


def test_s2_index_as_typed_in_the_app_gives_the_same_tree():
    index_tree = [None if t == ":" else t for t in examples.S2_INDEX_TEXT]
    out = inspector.index(examples.s2_tree(), index_tree)
    assert out[0][0].tolist() == [3.0, 4.0, 5.0]
    assert out[3][0].tolist() == [10.0, 11.0]


def test_s3_ensemble_stacks_to_the_vmap_layout():
    members = examples.ensemble()
    assert len(members) == 4
    assert {x.dtype for m in members for x in jax.tree.leaves(m)} == {np.dtype(np.float32)}
    stacked = inspector.stack(members)
    assert [tuple(x.shape) for x in jax.tree.leaves(stacked)] == [(4, 3, 2), (4, 3), (4, 4, 3),
                                                                 (4, 4)]
    back = inspector.unstack(stacked)
    assert_tree_allclose(back, members, rtol=0, same_dtype=True)


def test_members_differ():
    a, b = examples.ensemble(2)
    assert not np.array_equal(a[0][0], b[0][0])


def test_mlp_params_and_grads_share_a_structure():
    params, grads = examples.mlp_params(), examples.mlp_grads()
    assert sorted(params) == ["layer1", "layer2"]
    assert sorted(params["layer1"]) == ["biases", "weights"]
    assert jax.tree.structure(params) == jax.tree.structure(grads)
    step = inspector.weighted_sum([params, grads], [1, -0.1])
    expected = params["layer1"]["weights"] - np.float32(0.1) * grads["layer1"]["weights"]
    np.testing.assert_allclose(np.asarray(step["layer1"]["weights"]), expected, rtol=1e-6)


def test_transformer_checkpoint_is_large_and_quick_to_build():
    # this thread's CPU time: neither the machine's other jobs nor this test process's other
    # threads count (process_time counted a suite's leftover worker threads: 1.18 s once)
    start = time.thread_time()
    tree = examples.transformer_checkpoint()
    seconds = time.thread_time() - start
    leaves = jax.tree.leaves(tree)
    assert len(leaves) == 20_004
    assert {x.dtype for x in leaves} == {np.dtype(np.float32)}
    assert len(tree["layers"]) == 1250
    assert seconds < 1.0  # measured about 0.05 s (leaves are views into one buffer)
    assert examples.transformer_checkpoint(seed=1)["layers"]["layer_0000"]["attn"]["key"][
        "kernel"].shape == (8, 8)


def test_load_returns_named_trees_and_names_the_examples_on_a_typo():
    assert sorted(examples.load("S1: weighted sum")) == ["t1", "t2", "t3"]
    assert set(examples.DEFAULT_EXAMPLES) <= set(examples.EXAMPLES)
    with pytest.raises(KeyError, match="S1: weighted sum"):
        examples.load("S9")


def test_docstring_examples_run():
    result = doctest.testmod(examples)
    assert result.failed == 0 and result.attempted > 0


def test_importing_examples_loads_no_ui_library():
    code = ("import sys, inspector.examples; "
            "print(sorted(m for m in ('panel', 'bokeh', 'param') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
