"""`inspector.merge` against merges computed once by mergekit 0.1.5 itself.

The fixture and the script that made it live in tests/core/fixtures/ (torch and mergekit are
not installed here; see make_mergekit_fixtures.py).
"""

import json
import pathlib

import numpy as np
import pytest

import inspector
from inspector.core.merge import kernels

FIXTURE = np.load(pathlib.Path(__file__).parent / "fixtures" / "mergekit_reference.npz")
CASES = [json.loads(c) for c in FIXTURE["__cases__"]]
LEAVES = sorted({k.split("/")[2] for k in FIXTURE.files if k.startswith("in/base/")})


def model(name):
    return {leaf: FIXTURE[f"in/{name}/{leaf}"] for leaf in LEAVES}


@pytest.mark.slow
@pytest.mark.parametrize("packed", [False, True], ids=["tree", "packed"])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_mergekit(case, packed):
    trees = [model(m) for m in case["models"]]
    base = model(case["base"]) if case["base"] else None
    if packed:
        trees = [inspector.pack(t) for t in trees]
        base = inspector.pack(base) if base is not None else None
    out = inspector.merge(case["method"], trees, base=base, **case["params"])
    if packed:
        assert isinstance(out, inspector.PackedTree)
        out = out.unpack()
    for leaf in LEAVES:
        expected = FIXTURE[f"out/{case['name']}/{leaf}"]
        assert out[leaf].dtype == expected.dtype and out[leaf].shape == expected.shape
        np.testing.assert_allclose(np.asarray(out[leaf]), expected, rtol=2e-5, atol=2e-6,
                                   err_msg=f"{case['name']} {leaf}")


def test_dare_rescale_rule_matches_mergekit():
    delta, mask = FIXTURE["rescale/delta"], FIXTURE["rescale/mask"]
    out = kernels.rescaled(delta[None], mask[None], True)[0]
    np.testing.assert_allclose(np.asarray(out), FIXTURE["rescale/out"], rtol=1e-6, atol=1e-7)
