"""The session's worker: one error policy after every task, the running task named in a param."""

from __future__ import annotations

import inspector
from inspector.ui.session.job_runner import Cancelled
from inspector.ui.session.state import InspectorState
from inspector.ui.session.worker import Task


def _failing(exc):
    def work():
        raise exc

    return work


def test_running_names_the_task_while_it_runs_and_clears_after():
    s = InspectorState()
    seen = []
    s.param.watch(lambda e: seen.append(e.new), "running")
    s.worker.submit("comparing", Task("Comparing a with b …", lambda: 41, lambda out: None))
    assert seen == ["comparing", ""] and not s.busy and s.status == ""


def test_one_error_policy_for_every_task():
    s = InspectorState(file_root="/srv/root")
    s.worker.submit("scanning", Task("…", _failing(inspector.InspectorError(
        "Cannot read /srv/root/a.npz: damaged."))))
    assert s.error == "Cannot read a.npz: damaged."  # the root is never shown
    s.error = ""
    s.worker.submit("running", Task("…", _failing(Cancelled())))
    assert s.error == ""  # a cancelled task says nothing
    s.worker.submit("running", Task("…", _failing(IndexError("list index out of range"))))
    assert s.error.startswith("Unexpected IndexError: list index out of range\n  at ")
    s.error, where = "", []
    s.worker.submit("opening", Task("…", _failing(KeyError("k")), failed=where.append))
    assert s.error == "" and where[0].startswith("Unexpected KeyError: 'k'")  # its own place
    s.worker.submit("keeping", lambda: (_ for _ in ()).throw(ValueError("bad settings")))
    assert s.error.startswith("Unexpected ValueError: bad settings")  # building it failed
    assert not s.busy and s.running == ""


def test_coalesced_tasks_keep_only_the_latest_queued():
    s = InspectorState()
    ran = []
    s.busy = True  # something runs: these queue
    for i in range(3):
        s.worker.submit("running", Task(f"run {i}", lambda i=i: ran.append(i)), coalesce=True)
    s.worker.submit("keeping", Task("keep", lambda: ran.append("keep")))
    s.busy = False
    s.worker.submit("comparing", Task("compare", lambda: ran.append("compare")))
    assert ran == [2, "keep", "compare"]
