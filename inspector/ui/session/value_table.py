"""The whole-tree value diff of the Compare tab: one row per leaf and per subtree, how much its
values changed (max |a-b|, relative L2, cosine, fraction changed), most changed first."""

from __future__ import annotations

import jax

from inspector.core.packed import unpacked
from inspector.core.value_diff import leaf_value_stats, subtree_value_stats

COLUMNS = ("path", "kind", "size", "max_abs", "rel_l2", "cosine", "changed")


def _leaves(tree) -> dict:
    flat, _ = jax.tree_util.tree_flatten_with_path(unpacked(tree))
    return {tuple(jax.tree_util.keystr((k,)) for k in path): leaf for path, leaf in flat}


def value_table(a, b, rtol: float = 1e-5, atol: float = 1e-8, progress=None) -> list[dict]:
    """Rows for every leaf both trees have with the same shape, and for every subtree above
    them (figures aggregated as one vector: max, norm- and size-weighted), sorted by relative
    L2, largest first (NaN first: NaNs moved). Reads each leaf of both trees once."""
    la, lb = _leaves(a), _leaves(b)
    keys = [k for k, x in la.items() if k in lb and tuple(getattr(x, "shape", ())) ==
            tuple(getattr(lb[k], "shape", ())) and hasattr(x, "dtype")]
    stats = leaf_value_stats([(la[k], lb[k]) for k in keys], rtol, atol, progress=progress)
    by_key = dict(zip(keys, stats, strict=True))
    rows = []
    for key, s in subtree_value_stats(by_key).items():
        rows.append({"path": "".join(key) or "(root)", "kind": "leaf" if key in by_key else
                     "subtree", "size": s.size, "max_abs": s.max_abs, "rel_l2": s.rel_l2,
                     "cosine": s.cosine, "changed": s.frac_changed})
    rows.sort(key=lambda r: (-(r["rel_l2"] if r["rel_l2"] == r["rel_l2"] else float("inf")),
                             r["path"]))
    return rows
