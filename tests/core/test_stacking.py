import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inspector import InspectorError, StructureMismatchError, stack, unstack
from tests.helpers import assert_tree_allclose


def mlp(key, sizes=(2, 3, 4)):
    keys = jax.random.split(key, len(sizes) - 1)
    return [(jax.random.normal(k, (n_out, n_in)), jnp.zeros(n_out) + i)
            for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:], strict=True))]


def forward(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w.T + b)
    w, b = params[-1]
    return x @ w.T + b


def mse_loss(params, x, y):
    return jnp.mean((forward(params, x) - y) ** 2)


def ensemble():
    return [mlp(k) for k in jax.random.split(jax.random.PRNGKey(0), 4)]


def test_s3_vmap_over_a_list_fails_but_over_the_stack_matches_the_loop():
    models = ensemble()
    x = jax.random.normal(jax.random.PRNGKey(1), (8, 2))
    y = jax.random.normal(jax.random.PRNGKey(2), (8, 4))
    with pytest.raises(ValueError, match="vmap got inconsistent sizes"):
        jax.vmap(mse_loss, in_axes=(0, None, None))(models, x, y)
    stacked = stack(models)
    assert jax.tree.map(lambda a: a.shape, stacked) == [((4, 3, 2), (4, 3)), ((4, 4, 3), (4, 4))]
    losses = jax.vmap(mse_loss, in_axes=(0, None, None))(stacked, x, y)
    loop = jnp.stack([mse_loss(m, x, y) for m in models])
    np.testing.assert_allclose(losses, loop, rtol=1e-6)


def test_unstack_is_the_exact_inverse():
    models = ensemble()
    back = unstack(stack(models))
    assert len(back) == 4
    assert_tree_allclose(back, models, rtol=0, same_dtype=True)


def test_stacking_mismatched_trees_names_every_path_and_both_shapes():
    models = ensemble()
    wrong = [models[0], models[1], mlp(jax.random.PRNGKey(9), (2, 4, 3)), models[3]]
    with pytest.raises(StructureMismatchError) as info:
        stack(wrong)
    assert str(info.value) == (
        "Cannot stack 4 trees: 4 differences (4 differ in shape).\n"
        "  - [0][0]: (3, 2) in tree 0, (4, 2) in tree 2\n"
        "  - [0][1]: (3,) in tree 0, (4,) in tree 2\n"
        "  - [1][0]: (4, 3) in tree 0, (3, 4) in tree 2\n"
        "  - [1][1]: (4,) in tree 0, (3,) in tree 2\n"
        "Every tree needs the same structure, leaf shapes and dtypes as tree 0."
    )


def test_unstack_refuses_leaves_with_other_leading_sizes():
    tree = {"a": np.ones((3, 2)), "b": np.ones((4,)), "c": np.ones((3,)), "d": np.float32(1)}
    with pytest.raises(StructureMismatchError) as info:
        unstack(tree)
    assert str(info.value) == (
        "Cannot unstack the tree: 1 leaf has no leading axis to split (shape ()) and 1 leaf has "
        "a leading size other than 3, the size the other leaves share.\n"
        "  - ['d']: shape (), no leading axis\n"
        "  - ['b']: shape (4,), leading size 4\n"
        "Unstacking splits every leaf along axis 0, so all leaves need the same size there."
    )


def test_unstack_of_a_leaf_without_a_leading_axis_says_so_in_a_sentence():
    with pytest.raises(StructureMismatchError) as info:
        unstack({"w": np.ones((2, 3)), "step": np.float32(1)})
    assert str(info.value) == (
        "Cannot unstack the tree: the leaf ['step'] has shape (), so it has no leading axis to "
        "split. Unstacking splits every leaf along axis 0; index or drop that leaf first."
    )


def test_stack_of_nothing_is_refused():
    with pytest.raises(InspectorError, match="Cannot stack no trees"):
        stack([])


def test_none_subtrees_survive_the_round_trip():
    trees = [{"w": np.full(2, i, np.float32), "aux": None} for i in range(3)]
    out = stack(trees)
    assert out["aux"] is None and out["w"].tolist() == [[0, 0], [1, 1], [2, 2]]
    assert [t["w"].tolist() for t in unstack(out)] == [[0, 0], [1, 1], [2, 2]]
