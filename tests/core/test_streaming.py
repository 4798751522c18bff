"""Ops over lazy (checkpoint) trees read one leaf at a time."""

import threading
import weakref

import numpy as np

import inspector
from inspector import LazyArray


class Tracker:
    """Counts reads and the most leaf arrays alive at once (reads and frees may happen in
    worker threads: counted under a lock)."""

    def __init__(self):
        self.reads = 0
        self.alive = 0
        self.peak = 0
        self.lock = threading.Lock()

    def _freed(self):
        with self.lock:
            self.alive -= 1

    def lazy(self, value: np.ndarray, name: str) -> LazyArray:
        def reader():
            out = value.copy()
            with self.lock:
                self.reads += 1
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


def test_run_reads_lazy_leaves_once_per_run_and_times_reading_apart():
    rng = np.random.default_rng(1)
    values = [{f"w{i}": rng.normal(size=(64, 32)).astype(np.float32) for i in range(5)}
              for _ in range(3)]
    tracker = Tracker()
    lazy = [{k: tracker.lazy(v, k) for k, v in t.items()} for t in values]
    w = [0.5, 0.25, 0.25]
    r = inspector.run(inspector.weighted_sum, lazy, w, repeats=4, warmup=2)
    assert tracker.reads == 15  # 3 trees x 5 leaves, not x (repeats + warmup)
    assert len(r.times) == 4
    assert r.read_seconds > 0 and r.read_seconds >= r.place_seconds
    assert r.gbps == (r.bytes_read + r.bytes_written) / r.median_seconds / 1e9
    for k in values[0]:
        ref = sum(w * t[k].astype(np.float64) for w, t in zip(w, values, strict=True))
        np.testing.assert_allclose(np.asarray(r.result[k]), ref, rtol=1e-6, atol=1e-6)
    r2 = inspector.run(inspector.index, lazy[0], "1:3", repeats=3)
    assert tracker.reads == 20
    np.testing.assert_array_equal(np.asarray(r2.result["w0"]), values[0]["w0"][1:3])
