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
