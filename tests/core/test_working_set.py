"""The working set: read once, held packed, evicted least recently used past the budget."""

import gc
import weakref

import jax
import ml_dtypes
import numpy as np
import pytest

import inspector
from inspector.core import device_upload, working_set
from inspector.core.devices import device_name
from inspector.core.packed_reads import read_packed
from inspector.core.working_set import WorkingSet
from tests.core.test_streaming import Tracker
from tests.helpers import assert_tree_allclose


@pytest.fixture(autouse=True)
def default_budget():
    yield
    working_set.set_budget(None)


def lazy_tree(tracker, seed, n=6, shape=(40, 25)):
    rng = np.random.default_rng(seed)
    values = {f"w{i}": rng.normal(size=shape).astype(np.float32) for i in range(n)}
    values["step"] = np.array(seed, np.int64)
    values["b"] = rng.normal(size=(7,)).astype(ml_dtypes.bfloat16)
    return values, {k: tracker.lazy(v, k) for k, v in values.items()}


def test_read_once_then_reused_by_every_op(monkeypatch):
    monkeypatch.setattr(device_upload, "_STAGING_BYTES", 1000)  # off the CPU: spans chunks
    tracker = Tracker()
    (va, a), (vb, b) = lazy_tree(tracker, 0), lazy_tree(tracker, 1)
    ws = WorkingSet()
    for weights in ([0.5, 0.5], [0.1, 0.9], [1.0, -1.0]):
        held = ws.hold({"a": a, "b": b})
        out = inspector.weighted_sum([held["a"], held["b"]], weights).unpack()
        for k in ("w0", "w5", "b"):
            ref = weights[0] * va[k].astype(np.float64) + weights[1] * vb[k].astype(np.float64)
            tol = 1e-2 if k == "b" else 1e-6
            np.testing.assert_allclose(np.asarray(out[k]).astype(np.float64), ref, atol=tol,
                                       rtol=tol)
    assert tracker.reads == 2 * 8  # each leaf of each tree once, for three ops
    assert tracker.peak <= 2
    stats = ws.get("a").unpack()["w3"]
    np.testing.assert_array_equal(np.asarray(stats), va["w3"])
    assert np.asarray(ws.get("a").unpack()["step"]).dtype == np.int32  # as JAX holds int64
    assert {h.name for h in ws.holdings()} == {"a", "b"}
    default = jax.devices()[0]  # held where the ops run: host RAM on the CPU backend
    where = "host" if default.platform == "cpu" else "device"
    assert all(h.where == where and h.device == device_name(default) for h in ws.holdings())
    ws.close()


def test_the_budget_evicts_least_recently_used_instead_of_failing():
    tracker = Tracker()
    trees = [lazy_tree(tracker, s)[1] for s in range(3)]
    size = working_set._nbytes(trees[0])
    working_set.set_budget(int(2.5 * size))
    ws, other = WorkingSet(), WorkingSet()
    ws.hold({"t0": trees[0]})
    other.hold({"t1": trees[1]})  # another session shares the budget
    ws.get("t0")  # t0 used last: t1 is the oldest now
    ws.hold({"t2": trees[2]})
    assert [h.name for h in ws.holdings()] == ["t2", "t0"]
    assert other.holdings() == []  # evicted back to lazy form
    assert working_set.held_bytes() <= working_set.budget()
    assert ws.hold({"t0": trees[0], "t1": trees[1], "t2": trees[2]}) is None  # cannot fit
    assert ws.hold({"t1": trees[1]}, extra_bytes=2 * size) is None
    assert working_set.held_bytes() <= working_set.budget()
    working_set.set_budget(size)  # shrinking evicts too
    assert len(ws.holdings()) <= 1
    reads = tracker.reads
    ws.hold({"t1": trees[1]})  # evicted trees are read again when needed
    assert tracker.reads == reads + 8
    ws.close()
    other.close()


def test_close_releases_the_buffers():
    ws = WorkingSet()
    held = ws.hold({"a": {"w": np.ones((1000,), np.float32)}})
    buffers = [weakref.ref(b) for b in held["a"].buffers.values()]
    del held
    ws.close()
    gc.collect()
    assert all(ref() is None for ref in buffers)
    assert working_set.held_bytes() == 0
    with pytest.raises(inspector.InspectorError, match=r"working set was closed \(its session "
                       r"ended\): make a new one"):
        ws.hold({"a": {"w": np.ones((1000,), np.float32)}})  # a run still queued reads nothing
    assert working_set.held_bytes() == 0


def test_a_reloaded_tree_is_read_again():
    ws = WorkingSet()
    first = {"w": np.zeros(3, np.float32)}
    ws.hold({"a": first})
    second = {"w": np.ones(3, np.float32)}
    assert ws.hold({"a": second})["a"].unpack()["w"].tolist() == [1.0] * 3
    ws.close()


def test_read_packed_equals_pack_for_every_dtype():
    rng = np.random.default_rng(3)
    tree = {"f": rng.normal(size=(5, 3)).astype(np.float32),
            "h": rng.normal(size=(4,)).astype(np.float16),
            "i": rng.integers(-9, 9, size=(2, 2)).astype(np.int32),
            "u": rng.integers(0, 9, size=(3,)).astype(np.uint8), "none": None,
            "bf": rng.normal(size=(6,)).astype(ml_dtypes.bfloat16)}
    got = read_packed(tree, None)
    assert all(isinstance(b, jax.Array) for b in got.buffers.values())
    assert_tree_allclose(got, tree, rtol=0, same_dtype=True)
