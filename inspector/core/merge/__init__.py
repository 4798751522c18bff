"""`merge(method, trees, base=, weights=, ...)`: the model-merge methods of mergekit, jitted.

Methods (names, parameters and defaults are mergekit's): `linear`, `task_arithmetic`, `ties`,
`dare_linear`, `dare_ties`, `slerp`, `model_stock`. See `METHODS` for each one's formula.
"""

from __future__ import annotations

from inspector.core.merge.methods import METHODS, Method
from inspector.core.merge.planning import MERGE, merge, plan_merge

__all__ = ["MERGE", "METHODS", "Method", "merge", "plan_merge"]
