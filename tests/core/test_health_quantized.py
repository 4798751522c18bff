"""`scan` of quantized weights: each group scanned as its dequantized values, against NumPy
float64 of codes x scales computed here (not by the inspector's dequantize)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import inspector
from tests.core.test_health_scan import assert_figures, in_form


def fp8_tree():
    rng = np.random.default_rng(0)
    codes = (rng.standard_normal((256, 384)) * 4).astype(ml_dtypes.float8_e4m3fn)
    codes[0, :7] = 0
    scale = (rng.random((2, 3)) + 0.5).astype(np.float32)  # one per 128 x 128 block
    tensor = rng.standard_normal((64, 32)).astype(ml_dtypes.float8_e4m3fn)
    values = codes.astype(np.float64) * np.kron(scale.astype(np.float64), np.ones((128, 128)))
    tree = {"up": {"weight": codes, "weight_scale_inv": scale},
            "down": {"weight": tensor, "weight_scale": np.float32([0.25])},
            "norm": np.ones(8, np.float32)}
    return tree, {"['up']['weight']": values, "['down']['weight']": tensor.astype(np.float64)
                  * 0.25, "['norm']": np.ones(8)}


@pytest.mark.parametrize("form", ["plain", "packed", "lazy"])
def test_quantized_groups_are_scanned_dequantized(form):
    tree, want = fp8_tree()
    s = inspector.scan(in_form(tree, form))
    assert sorted(x.path for x in s.leaves) == sorted(want)  # no codes or scales alone
    for path, values in want.items():
        stats = s.leaf(path)
        assert stats.dtype == "float32" and stats.shape == values.shape
        assert_figures(stats, values.astype(np.float32))  # exact in float32: codes x 2^k-ish
    assert s.leaf("['up']['weight']").zeros == np.count_nonzero(want["['up']['weight']"] == 0)
