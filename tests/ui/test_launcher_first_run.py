"""A launcher's first runs: its sum compiled before the first Run, and a later session's first
run writes into the buffers of the result a closed session left (states, no browser)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from inspector.core import caches, weighted_sum_host, working_set
from inspector.ui.session import launcher_warm
from inspector.ui.session.formatting import human_bytes
from inspector.ui.session.job_runner import Cancelled
from inspector.ui.session.loaded import prepare
from inspector.ui.session.state import InspectorState
from tests.core.test_streaming import Tracker

# shapes no other test uses: the kernels are not in the process's cache before this file
SHAPES = {"emb": (41, 23), "w": (23, 19), "b": (19,)}
WEIGHTS = [0.25, 0.75]


@pytest.fixture(autouse=True, params=["xla", "host loop"])
def clean(request, monkeypatch):
    """Every test with XLA's kernel and with the CPU's loop (`weighted_sum_host.py`: there
    for float32 groups of 16 MiB and more; here for every one)."""
    monkeypatch.setattr(weighted_sum_host, "MIN_BYTES", 0 if request.param == "host loop"
                        else weighted_sum_host.MIN_BYTES)
    gc.collect()
    yield
    launcher_warm.release()
    working_set.set_budget(None)


def launched(tracker: Tracker):
    """Two lazy checkpoints as the launcher opens them (marked warm, their sum precompiled),
    and their values."""
    rng = np.random.default_rng(3)
    values = [{n: rng.normal(size=s).astype(np.float32) for n, s in SHAPES.items()}
              for _ in range(2)]
    loaded = [prepare(f"m{i}.safetensors", {n: tracker.lazy(v, f"m{i}{n}")
                                            for n, v in t.items()}, "file")
              for i, t in enumerate(values)]
    thread = launcher_warm.keep_warm(loaded)
    assert thread is not None
    thread.join()
    return values, loaded


def session_of(loaded) -> InspectorState:
    """A session holding the launcher's trees, weighted_sum chosen over them."""
    s = InspectorState(repeats=1)
    for t in loaded:
        s.add(t)
    s.ops["weighted_sum"].param.update(trees=[t.name for t in loaded], weights=WEIGHTS)
    s.op = "weighted_sum"
    return s


def run_session(loaded) -> tuple[InspectorState, object]:
    s = session_of(loaded)
    s.run = True
    assert s.error == ""
    return s, s.result


def check_values(rr, values) -> None:
    out = rr.result.unpack()
    for key in SHAPES:
        want = sum(w * v[key].astype(np.float64) for w, v in zip(WEIGHTS, values, strict=True))
        np.testing.assert_allclose(np.asarray(out[key]), want, rtol=1e-6, atol=1e-7)


def test_the_first_run_finds_the_launchers_sum_compiled():
    values, loaded = launched(Tracker())
    s, rr = run_session(loaded)
    assert rr.n_compiled == 0  # compiled by the launcher's warm-up, not by this run
    check_values(rr, values)
    s.close()


def test_a_later_sessions_first_run_reads_nothing_and_writes_into_the_last_result():
    tracker = Tracker()
    values, loaded = launched(tracker)
    first, rr = run_session(loaded)
    reads = tracker.reads
    assert reads == 2 * len(SHAPES)
    address = rr.result.buffers["float32"].unsafe_buffer_pointer()
    first.close()
    assert caches.sizes()["launcher spare output"] == 1  # the closed session's result
    second, again = run_session(loaded)
    assert tracker.reads == reads  # the launcher's trees stayed resident
    assert again.n_compiled == 0 and again.read_bytes == 0
    # the output went into the closed session's buffer, not into freshly faulted memory
    assert again.result.buffers["float32"].unsafe_buffer_pointer() == address
    assert caches.sizes()["launcher spare output"] == 0
    check_values(again, values)
    second.close()
    launcher_warm.release()  # the server stopping: the spare is freed too
    assert caches.sizes()["launcher spare output"] == 0


def test_a_session_on_its_own_trees_leaves_no_spare():
    tracker = Tracker()
    launched(tracker)
    own = [prepare(f"own{i}", {n: tracker.lazy(np.ones(s, np.float32), f"o{i}{n}")
                               for n, s in SHAPES.items()}, "upload") for i in range(2)]
    s, rr = run_session(own)
    buffer = rr.result.buffers["float32"]
    s.close()
    assert caches.sizes()["launcher spare output"] == 0
    assert buffer.is_deleted()  # freed with its session, as before


def test_a_first_read_shows_each_tree_read_on_the_progress_bar():
    values, loaded = launched(Tracker())
    s = session_of(loaded)
    seen = []
    s.param.watch(lambda *_: seen.append((s.status, s.progress)), ["status", "progress"])
    s.run = True
    nbytes = sum(4 * np.prod(shape) for shape in SHAPES.values())
    reads = [(text, p) for text, p in seen if text.startswith("Reading")]
    assert [text for text, _ in dict(reads).items()] == [
        f"Reading m{i}.safetensors ({human_bytes(nbytes)}) for weighted_sum …" for i in (0, 1)]
    assert [p for _, p in dict(reads).items()] == [0.0, 50.0]  # bytes read before each
    assert ("Running weighted_sum on cpu:0 …", None) in seen  # then the bar runs again
    check_values(s.result, values)
    s.close()


def test_a_session_closing_while_a_timed_repeat_writes_hands_its_result_on_after_it():
    values, loaded = launched(Tracker())
    s, rr = run_session(loaded)
    planned = s.runs._planned[1]
    execute = planned.execute

    def closed_meanwhile():
        # the event loop closes the session while this execution writes into the result:
        # `close` cannot take the execution's lock, so it leaves the result to this thread
        out = execute()
        s.close()
        assert caches.sizes()["launcher spare output"] == 0
        return out

    planned.execute = closed_meanwhile
    with pytest.raises(Cancelled):
        s.runs.repeat(rr, 3, s.runs._generation)
    # handed on once the execution was done (was: freed), holding that execution's output
    assert caches.sizes()["launcher spare output"] == 1
    address = rr.result.buffers["float32"].unsafe_buffer_pointer()
    second, again = run_session(loaded)
    assert again.result.buffers["float32"].unsafe_buffer_pointer() == address
    check_values(again, values)
    second.close()


def test_a_run_finishing_after_its_session_closed_hands_its_result_on():
    values, loaded = launched(Tracker())
    s = session_of(loaded)
    job = s.job()
    inputs = s.runs.inputs

    def closed_while_reading(*args, **kwargs):
        out = inputs(*args, **kwargs)
        s.runs.close()  # the page closed while the files were read
        return out

    s.runs.inputs = closed_while_reading
    with pytest.raises(Cancelled):
        s.runs.run_once(job, dict(s.trees), s.device)
    assert caches.sizes()["launcher spare output"] == 1  # its output: the next session's
    second, again = run_session(loaded)
    check_values(again, values)
    second.close()
    s.close()
