"""`convert` added as an app op the documented way (a settings class and a form, the core module
being the library's own): a tab, a run, a stream over the budget, a history row and code that
runs to the same values, with nothing else edited (states, no browser)."""

from __future__ import annotations

import gc

import jax
import numpy as np
import pytest

import inspector
from inspector.core import working_set
from inspector.ui import forms
from inspector.ui.operation_panel import OperationPanel
from inspector.ui.session.job_runner import StreamedRun
from inspector.ui.session.loaded import prepare
from inspector.ui.session.snippet import state_snippet
from inspector.ui.session.state import InspectorState
from tests.core.test_streaming import Tracker

rng = np.random.default_rng(11)
TORCH = {"fc.weight": rng.normal(size=(3, 2)).astype(np.float32),
         "fc.bias": rng.normal(size=3).astype(np.float32)}
FLAX = {"fc": {"kernel": np.zeros((2, 3), np.float32), "bias": np.zeros(3, np.float32)}}


@pytest.fixture(autouse=True)
def default_budget():
    gc.collect()
    yield
    working_set.set_budget(None)


def _session(tracker: Tracker) -> InspectorState:
    s = InspectorState(repeats=3)
    lazy = {"torch": {k: tracker.lazy(v, f"torch{k}") for k, v in TORCH.items()},
            "flax": jax.tree.map(lambda v: tracker.lazy(v, "flax"), FLAX)}
    for name, tree in lazy.items():
        s.add(prepare(name, tree, "file"))
    s.ops["convert"].param.update(tree="torch", target="flax")
    s.op = "convert"
    return s


def _check(result) -> None:
    np.testing.assert_array_equal(np.asarray(result["fc"]["kernel"]), TORCH["fc.weight"].T)
    np.testing.assert_array_equal(np.asarray(result["fc"]["bias"]), TORCH["fc.bias"])


def test_convert_is_a_tab_a_run_a_history_row_and_code(tmp_path):
    assert "convert" in forms.forms()
    tracker = Tracker()
    s = _session(tracker)
    assert "Convert" in [s.ops[op].title for op in OperationPanel(s).forms]
    assert s.form_error == "" and "1 layout change" in s.preview
    s.param.trigger("run")
    assert s.error == ""
    _check(s.result.result)
    assert len(s.result.times) == 3 and s.history[-1].op == "convert"
    assert tracker.reads == len(TORCH)  # the target's data is never read: its structure is
    code = state_snippet(s)
    assert "result = inspector.convert(torch, inspector.align(torch, flax))" in code
    namespace = {"torch": TORCH, "flax": FLAX}
    exec(compile(code, "<snippet>", "exec"), namespace)  # noqa: S102 - the app's own snippet
    _check(namespace["result"])


def test_convert_over_the_budget_streams_into_a_file():
    tracker = Tracker()
    s = _session(tracker)
    working_set.set_budget(10)
    s.param.trigger("run")
    assert s.error == ""
    assert isinstance(s.result, StreamedRun)
    _check(inspector.load(s.result.path))


def test_an_incomplete_alignment_says_what_to_do():
    s = InspectorState()
    s.add_tree("a", {"x": np.ones(2, np.float32)})
    s.add_tree("b", {"y": np.ones(3, np.float32), "z": np.ones(4, np.float32)})
    s.ops["convert"].param.update(tree="a", target="b")
    s.op = "convert"
    assert s.form_error.startswith("Cannot convert a onto b: ")
    assert s.form_error.endswith("Pair them in the Align view, or allow missing leaves.")
