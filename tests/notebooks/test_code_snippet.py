"""'Copy as code': the last run as a public-API snippet that gives the app's result when run."""

from __future__ import annotations

import collections

import jax
import numpy as np
import pytest

import inspector
from inspector import examples
from inspector.ui.code_snippet import CodeSnippetView
from inspector.ui.notebook import Inspector
from inspector.ui.session.origins import CommandLine, File, Upload
from inspector.ui.session.records import CallRecord
from inspector.ui.session.snippet import literal, snippet, state_snippet, variable
from inspector.ui.session.state import InspectorState
from tests.helpers import tree_lists


def _run_snippet(code: str, **names):
    namespace = dict(names)
    exec(compile(code, "<snippet>", "exec"), namespace)  # noqa: S102 - the test's own snippet
    return namespace["result"]


def test_each_op_reads_as_its_public_call():
    s1 = CallRecord("weighted_sum", "", ["t1", "t2", "t3"], {"weights": [1, 2, 3]},
                    device="cpu:0", repeats=5)
    assert snippet(s1).splitlines() == [
        "import inspector", "",
        "result = inspector.weighted_sum([t1, t2, t3], [1, 2, 3])",
        "# timed as in the app:",
        '# inspector.run(inspector.weighted_sum, [t1, t2, t3], [1, 2, 3], device="cpu:0", '
        "repeats=5)"]
    index = CallRecord("index", "", ["s2"], {"index": ["1", "1:3", None, "-1"]})
    assert snippet(index).splitlines()[-1] == \
        'result = inspector.index(s2, [1, "1:3", None, -1])'
    assert snippet(CallRecord("stack", "", ["a", "b"])).endswith(
        "result = inspector.stack([a, b])")
    assert snippet(CallRecord("unstack", "", ["ab"])).endswith("result = inspector.unstack(ab)")


def test_trees_from_files_are_loaded_by_name():
    call = CallRecord("stack", "", ["a.npz", "b.npz", "c"])
    sources = {"a.npz": Upload("a.npz"), "b.npz": CommandLine(), "c": File("c.safetensors")}
    assert snippet(call, sources).splitlines()[2:] == [
        'a_npz = inspector.load("a.npz")  # uploaded',
        'b_npz = inspector.load("b.npz")',
        'c = inspector.load("c.safetensors")',
        "result = inspector.stack([a_npz, b_npz, c])"]


def test_names_and_index_literals():
    assert [variable(n) for n in ("t1", "ckpt.npz", "unstack_1[0]", "2x", "class")] == \
        ["t1", "ckpt_npz", "unstack_1_0", "t_2x", "t_class"]
    assert literal({"a": "0", "b": (None, "::2")}) == '{"a": 0, "b": (None, "::2")}'
    assert literal(("1",)) == "(1,)"


@pytest.fixture
def served():
    """A session as the served app opens it: the default examples loaded."""
    s = InspectorState()
    s.load_defaults()
    return s


def test_in_the_served_app_trees_come_from_the_example_builders(served):
    served.param.trigger("run")
    code = state_snippet(served)
    assert 't1, t2, t3 = (examples.load("S1: weighted sum")[k] for k in ("t1", "t2", "t3"))' \
        in code
    assert (tree_lists(_run_snippet(code)) == tree_lists(served.result.result)
            == examples.S1_EXPECTED)


@pytest.mark.parametrize("op", ["index", "stack", "sgd"])
def test_every_op_of_the_served_app_runs_as_code_to_the_same_values(served, op):
    if op == "index":
        served.param.update(op="index", selected="s2")
    elif op == "stack":
        served.op = "stack"
    else:
        served.ops["weighted_sum"].param.update(trees=["params", "grads"], weights=[1, -0.1])
        served.op = "weighted_sum"
    served.param.trigger("run")
    assert served.error == ""
    expected = tree_lists(served.result.result)
    got = tree_lists(_run_snippet(state_snippet(served)))
    if op == "sgd":  # float32: the app's packed kernel and the leaf-wise call may round apart
        np.testing.assert_allclose(jax.tree.leaves(got), jax.tree.leaves(expected), rtol=1e-6)
    else:
        assert got == expected


def test_kept_results_are_rebuilt_from_the_run_that_made_them(served):
    served.op = "stack"
    served.param.trigger("run")
    served.param.trigger("keep_result")
    served.param.update(op="unstack", selected="stack_1")
    served.param.trigger("run")
    served.param.trigger("keep_result")  # unstack_2[0] ... unstack_2[3]
    served.ops["weighted_sum"].param.update(trees=["unstack_2[0]", "unstack_2[3]"],
                                            weights=[0.5, 0.5])
    served.op = "weighted_sum"
    served.param.trigger("run")
    code = state_snippet(served)
    assert "stack_1 = inspector.stack([mlp_0, mlp_1, mlp_2, mlp_3])" in code
    assert "unstack_2_0 = inspector.unstack(stack_1)[0]" in code
    np.testing.assert_allclose(jax.tree.leaves(tree_lists(_run_snippet(code))),
                               jax.tree.leaves(tree_lists(served.result.result)), rtol=1e-6)


def test_checkpoint_files_are_loaded_by_path(served, tmp_path, monkeypatch):
    inspector.save(examples.mlp_params(), tmp_path / "ckpt.npz")
    served.file_root = str(tmp_path)
    served.open.open_paths = [str(tmp_path / "ckpt.npz")]
    served.open.param.trigger("open_files")
    served.ops["weighted_sum"].param.update(trees=["ckpt.npz", "params"], weights=[1, -1])
    served.op = "weighted_sum"
    served.param.trigger("run")
    code = state_snippet(served)
    assert 'ckpt_npz = inspector.load("ckpt.npz")' in code
    monkeypatch.chdir(tmp_path)
    assert np.abs(jax.tree.leaves(tree_lists(_run_snippet(code)))).max() == 0


def test_in_a_notebook_the_users_names_are_used_and_the_snippet_gives_the_result():
    t1, t2, t3 = examples.s1_trees()
    widget = Inspector(t1=t1, t2=t2, t3=t3)
    widget.state.ops["weighted_sum"].weights = [1, 2, 3]
    widget.run()
    code = widget.app.result.code.code
    assert "import inspector\n\nresult = inspector.weighted_sum([t1, t2, t3], [1, 2, 3])" in code
    assert tree_lists(_run_snippet(code, t1=t1, t2=t2, t3=t3)) == examples.S1_EXPECTED


def test_custom_containers_are_indexed_through_their_structure():
    Pair = collections.namedtuple("Pair", "a b")
    tree = Pair(np.arange(6.0).reshape(3, 2), np.arange(4.0))
    widget = Inspector(pair=tree)
    widget.state.op = "index"
    widget.state.ops["index"].set_text(".a", "-1")
    widget.run()
    code = widget.app.result.code.code
    assert "jax.tree.unflatten(jax.tree.structure(pair" in code and code.startswith("import jax")
    assert tree_lists(_run_snippet(code, pair=tree)) == tree_lists(widget.state.result.result)


def test_the_view_shows_the_code_once_there_is_a_run():
    widget = Inspector(a=[1.0, 2.0], b=[3.0, 4.0])
    view = widget.app.result.code
    assert isinstance(view, CodeSnippetView) and not view._layout.visible and view.code == ""
    widget.run()
    assert view._layout.visible and "inspector.weighted_sum([a, b], [0.5, 0.5])" in view.code
