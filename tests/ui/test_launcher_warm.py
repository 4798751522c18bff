"""The launcher's trees stay held after the session that read them closes; others do not."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from inspector.core.working_set import WorkingSet
from inspector.ui.session import launcher_warm
from tests.core.test_streaming import Tracker


def _lazy(tracker, seed):
    rng = np.random.default_rng(seed)
    return {f"w{i}": tracker.lazy(rng.normal(size=(8, 4)).astype(np.float32), f"w{i}")
            for i in range(3)}


def test_a_launcher_tree_stays_held_for_the_next_session():
    tracker = Tracker()
    launched, opened = _lazy(tracker, 0), _lazy(tracker, 1)
    launcher_warm.keep_warm([SimpleNamespace(name="a.safetensors", tree=launched)])
    try:
        first = WorkingSet()
        held = first.hold({"a": launched, "mine": opened})
        launcher_warm.pin(held, {"a": launched, "mine": opened}, None)
        assert tracker.reads == 6
        first.close()  # the first session ends
        assert launcher_warm.held_names() == ["a.safetensors"]
        second = WorkingSet()
        again = second.hold({"a": launched, "mine": opened})
        assert again["a"] is held["a"]  # resident: the same buffers, not read again
        assert tracker.reads == 6 + 3  # only the session's own tree is read again
        np.testing.assert_array_equal(np.asarray(again["a"].unpack()["w1"]),
                                      np.asarray(launched["w1"]))
        second.close()
    finally:
        launcher_warm.release()
    assert launcher_warm.held_names() == []
