"""A job names its op and its trees; the op's settings own what is special about it. So the
runner, the state, the run tasks and the snippet writer name no op; any op whose library
function takes `out=` streams in the app (read, compute and write timed apart); and a run plans
once, its timed repeats executing that plan (states, no browser)."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy as stn

import inspector
from inspector.core import runner, working_set
from inspector.ui.session.job_runner import StreamedRun
from inspector.ui.session.op_settings import settings_classes
from inspector.ui.session.records import Job
from inspector.ui.session.state import InspectorState
from inspector.ui.timing_card import timing_lines

SESSION = Path(inspector.__file__).parent / "ui" / "session"
NO_OP_NAMES = ["job_runner.py", "state.py", "run_tasks.py", "snippet.py", "records.py",
               "worker.py", "loaded.py", "origins.py", "op_settings.py"]
F8 = ml_dtypes.float8_e4m3fn


@pytest.fixture(autouse=True)
def default_budget():
    gc.collect()
    yield
    working_set.set_budget(None)


def _op_names_in(path: Path, names: set[str]) -> list[str]:
    """Every string constant of the module equal to an op's name (docstrings are prose)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [f"{path.name}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in names and id(node) not in docstrings]


def test_the_runner_state_tasks_and_snippet_writer_name_no_op():
    names = set(settings_classes()) | {"convert"}
    assert names >= {"weighted_sum", "index", "stack", "unstack", "dequantize", "merge"}
    found = [hit for module in NO_OP_NAMES for hit in _op_names_in(SESSION / module, names)]
    assert found == []
    # the check finds them where they are: the ops' own files
    assert _op_names_in(SESSION / "ops" / "stack.py", names)


def _files(tmp_path: Path, trees: dict) -> InspectorState:
    """A session holding each tree opened from its own safetensors file (lazy leaves)."""
    s = InspectorState(file_root=str(tmp_path))
    for name, tree in trees.items():
        stn.save_file(tree, tmp_path / f"{name}.safetensors")
    s.open.open_paths = [str(tmp_path / f"{n}.safetensors") for n in trees]
    s.open.param.trigger("open_files")
    assert s.open.open_error == ""
    return s


def _values(tree) -> dict:
    return {k: np.asarray(v, np.float64) for k, v in tree.items()}


def test_a_merge_over_the_budget_streams_to_a_file_that_matches_the_library(tmp_path):
    rng = np.random.default_rng(3)
    trees = {n: {"w": rng.normal(size=(40, 30)).astype(np.float32),
                 "b": rng.normal(size=30).astype(np.float32)} for n in ("base", "ft1", "ft2")}
    s = _files(tmp_path, trees)
    s.ops["merge"].param.update(method="ties", trees=["ft1.safetensors", "ft2.safetensors"],
                                base="base.safetensors", weights=[1.0, 0.5],
                                density=[0.5, 0.8])
    s.op = "merge"
    working_set.set_budget(1000)  # far below the inputs: they are not read into memory
    s.param.trigger("run")
    assert s.error == ""
    rr = s.result
    assert isinstance(rr, StreamedRun) and Path(rr.path).is_file() and s.held == []
    library = inspector.merge("ties", [trees["ft1"], trees["ft2"]], base=trees["base"],
                              weights=[1.0, 0.5], density=[0.5, 0.8])
    streamed = _values(inspector.load(rr.path))
    for key, value in _values(library).items():
        np.testing.assert_array_equal(streamed[key], value)
    assert s.history[-1].kernels == 0  # no kernel count made up for a stream


def test_a_dequantize_over_the_budget_streams_to_a_file_that_matches_the_library(tmp_path):
    codes = np.zeros((256, 384), F8)
    codes[0, 0], codes[200, 300] = 2.0, -3.0
    tree = {"model.up.weight": codes,
            "model.up.weight_scale_inv": np.array([[0.5, 1, 2], [4, 8, 16]], np.float32),
            "model.norm.weight": np.ones(384, np.float32)}
    s = _files(tmp_path, {"fp8": tree})
    s.ops["dequantize"].param.update(tree="fp8.safetensors", dtype="float32")
    s.op = "dequantize"
    settings = s.ops["dequantize"]
    loaded = s.trees["fp8.safetensors"].tree
    # what the working set budgets for: the fp8 codes become float32 (4 bytes each)
    assert settings.output_bytes([loaded]) == 256 * 384 * 4 + 384 * 4
    working_set.set_budget(1000)
    progress = []
    s.param.watch(lambda e: progress.append(e.new), "progress")
    s.param.trigger("run")
    assert s.error == ""
    rr = s.result
    assert isinstance(rr, StreamedRun) and progress and max(p for p in progress if p) == 100
    library = inspector.dequantize(inspector.load(tmp_path / "fp8.safetensors"), "float32")
    got = inspector.load(rr.path)
    np.testing.assert_array_equal(np.asarray(got["model"]["up"]["weight"]),
                                  np.asarray(library["model"]["up"]["weight"]))
    assert float(np.asarray(got["model"]["up"]["weight"])[200, 300]) == -3.0 * 16


def test_a_streamed_run_is_labelled_as_one_with_read_compute_and_write_apart(tmp_path):
    rng = np.random.default_rng(5)
    trees = {n: {"w": rng.normal(size=(64, 64)).astype(np.float32)} for n in ("a", "b")}
    s = _files(tmp_path, trees)
    s.ops["weighted_sum"].param.update(trees=["a.safetensors", "b.safetensors"],
                                       weights=[0.5, 0.5])
    working_set.set_budget(1000)
    s.param.trigger("run")
    rr = s.result
    assert isinstance(rr, StreamedRun)
    assert rr.read_bytes == 2 * 64 * 64 * 4 and rr.bytes_written == 64 * 64 * 4
    parts = rr.read_seconds + rr.compute_seconds + rr.write_seconds + rr.compile_seconds
    assert rr.compute_seconds > 0 and rr.write_seconds >= 0
    assert parts == pytest.approx(rr.median_seconds, rel=1e-6) or parts >= rr.median_seconds
    lines = dict(timing_lines(rr))
    assert list(lines) == ["streamed", "total", "read", "compute", "write", "compile",
                           "end to end", "device"]
    assert lines["streamed"].startswith("into a file") and "kernels per run" not in lines
    assert "already in place" not in " ".join(lines.values())
    assert lines["read"].endswith("waiting for input leaves (32 KiB read)")
    assert "streamed into a file: read" in s.run_status
    # the timed repeats do not pretend: one pass, no repeats
    assert rr.times == (rr.median_seconds,)


def _fp8() -> dict:
    codes = np.zeros((256, 384), F8)
    codes[0, 0], codes[200, 300] = 2.0, -3.0
    return {"up": {"weight": codes,
                   "weight_scale_inv": np.array([[0.5, 1, 2], [4, 8, 16]], np.float32)},
            "norm": {"weight": np.ones(384, np.float32)}}


@pytest.mark.parametrize("op", ["weighted_sum", "stack", "merge", "dequantize"])
def test_a_run_plans_once_and_its_repeats_execute_that_plan(monkeypatch, op):
    s = InspectorState(repeats=5)
    s.load_defaults()
    s.add_tree("fp8", _fp8())
    s.ops["dequantize"].param.update(tree="fp8", dtype="float32")
    s.ops["weighted_sum"].param.update(trees=["t1", "t2", "t3"], weights=[1, 2, 3])
    s.ops["stack"].trees = ["mlp_0", "mlp_1"]
    s.ops["merge"].param.update(method="linear", trees=["mlp_0", "mlp_1"], weights=[1.0, 3.0])
    s.op = op
    plans = []
    as_op = runner.as_op

    def counted(fn):
        found = as_op(fn)

        def plan(*args, **kwargs):
            plans.append(found.name)
            return found.plan(*args, **kwargs)

        return inspector.Op(found.name, plan)

    monkeypatch.setattr(runner, "as_op", counted)
    s.param.trigger("run")  # one execution, then the 5 timed repeats (at once: not served)
    assert s.error == ""
    assert plans == [op] and len(s.result.times) == 5
    assert not any(x.is_deleted() for x in _leaves(s.result.result) if hasattr(x, "is_deleted"))
    job = s.job()
    assert isinstance(job, Job) and job.op == op and job.trees == tuple(s.settings.uses())
    assert job.settings is not s.settings  # the run keeps its own copy of the settings
    # the repeats wrote into the shown result: still readable, with the first run's values
    fn, args, kwargs = job.arguments([s.trees[n].tree for n in job.trees])
    expected = fn(*args, **kwargs)  # the library's own call
    got = s.result.result
    np.testing.assert_allclose(
        np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in _leaves(got)]),
        np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in _leaves(expected)]),
        rtol=1e-6)


def _leaves(tree) -> list:
    import jax

    if isinstance(tree, inspector.PackedTree):
        tree = tree.unpack()
    return jax.tree.leaves(tree)


def test_repeats_after_the_result_was_kept_never_write_into_the_kept_tree():
    s = InspectorState(repeats=1)  # the run alone: its repeats are made by hand below
    s.load_defaults()
    s.ops["weighted_sum"].param.update(trees=["t1", "t2", "t3"], weights=[1, 2, 3])
    s.param.trigger("run")
    first = s.result
    s.param.trigger("keep_result")
    kept = s.trees[s.selected].tree
    before = dict(kept.buffers)  # the kept tree's arrays, as a reader may hold them
    timed = s.runs.repeat(first, 3, s.runs._generation)
    assert len(timed.times) == 3
    assert kept.buffers == before and not any(b.is_deleted() for b in before.values())
    assert [np.asarray(x).tolist() for x in _leaves(kept)] == \
        [np.asarray(x).tolist() for x in _leaves(inspector.weighted_sum(
            [s.trees[n].tree for n in ("t1", "t2", "t3")], [1, 2, 3]))]
