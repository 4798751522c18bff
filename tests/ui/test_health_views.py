"""The Health and Timeline views, driven through the session state (no browser)."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.ui.health_view import HealthView
from inspector.ui.session.state import InspectorState
from inspector.ui.timeline_view import TimelineView
from tests.core.health_runs import FROZEN, INF_LEAF, NAN_LEAF, planted_run


def _state():
    return InspectorState()


def test_scan_colours_rows_and_next_nan_walks_the_offenders():
    state = _state()
    run = planted_run()
    state.add_tree("step 5", run[4], "test", select=True)
    view = HealthView(state)
    state.health.scan_tree = True
    scan = state.health.scan
    assert state.health.scanned == "step 5"
    assert [s.path for s in scan.nonfinite()] == [INF_LEAF, NAN_LEAF]
    assert scan.leaf(NAN_LEAF).nan == 1 and scan.leaf(INF_LEAF).posinf == 1
    state.health.next_nan = True
    assert state.health.tree_view.path == INF_LEAF
    state.health.next_nan = True
    assert state.health.tree_view.path == NAN_LEAF
    state.health.next_nan = True
    assert state.health.tree_view.path == INF_LEAF  # round again
    view._update()
    shown = view.lazy.shown()
    assert shown[INF_LEAF]["heat"]["color"] == "#c62828"
    assert shown["['dec']"]["heat"]["title"] == "non-finite: 1"
    assert "holds NaN/Inf" in view.legend.object
    state.health.only_nonfinite = True
    view._update()
    assert view.table.value["path"].tolist() == [INF_LEAF, NAN_LEAF]
    assert view.table.value["nan"].tolist() == [0, 1]
    state.health.color_by = "norm"
    view._update()
    assert view.lazy.shown()[NAN_LEAF]["heat"]["title"].startswith("norm: ")


def _timeline_of(steps: int):
    """A session holding the planted run's first `steps` checkpoints, their timeline built
    (fold depth 2), and its view."""
    state = _state()
    names = [state.add_tree(f"step {i + 1}", tree, "test") for i, tree in
             enumerate(planted_run()[:steps])]
    view = TimelineView(state)
    state.health.param.update(timeline_trees=names, depth=2)
    state.health.open_timeline = True
    return state, view


def test_timeline_of_loaded_trees_and_a_picked_cell_opens_the_comparison():
    state, view = _timeline_of(4)
    t = state.health.timeline
    assert t.frozen() == [FROZEN] and t.first_nonfinite() == {NAN_LEAF: 2}
    view._update()
    assert "frozen" in view.notes.object and FROZEN.replace("'", "&#x27;") in view.notes.object
    data = view.source.data
    assert set(data["row"]) == {"['enc']['frozen']", "['enc']['moving']", NAN_LEAF,
                                "['dec']['doubling']", INF_LEAF, "['dec']['added_at_4']"}
    frozen_cells = [v for r, v in zip(data["row"], data["value"], strict=True) if r == FROZEN]
    assert np.isnan(frozen_cells[0]) and frozen_cells[1:] == [0.0, 0.0, 0.0]
    assert "first NaN/Inf" in [f for r, f in zip(data["row"], data["first"], strict=True)
                               if r == NAN_LEAF]
    shown = []
    state.health.param.watch(lambda e: shown.append(True), "compare_shown")
    view.tap(NAN_LEAF, 2)
    assert (state.compare.diff_a, state.compare.diff_b) == ("step 2", "step 3")
    assert state.tree_views["diff"].path == NAN_LEAF and shown


def test_a_pick_while_the_comparison_is_built_keeps_its_leaf_selected():
    """In the app the comparison runs after the pick (a background task): its result must
    not clear the leaf the pick selected meanwhile, and that leaf's values are read."""
    state, view = _timeline_of(3)
    view._update()
    state.busy = True  # another task is running: the comparison waits in the queue
    view.tap("['enc']['moving']", 2)
    assert state.compare.diff_result is None and state.tree_views["diff"].path
    state.busy = False
    state.worker._next()  # the comparison, then the values of the picked leaf
    state.worker._next()
    assert state.compare.diff_result is not None
    assert state.tree_views["diff"].path == "['enc']['moving']"
    a, b = (planted_run()[k]["enc"]["moving"].astype(np.float64) for k in (1, 2))
    assert state.compare.diff_values["['enc']['moving']"][0] == pytest.approx(
        np.abs(b - a).max(), rel=1e-6)


def test_timeline_of_a_folder_opens_steps_when_picked(tmp_path):
    import inspector

    for i, tree in enumerate(planted_run()[:3]):
        inspector.save(tree, tmp_path / f"ckpt_{(i + 1) * 100}.safetensors")
    state = InspectorState(file_root=str(tmp_path))
    view = TimelineView(state)
    state.health.param.update(timeline_folder=".", depth=1)
    state.health.open_timeline = True
    assert state.health.timeline.labels == [100, 200, 300]
    view._update()
    view.tap("['dec']", 1)
    assert (state.compare.diff_a, state.compare.diff_b) == ("step 100", "step 200")
    assert "step 200" in state.trees


def test_the_notebook_widget_has_both_views():
    import inspector

    run = planted_run()[:3]
    widget = inspector.Inspector(step1=run[0], step2=run[1], step3=run[2])
    assert len(widget.tabs.objects) == 4  # operations, comparison, health, timeline
    state = widget.state
    state.selected = "step3"
    state.health.scan_tree = True  # from a cell: runs at once
    assert [s.path for s in state.health.scan.nonfinite()] == [NAN_LEAF]
    state.health.param.update(timeline_trees=["step1", "step2", "step3"], depth=2)
    state.health.open_timeline = True
    assert state.health.timeline.frozen() == [FROZEN]
    widget.app.timeline._update()
    widget.app.timeline.tap(NAN_LEAF, 2)
    c = state.compare
    assert widget.tabs.active == 1 and (c.diff_a, c.diff_b) == ("step2", "step3")


def test_a_folder_outside_the_root_is_refused(tmp_path):
    state = InspectorState(file_root=str(tmp_path / "inside"))
    state.health.timeline_folder = "../elsewhere"
    state.health.open_timeline = True
    assert "outside the folder the app may open" in state.error
    assert state.health.timeline is None
