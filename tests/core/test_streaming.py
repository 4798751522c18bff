"""Ops over lazy (checkpoint) trees read one leaf at a time."""

import weakref

import numpy as np

import inspector
from inspector import LazyArray


class Tracker:
    """Counts reads and the most leaf arrays alive at once."""

    def __init__(self):
        self.reads = 0
        self.alive = 0
        self.peak = 0

    def _freed(self):
        self.alive -= 1

    def lazy(self, value: np.ndarray, name: str) -> LazyArray:
        def reader():
            self.reads += 1
            out = value.copy()
            self.alive += 1
            self.peak = max(self.peak, self.alive)
            weakref.finalize(out, self._freed)
            return out

        return LazyArray(value.shape, value.dtype, reader, source=name)


def test_weighted_sum_of_lazy_trees_reads_each_leaf_once_and_few_at_a_time():
    rng = np.random.default_rng(0)
    values = [{f"w{i}": rng.normal(size=(50, 20)).astype(np.float32) for i in range(30)}
              for _ in range(2)]
    tracker = Tracker()
    lazy = [{k: tracker.lazy(v, k) for k, v in t.items()} for t in values]
    out = inspector.weighted_sum(lazy, [0.25, 0.75])
    assert tracker.reads == 60
    assert tracker.peak <= 4  # the two inputs of one leaf, not the whole checkpoint
    for k in values[0]:
        ref = 0.25 * values[0][k].astype(np.float64) + 0.75 * values[1][k]
        np.testing.assert_allclose(np.asarray(out[k]), ref, rtol=1e-6)


def test_describe_and_diff_read_nothing():
    tracker = Tracker()
    a = {"x": tracker.lazy(np.zeros((3, 4), np.float32), "x")}
    b = {"x": tracker.lazy(np.zeros((3, 5), np.float32), "x")}
    inspector.describe(a)
    assert [d.kind for d in inspector.diff(a, b)] == ["shape"]
    assert tracker.reads == 0
