"""The accelerators' scan (one fused kernel over every whole row, `kernels.buffer_kernel(...,
one_pass=True)`), forced here on the CPU, against NumPy float64: the same figures as the
CPU's paths, NaN/Inf rows included (they get no second look)."""

import numpy as np
import pytest

import inspector
from inspector.core.health import kernels
from inspector.core.health import scan as scan_module
from tests.core.test_health_scan import assert_figures, mixed_tree, plain_leaves


@pytest.fixture(params=["variadic", "fast"])
def one_pass(monkeypatch, request):
    monkeypatch.setattr(scan_module, "_one_pass", lambda device: True)
    monkeypatch.setattr(scan_module, "_on_host", lambda *args: False)
    monkeypatch.setattr(kernels, "ONE_PASS_FORM", request.param)


@pytest.mark.parametrize("form", ["plain", "packed"])
def test_one_pass_matches_numpy_float64(one_pass, form):
    tree = mixed_tree()
    leaves = plain_leaves(tree)
    s = inspector.scan(inspector.pack(tree) if form == "packed" else tree)
    for stats in s.leaves:
        assert_figures(stats, leaves[stats.path])
    assert [x.path for x in s.nonfinite()] == ["['all_nan']", "['faults']"]


def test_one_pass_long_rows_with_faults_inside_whole_rows(one_pass):
    rng = np.random.default_rng(5)
    big = (rng.standard_normal(64 * 16384 * 2 + 4321) * 2 + 5).astype(np.float32)
    big[[17, 20_000, 1_500_000]] = [np.nan, np.inf, -np.inf]
    big[100:300] = 0
    tree = {"big": big, "small": rng.standard_normal(999).astype(np.float32)}
    assert scan_module.block_for(big.size + 999, 2, True) == 16384  # the long rows
    s = inspector.scan(inspector.pack(tree))
    for stats in s.leaves:
        assert_figures(stats, tree[stats.path[2:-2]])
    assert s.leaf("['big']").nan == 1 and s.leaf("['big']").zeros == 200


def test_long_rows_of_a_tree_summing_device_give_each_leaf_its_figures(one_pass, monkeypatch):
    """Rows of >= 4x the mean leaf (what a GPU gets, `block_for(..., tree_sums=True)`), forced
    on the CPU: most leaves one piece, figures straight from its row; others over two pieces
    and whole rows. Small-integer values keep every float32 sum exact in any order (XLA's
    CPU sums a row in a loop, a GPU as a tree), so the figures equal NumPy's float64 ones."""
    real = scan_module.block_for
    monkeypatch.setattr(scan_module, "block_for",
                        lambda size, n, long_rows=False, tree_sums=False: real(size, n, True, True))
    rng = np.random.default_rng(11)
    sizes = np.concatenate([rng.integers(0, 600, 400), [0, 1, 5000, 20_000]])
    tree = [rng.integers(-20, 21, n).astype(np.float32) for n in sizes]
    tree[3][:2] = [np.nan, np.inf]
    packed = inspector.pack(tree)
    block = real(packed.layout.sizes["float32"], len(tree), True, True)
    assert block == 2048  # mean ~360 elements: 4x, rounded up to a power of two
    s = inspector.scan(packed)
    for stats, x in zip(s.leaves, tree, strict=True):
        assert_figures(stats, x, rtol=0)
    assert [x.path for x in s.nonfinite()] == ["[3]"]


def test_leaf_order_puts_each_leafs_rows_together():
    """`leaf_order`: per leaf its head piece, whole rows, tail piece, against a loop."""
    from inspector.core.health.layout_rows import leaf_order, leaf_rows

    rng = np.random.default_rng(2)
    sizes = rng.integers(0, 300, 200)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    start, stop, row, _, _, pieces = leaf_rows(offsets, sizes, int(sizes.sum()), 64)
    order, is_piece, first, end = leaf_order(start, stop, pieces)
    for i in range(len(sizes)):
        want = ([(True, pieces[i, 0])] if pieces[i, 0] >= 0 else []) + \
            [(False, r) for r in range(start[i], stop[i])] + \
            ([(True, pieces[i, 1])] if pieces[i, 1] >= 0 else [])
        got = list(zip(is_piece[first[i]:end[i]].tolist(), order[first[i]:end[i]].tolist(),
                       strict=True))
        assert got == want, i
    assert (end - first == 0).tolist() == (sizes == 0).tolist()
