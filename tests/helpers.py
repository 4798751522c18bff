"""What the tests share: a tree's values as nested lists, trees compared leaf by leaf against a
reference (NumPy float64), each difference reported with its key path, and files opened in a
session state as the file picker opens them."""

from __future__ import annotations

import jax
import numpy as np

import inspector


def tree_lists(tree):
    """Returns `tree` with every leaf as nested Python lists (`None` kept); a `PackedTree` is
    unpacked first. For comparing with the exact scenario values of SCENARIOS.md."""
    if isinstance(tree, inspector.PackedTree):
        tree = tree.unpack()
    return jax.tree.map(lambda x: np.asarray(x).tolist(), tree, is_leaf=lambda x: x is None)


def assert_tree_allclose(actual, expected, *, rtol: float = 1e-7, atol: float = 0.0,
                         same_dtype: bool = False) -> None:
    """Asserts that the trees have one structure and every leaf of `actual` is close to
    `expected`'s (compared in float64; exact with `rtol=atol=0`), same shape, and with
    `same_dtype` the same dtype. A `PackedTree` is unpacked first."""
    actual, expected = (t.unpack() if isinstance(t, inspector.PackedTree) else t
                        for t in (actual, expected))
    assert jax.tree.structure(actual) == jax.tree.structure(expected), (
        f"{jax.tree.structure(actual)} != {jax.tree.structure(expected)}")
    paths = jax.tree_util.tree_flatten_with_path(expected)[0]
    for (path, want), got in zip(paths, jax.tree.leaves(actual), strict=True):
        where = jax.tree_util.keystr(path)
        got, want = np.asarray(got), np.asarray(want)
        assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
        if same_dtype:
            assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=rtol, atol=atol, err_msg=where)


def open_files(state, *paths) -> None:
    """Opens `paths` in session `state` as the file picker does (`state.open.open_files`)."""
    state.open.param.update(open_paths=[str(p) for p in paths])
    state.open.param.trigger("open_files")
