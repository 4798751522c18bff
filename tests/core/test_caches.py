"""`inspector.clear_caches()`: every process-wide cache registered once, all emptied by one call."""

from __future__ import annotations

import numpy as np

import inspector
from inspector.core import caches, nodes
from inspector.core.working_set import WorkingSet

EVERY_CACHE = {
    "compiled kernels", "output fills", "weighted-sum dtypes", "dtype names",
    "depth-checked structures", "JAX depth probe", "packed index plans", "working set",
    "tree indexes", "example trees",
}  # fmt: skip


def _fill_every_cache() -> WorkingSet:
    from inspector.ui.session.example_sets import example_trees
    from inspector.ui.session.tree_index import index_for

    big = [{"w": np.full(2**20, i, np.float32)} for i in range(2)]  # 4 MiB: a compiled fill
    inspector.weighted_sum(big, [0.5, 0.5])
    stacked = inspector.stack([inspector.pack({"a": np.ones(3, np.float32)})] * 2)
    inspector.index(stacked, 1)
    nodes.flatten({f"k{i}": [np.float32(i)] for i in range(600)})  # 1,201 nodes
    nodes.jax_flattens_any_depth()
    index_for({"w": np.ones(2)})
    example_trees("S2: per-subtree index")
    working = WorkingSet()
    working.hold({"t": {"w": np.ones(4, np.float32)}})
    return working


def test_every_cache_is_registered_filled_and_emptied():
    working = _fill_every_cache()
    filled = caches.sizes()
    assert set(filled) >= EVERY_CACHE, EVERY_CACHE - set(filled)
    assert [name for name in EVERY_CACHE if filled[name] == 0] == []
    before = inspector.clear_caches()
    assert {name: before[name] for name in EVERY_CACHE} == {n: filled[n] for n in EVERY_CACHE}
    assert sum(caches.sizes().values()) == 0, caches.sizes()
    assert working.get("t") is None  # dropped back to its lazy form: read again on next use
    working.close()


def test_results_are_the_same_after_clearing():
    trees = [{"w": np.arange(4, dtype=np.float32)}, {"w": np.ones(4, np.float32)}]
    first = np.asarray(inspector.weighted_sum(trees, [2, 3])["w"])
    inspector.clear_caches()
    assert inspector.cached_kernels() == 0
    np.testing.assert_array_equal(np.asarray(inspector.weighted_sum(trees, [2, 3])["w"]), first)
    np.testing.assert_array_equal(first, [3.0, 5.0, 7.0, 9.0])
