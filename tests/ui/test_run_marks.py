"""The run's timing marks (`INSPECTOR_RUN_MARKS`): off by default, one line per step when on,
in the order a run takes them (`benchmarks/bench_app.py --marks` reads them)."""

from __future__ import annotations

import numpy as np

from inspector.ui.session import run_marks
from inspector.ui.session.loaded import prepare
from inspector.ui.session.state import InspectorState


def run_sum() -> InspectorState:
    s = InspectorState(repeats=1)
    for i in range(2):
        s.add(prepare(f"t{i}", {"w": np.full((3, 4), i + 1.0, np.float32)}, "added"))
    s.ops["weighted_sum"].param.update(trees=["t0", "t1"], weights=[0.5, 0.5])
    s.op = "weighted_sum"
    s.run = True
    assert s.error == ""
    return s


def test_marks_are_off_unless_a_file_is_named(monkeypatch, tmp_path):
    monkeypatch.delenv("INSPECTOR_RUN_MARKS", raising=False)
    assert not run_marks.enabled()
    run_sum().close()
    assert list(tmp_path.iterdir()) == []


def test_a_run_writes_its_steps_in_order(monkeypatch, tmp_path):
    path = tmp_path / "marks.tsv"
    monkeypatch.setenv("INSPECTOR_RUN_MARKS", str(path))
    s = run_sum()
    np.testing.assert_allclose(np.asarray(s.result.result.unpack()["w"]), np.full((3, 4), 1.5))
    s.close()
    rows = [line.split("\t") for line in path.read_text().splitlines()]
    times = [float(t) for t, _, _ in rows]
    assert times == sorted(times)
    labels = [label for _, _, label in rows]
    steps = ["run event", "task built: running", "busy shown", "work started",
             "spare taken (0 buffers)", "inputs held (read 0.00 GB)", "executed",
             "run_once returned", "result indexed", "done started (event loop)",
             "done: views updated"]
    assert [x for x in labels if x in steps] == steps
    assert any(x.startswith("planned (kernels ") for x in labels)
    assert {sid for _, sid, label in rows if label == "run event"} == {str(id(s))}
