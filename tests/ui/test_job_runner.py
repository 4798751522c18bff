"""The session run path: shared working-set copies, re-runs into the last result's buffers,
streamed runs with progress, the budget following free memory (states, no browser)."""

from __future__ import annotations

import gc
import re
import weakref

import numpy as np
import pytest

from inspector.core import memory, working_set
from inspector.ui.operation_panel import OperationPanel
from inspector.ui.session.job_runner import Cancelled, StreamedRun
from inspector.ui.session.loaded import prepare
from inspector.ui.session.state import InspectorState
from tests.core.test_streaming import Tracker

SHAPES = {"w": (60, 50), "b": (50,), "emb": (30, 40)}


@pytest.fixture(autouse=True)
def default_budget():
    gc.collect()  # states of earlier tests that are garbage let go of what they held
    yield
    working_set.set_budget(None)


def checkpoints(tracker: Tracker, k: int = 2):
    """`k` lazy trees (reads counted by `tracker`) and their values."""
    rng = np.random.default_rng(7)
    values = [{n: rng.normal(size=s).astype(np.float32) for n, s in SHAPES.items()}
              for _ in range(k)]
    lazy = [{n: tracker.lazy(v, f"t{i}{n}") for n, v in t.items()} for i, t in enumerate(values)]
    return values, [prepare(f"t{i}", t, "file") for i, t in enumerate(lazy)]


def session(loaded, weights, repeats: int = 1) -> InspectorState:
    s = InspectorState(repeats=repeats)
    for t in loaded:
        s.add(t)
    s.ops["weighted_sum"].param.update(trees=[t.name for t in loaded], weights=list(weights))
    s.op = "weighted_sum"
    return s


def expected(values, weights, key):
    return sum(w * v[key].astype(np.float64) for w, v in zip(weights, values, strict=True))


def result_leaf(s: InspectorState, key: str) -> np.ndarray:
    return np.asarray(s.result.result.unpack()[key])


def pointer(s: InspectorState) -> int:
    return s.result.result.buffers["float32"].unsafe_buffer_pointer()


def test_sessions_opening_the_same_checkpoints_share_one_copy_freed_by_the_last():
    tracker = Tracker()
    values, loaded = checkpoints(tracker)
    before = working_set.held_bytes()
    one, two = session(loaded, [0.5, 0.5]), session(loaded, [0.25, 0.75])
    one.param.trigger("run")
    two.param.trigger("run")
    assert tracker.reads == 2 * len(SHAPES)  # each leaf of each checkpoint read once in all
    tree_bytes = sum(int(np.prod(s)) * 4 for s in SHAPES.values())
    assert working_set.held_bytes() - before == 2 * tree_bytes  # counted once, not per session
    assert [(h.name, h.shared) for h in sorted(two.held, key=lambda h: h.name)] == [
        ("t0", 2), ("t1", 2)]
    np.testing.assert_allclose(result_leaf(two, "w"), expected(values, [0.25, 0.75], "w"),
                               atol=1e-6)
    copy = [weakref.ref(b) for b in two.runs.working.get("t0").buffers.values()]
    one.close()
    assert working_set.held_bytes() - before == 2 * tree_bytes  # the other session holds it
    two.ops["weighted_sum"].weights = [1.0, -1.0]
    two.param.trigger("run")
    assert tracker.reads == 2 * len(SHAPES)  # still not read again
    np.testing.assert_allclose(result_leaf(two, "emb"), expected(values, [1, -1], "emb"),
                               atol=1e-6)
    job = two.job()
    shown = two.result.result.buffers["float32"]
    two.close()
    assert shown.is_deleted()  # freed at once, whatever still refers to it
    gc.collect()
    assert working_set.held_bytes() == before
    assert all(ref() is None for ref in copy)
    reads = tracker.reads
    with pytest.raises(Cancelled):  # a run still queued when the session ended
        two.runs.run_once(job, {t.name: t for t in loaded}, None)
    assert tracker.reads == reads and working_set.held_bytes() == before


def test_weight_changes_and_repeats_write_into_the_shown_result_until_it_is_kept():
    tracker = Tracker()
    values, loaded = checkpoints(tracker)
    s = session(loaded, [0.5, 0.5], repeats=3)
    s.param.trigger("run")  # one execution, then 3 timed repeats, each into the same buffer
    first = pointer(s)
    assert len(s.result.times) == 3
    np.testing.assert_allclose(result_leaf(s, "w"), expected(values, [0.5, 0.5], "w"),
                               atol=1e-6)
    for weights in ([0.1, 0.9], [2.0, -1.0]):
        s.ops["weighted_sum"].weights = weights
        s.param.trigger("run")
        assert pointer(s) == first  # the weight change took the last result's memory
        for key in SHAPES:
            np.testing.assert_allclose(result_leaf(s, key), expected(values, weights, key),
                                       atol=1e-5)
    s.param.trigger("keep_result")
    kept = s.trees[s.selected]
    s.ops["weighted_sum"].weights = [1.0, 1.0]
    s.param.trigger("run")
    assert pointer(s) != first  # the kept tree is an input now: never written over
    np.testing.assert_allclose(np.asarray(kept.tree.unpack()["w"]),
                               expected(values, [2.0, -1.0], "w"), atol=1e-5)
    np.testing.assert_allclose(result_leaf(s, "b"), expected(values, [1, 1], "b"), atol=1e-5)
    s.close()


def test_a_run_over_the_budget_streams_into_a_file_with_its_progress():
    tracker = Tracker()
    values, loaded = checkpoints(tracker)
    working_set.set_budget(1000)  # far below inputs + output
    s = session(loaded, [0.25, 0.75])
    seen, full, bar = [], [], OperationPanel(s).progress
    s.param.watch(lambda e: seen.append((e.new, s.status)), "progress")
    bar.param.watch(lambda e: e.new and bar.variant == "determinate" and e.new == 100
                    and full.append(e.new), "value")
    s.param.trigger("run")
    assert s.error == ""
    assert isinstance(s.result, StreamedRun) and s.held == []
    for key in SHAPES:
        np.testing.assert_allclose(np.asarray(s.result.result[key]),
                                   expected(values, [0.25, 0.75], key), atol=1e-6)
    shown = [(p, text) for p, text in seen if p is not None]
    assert shown[-1][0] == 100.0
    assert [p for p, _ in shown] == sorted(p for p, _ in shown)
    assert re.fullmatch(r"Writing the result to a file \(larger than the memory budget\): "
                        r"3 / 3 leaves, [0-9.]+ [KMG]?i?B/s", shown[-1][1])
    assert full == [100]  # the bar showed the leaves written, up to 100%
    assert s.progress is None and s.status == ""  # done: the bar goes back
    assert bar.variant == "indeterminate"
    s.close()


def test_the_default_budget_follows_the_memory_free_now(monkeypatch):
    free = {"bytes": 8 * 10**9}
    monkeypatch.setattr(memory, "device_available", lambda device: free["bytes"])
    held = working_set.held_bytes()
    assert not working_set.budget_is_set()
    assert working_set.budget() == int(working_set.DEFAULT_FRACTION * (8 * 10**9 + held))
    free["bytes"] = 2 * 10**9  # another program took memory: the budget shrinks with it
    assert working_set.budget() == int(working_set.DEFAULT_FRACTION * (2 * 10**9 + held))
    working_set.set_budget(5 * 10**9)
    assert working_set.budget() == 5 * 10**9 and working_set.budget_is_set()
    working_set.set_budget(None)
    assert working_set.budget() == int(working_set.DEFAULT_FRACTION * (2 * 10**9 + held))


def test_rates_near_a_unit_boundary_read_as_numbers():
    from inspector.ui.session.formatting import human_bytes

    assert [human_bytes(n) for n in (1000 * 1024, 1023 * 1024, 1024 * 1024, 1536)] == [
        "0.977 MiB", "0.999 MiB", "1 MiB", "1.5 KiB"]  # `.3g` alone wrote '1e+03 KiB'


def test_the_budget_field_reads_and_writes_gib_the_unit_of_the_holdings_it_lists():
    from inspector.ui.working_set_view import WorkingSetView

    tracker = Tracker()
    _, loaded = checkpoints(tracker)
    s = session(loaded, [0.25, 0.75])
    view = WorkingSetView(s)
    assert view.budget.label == "Memory budget (GiB)"
    view.budget.value = 1.5  # typed in the field
    assert working_set.budget() == 1_610_612_736 and working_set.budget_is_set()  # 1.5 * 2**30
    assert "of 1.5 GiB (set)" in view._body.object  # shown at once, nothing held yet
    s.param.trigger("run")
    assert s.error == "" and s.held
    lines = view.text.splitlines()
    for h, line in zip(s.held, lines, strict=False):
        assert line.startswith(f"{h.name}: ") and line.endswith(f"{h.nbytes / 1024:.3g} KiB")
    assert lines[-1].endswith(" of 1.5 GiB (set)")  # the budget in the holdings' unit
    working_set.set_budget(3 * 1024**3)
    assert WorkingSetView.budget_gib() == 3.0  # the field's value for a budget set elsewhere
    s.close()


def test_an_op_over_the_budget_that_cannot_stream_names_the_budget_in_gib():
    tracker = Tracker()
    _, loaded = checkpoints(tracker)
    working_set.set_budget(1000)
    s = session(loaded, [0.25, 0.75])
    s.ops["stack"].trees = [t.name for t in loaded]
    s.op = "stack"
    s.param.trigger("run")
    assert s.error.startswith("stack needs more memory than the budget allows (1000 B): raise the "
                              "budget in the sidebar, or run it from Python."), s.error
    s.close()
