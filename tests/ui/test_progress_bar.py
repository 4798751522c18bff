"""The run's progress bar shows only once a task has run for `PROGRESS_DELAY` (or reports how
far it is), and goes when the task ends: a short run animates nothing."""

from __future__ import annotations

from inspector.ui import operation_panel
from inspector.ui.operation_panel import OperationPanel
from inspector.ui.session.state import InspectorState


def _panel(monkeypatch):
    s = InspectorState()
    scheduled = []
    monkeypatch.setattr(s.worker, "later", lambda seconds, fn: scheduled.append((seconds, fn)))
    return s, OperationPanel(s), scheduled


def test_the_bar_waits_for_a_long_task_and_goes_with_it(monkeypatch):
    s, panel, scheduled = _panel(monkeypatch)
    s.busy = True
    assert not panel.progress.visible  # a task that just began: nothing animates
    assert [seconds for seconds, _ in scheduled] == [operation_panel.PROGRESS_DELAY]
    scheduled[0][1]()  # still running after the delay: the bar shows
    assert panel.progress.visible and panel.progress.variant == "indeterminate"
    s.busy = False
    assert not panel.progress.visible


def test_a_short_task_never_shows_the_bar(monkeypatch):
    s, panel, scheduled = _panel(monkeypatch)
    s.busy = True
    s.busy = False  # done within the delay
    s.busy = True  # the next task
    scheduled[0][1]()  # the first task's late call: not this task's
    assert not panel.progress.visible
    scheduled[1][1]()
    assert panel.progress.visible
    s.busy = False
    scheduled[1][1]()  # a call arriving after the task ended shows nothing
    assert not panel.progress.visible


def test_a_task_reporting_how_far_it_is_shows_the_bar_at_once(monkeypatch):
    s, panel, _ = _panel(monkeypatch)
    s.busy = True
    s.progress = 40.0
    assert panel.progress.visible
    assert panel.progress.variant == "determinate" and panel.progress.value == 40.0
    s.param.update(busy=False, progress=None)
    assert not panel.progress.visible and panel.progress.variant == "indeterminate"


def test_without_a_worker_thread_the_bar_shows_while_busy():
    s = InspectorState()  # not served: `later` calls at once
    panel = OperationPanel(s)
    s.busy = True
    assert panel.progress.visible
    s.busy = False
    assert not panel.progress.visible
