"""What a session opens on, picked from the trees it was given (the launcher's checkpoints, the
notebook widget's trees): one tree shows that tree; trees of one structure open on their weighted
sum (the mean, weights 1/K); when the first two differ in structure, the session opens on their
comparison, since a weighted sum of both could only fail.
"""

from __future__ import annotations

OPERATIONS = "operations"
COMPARE = "compare"


def preselect(state, names: list[str]) -> str:
    """Sets `state` up for the trees `names` (already added) and returns the view to open on.

    The first tree is selected (the input tree); the first two are set up for comparing; the
    trees of the first one's structure, when two or more, are set up for the weighted sum
    (weights 1/K, the operation shown) and for stacking.

    Returns:
        `COMPARE` when the first two trees differ in structure (their comparison shows how),
        else `OPERATIONS`.
    """
    if not names:
        return OPERATIONS
    first = state.trees[names[0]].index.rows
    same = [n for n in names if same_structure(state.trees[n].index.rows, first)]
    update: dict = {"selected": names[0]}
    if len(same) >= 2:
        state.ops["weighted_sum"].param.update(trees=same, weights=[1 / len(same)] * len(same))
        state.ops["stack"].trees = same
    if len(names) >= 2:
        state.compare.param.update(diff_a=names[0], diff_b=names[1])
    if len(same) >= 2:
        update["op"] = "weighted_sum"
    state.param.update(**update)
    return COMPARE if len(names) >= 2 and names[1] not in same else OPERATIONS


def same_structure(a: list, b: list) -> bool:
    """Whether two trees' `describe` rows have the same paths, kinds, shapes and dtypes."""
    return len(a) == len(b) and all(
        (x.path, x.kind, x.shape, x.dtype) == (y.path, y.kind, y.shape, y.dtype)
        for x, y in zip(a, b, strict=True))
