"""A training run with planted faults, as trees (steps 1..6) and as files."""

from __future__ import annotations

import numpy as np

STEPS = [1, 2, 3, 4, 5, 6]
FROZEN = "['enc']['frozen']"
NAN_LEAF = "['enc']['nan_from_3']"
INF_LEAF = "['dec']['inf_at_5']"
DOUBLING = "['dec']['doubling']"
ADDED = "['dec']['added_at_4']"


def planted_run() -> list[dict]:
    """Six steps: `enc/frozen` never changes; `enc/nan_from_3` holds a NaN from step 3 on;
    `dec/inf_at_5` one +Inf at step 5 only; `dec/doubling` doubles its norm each step;
    `dec/added_at_4` appears at step 4; `enc/moving` changes a little every step."""
    rng = np.random.default_rng(7)
    frozen = rng.standard_normal((8, 5)).astype(np.float32)
    base = rng.standard_normal((6, 7)).astype(np.float32)
    run = []
    for step in STEPS:
        nan_leaf = (base + 0.01 * step).astype(np.float32)
        if step >= 3:
            nan_leaf[1, 2] = np.nan
        inf_leaf = (base.T * (1 + 0.1 * step)).astype(np.float32)
        if step == 5:
            inf_leaf[0, 3] = np.inf
        tree = {
            "enc": {"frozen": frozen.copy(), "nan_from_3": nan_leaf,
                    "moving": rng.standard_normal(300).astype(np.float32)},
            "dec": {"doubling": (base * 2.0 ** step).astype(np.float32), "inf_at_5": inf_leaf},
        }
        if step >= 4:
            tree["dec"]["added_at_4"] = np.full(3, float(step), np.float32)
        run.append(tree)
    return run
