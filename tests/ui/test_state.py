"""The session state, driven through its params as the views drive it (no browser)."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import jax
import numpy as np
import pytest

from inspector import examples
from inspector.ui.session.state import InspectorState
from inspector.ui.timing_card import timing_lines
from tests.helpers import tree_lists


def test_defaults_load_fast_and_set_up_the_scenarios():
    InspectorState().load_defaults()  # the first session builds the shared examples
    start = time.perf_counter()
    s = InspectorState()
    s.load_defaults()
    # Built once per process and shared (not rebuilt per session); the bound is loose on purpose
    # (a shared 2-core CI machine), the identity check is the real one.
    assert time.perf_counter() - start < 5.0
    first = InspectorState()
    first.load_defaults()
    assert all(first.trees[name] is s.trees[name] for name in ("t1", "params", "grads"))
    assert list(s.trees)[:3] == ["t1", "t2", "t3"]
    assert {"s2", "mlp_0", "mlp_3", "params", "grads"} <= set(s.trees)
    assert s.selected == "t1" and s.op == "weighted_sum"
    ws = s.ops["weighted_sum"]
    assert ws.trees == ["t1", "t2", "t3"] and ws.weights == [1, 2, 3]
    assert s.ops["stack"].trees == [f"mlp_{i}" for i in range(4)]
    assert s.ops["index"].texts["s2"] == {"[0]": "1", "[1]": "1:3", "[3]": "-1"}
    assert all(t.packed for t in s.trees.values())


def test_s1_weighted_sum_through_the_state(state):
    assert "int32 → int32" in state.preview and state.form_error == ""
    state.param.trigger("run")
    assert state.error == ""
    assert tree_lists(state.result.result) == examples.S1_EXPECTED
    assert state.result_name == "weighted_sum(t1, t2, t3)"
    assert len(state.history) == 1 and state.history[0].op == "weighted_sum"


def test_moving_a_weight_reruns_from_the_compiled_cache(state):
    state.param.trigger("run")
    state.ops["weighted_sum"].weights = [1, 2, 4]  # auto re-run: no Run press
    assert len(state.history) == 2
    assert state.result.n_compiled == 0
    assert ("compile", "cached, no compile") in timing_lines(state.result)
    assert tree_lists(state.result.result)[0][0] == [[33, 12], [25, 28]]


def test_float_weights_give_float32_and_the_preview_says_so_first(state):
    state.ops["weighted_sum"].weights = [0.5, 0.25, 0.25]
    assert "int32 → float32" in state.preview
    state.param.trigger("run")
    leaf = state.result.result.unpack()[0][0]
    assert leaf.dtype == np.float32
    np.testing.assert_allclose(leaf, [[2.75, 2.0], [3.25, 4.0]])  # t1/2 + t2/4 + t3/4


def test_an_sgd_step_of_1e_minus_7_is_exact_and_the_snippet_repeats_it():
    from inspector.ui.session.snippet import state_snippet
    from inspector.ui.session.state import InspectorState

    rng = np.random.default_rng(7)
    params = {"w": (rng.normal(size=(3, 50)) * 1e-6).astype(np.float32),
              "b": (rng.normal(size=50) * 1e-6).astype(np.float32)}
    grads = {"w": rng.normal(size=(3, 50)).astype(np.float32),
             "b": rng.normal(size=50).astype(np.float32)}
    s = InspectorState()
    s.add_tree("params", params)
    s.add_tree("grads", grads)
    s.ops["weighted_sum"].param.update(trees=["params", "grads"], weights=[1, -1e-7])
    s.op = "weighted_sum"
    assert "float32 → float32" in s.preview
    s.param.trigger("run")
    assert s.error == ""
    out = s.result.result.unpack()
    for key in ("w", "b"):
        ref = params[key].astype(np.float64) - 1e-7 * grads[key].astype(np.float64)
        got = np.asarray(out[key])
        assert got.dtype == np.float32
        # Within float32 rounding of each term (what the float32 computation can promise).
        bound = 2 * np.finfo(np.float32).eps * (np.abs(params[key]) + 1e-7 * np.abs(grads[key]))
        assert np.all(np.abs(got - ref) <= bound)
        assert np.abs(got - params[key]).min() > 0  # the step moved every value
    assert "inspector.weighted_sum([params, grads], [1, -1e-07])" in state_snippet(s)
    assert "-1e-07" in str(s.history[-1])


def test_integral_floats_stay_floats_and_typed_integers_stay_integers(state):
    assert "int32 → int32" in state.preview  # S1's weights, typed as integers: [1, 2, 3]
    state.ops["weighted_sum"].weights = [1.0, 2.0, 4.0]
    assert "int32 → float32" in state.preview
    state.param.trigger("run")
    assert state.result.result.unpack()[0][0].dtype == np.float32
    state.ops["weighted_sum"].weights = [1, 2, 5]
    assert "int32 → int32" in state.preview


def test_presets_make_the_mean_and_normalise(state):
    state.ops["weighted_sum"].param.trigger("uniform")
    assert state.ops["weighted_sum"].weights == pytest.approx([1 / 3] * 3)
    state.ops["weighted_sum"].weights = [1, 1, 2]
    state.ops["weighted_sum"].param.trigger("normalise")
    assert state.ops["weighted_sum"].weights == pytest.approx([0.25, 0.25, 0.5])


def test_s2_index_through_the_state(state):
    state.param.update(op="index", selected="s2")
    assert "[0] [1]: float32[4,3] → float32[3]" in state.preview
    state.param.trigger("run")
    assert state.error == ""
    assert tree_lists(state.result.result) == examples.S2_EXPECTED


def test_index_parse_error_is_shown_with_its_key_path_as_you_type(state):
    state.param.update(op="index", selected="s2")
    state.ops["index"].set_text("[1]", "1:(")
    assert set(state.field_errors) == {"[1]"}
    assert "Cannot parse index '1:('" in state.field_errors["[1]"]
    assert "[1]" in state.form_error
    state.param.trigger("run")
    assert state.error.startswith("Cannot parse 1 index.")
    assert "  - [1]: Cannot parse index '1:('" in state.error


def test_a_failing_op_keeps_the_trees_and_the_last_good_result(state):
    state.param.trigger("run")
    good, trees = state.result, dict(state.trees)
    state.param.update(op="index", selected="s2")
    state.ops["index"].set_text("[1]", "7")
    assert "[1]: index 7 is out of bounds" in state.form_error
    state.param.trigger("run")
    assert "[1]: index 7 is out of range for axis 0 of size 5" in state.error
    assert state.result is good and state.trees == trees and len(state.history) == 1
    state.ops["index"].set_text("[1]", "1:3")
    state.param.trigger("run")
    assert state.error == "" and state.result is not good


def test_stacking_mismatched_trees_names_every_differing_path(state):
    state.ops["stack"].trees = ["mlp_0", "t1"]
    state.op = "stack"
    assert "[0][0]: (3, 2) in tree 0, (2, 2) in tree 1" in state.form_error
    state.param.trigger("run")
    assert state.error.startswith("Cannot stack 2 trees:")
    for path in ("[0][0]", "[0][1]", "[1][0]", "[1][1]"):
        assert f"  - {path}:" in state.error
    assert "t1" in state.trees and state.result is None


def test_stack_keep_index_keep_weighted_sum_chain(state):
    state.op = "stack"
    assert "float32[3,2] → float32[4,3,2]" in state.preview
    state.param.trigger("run")
    state.param.trigger("keep_result")
    assert state.selected == "stack_1" and "stack_1" in state.trees
    assert state.trees["stack_1"].source == "result of stack(mlp_0, mlp_1, mlp_2, mlp_3)"

    state.op = "index"
    for field in ("[0]", "[1]"):
        state.ops["index"].set_text(field, "2")
    state.param.trigger("run")
    state.param.trigger("keep_result")
    assert state.selected == "index_2"

    state.ops["weighted_sum"].param.update(trees=["index_2", "mlp_2"], weights=[1, -1])
    state.op = "weighted_sum"
    state.param.trigger("run")
    assert state.error == ""
    leaves = jax.tree.leaves(state.result.result.unpack())
    assert all(np.all(np.asarray(x) == 0) for x in leaves)


def test_unstack_is_the_inverse_of_stack(state):
    state.op = "stack"
    state.param.trigger("run")
    state.param.trigger("keep_result")
    state.op = "unstack"
    assert "stack_1 → 4 trees" in state.preview
    state.param.trigger("run")
    state.param.trigger("keep_result")
    assert [n for n in state.trees if n.startswith("unstack_2")] == [
        f"unstack_2[{i}]" for i in range(4)]
    for i in range(4):
        np.testing.assert_array_equal(
            state.trees[f"unstack_2[{i}]"].tree.unpack()[1][0],
            state.trees[f"mlp_{i}"].tree.unpack()[1][0])


def test_unstacking_a_tree_without_a_common_leading_axis_is_refused(state):
    state.param.update(op="unstack", selected="params")
    assert "Cannot unstack the tree" in state.form_error
    assert "  - ['layer2']['weights']: shape (2, 8), leading size 2" in state.form_error


def test_eager_reference_is_timed_and_agrees(state):
    state.compare_eager = True
    state.param.trigger("run")
    assert state.eager_seconds > 0 and state.eager_max_diff == 0.0
    assert state.history[-1].eager_ms > 0
    assert any(k == "eager jax.tree.map" for k, _ in timing_lines(
        state.result, state.eager_seconds, state.eager_max_diff))


def test_setup_errors_do_not_run(state):
    state.ops["weighted_sum"].trees = ["t1"]
    state.param.trigger("run")
    assert state.error == "Pick two or more trees for a weighted sum."
    assert not state.busy and state.history == []


def test_loading_an_example_twice_renames_and_keeps_its_settings(state):
    state.example = "S1: weighted sum"
    state.param.trigger("load_example")
    assert {"t1 (2)", "t2 (2)", "t3 (2)"} <= set(state.trees)
    assert state.ops["weighted_sum"].trees == ["t1 (2)", "t2 (2)", "t3 (2)"]
    assert state.selected == "t1 (2)"


def test_removing_a_tree_drops_it_from_the_forms(state):
    state.selected = "t2"
    state.param.trigger("remove_tree")
    assert "t2" not in state.trees
    ws = state.ops["weighted_sum"]
    assert ws.trees == ["t1", "t3"] and ws.weights == [1, 3]


def test_selecting_a_tree_resets_its_view(state):
    state.tree_views["input"].path = "[0][0]"
    state.selected = "s2"
    view = state.tree_views["input"]
    assert view.path == "" and view.expanded[0] == "(root)"


def test_sessions_do_not_share_trees():
    a, b = InspectorState(), InspectorState()
    a.load_defaults()
    b.load_defaults()
    a.add_tree("mine", {"w": np.ones(3, np.float32)})
    assert "mine" in a.trees and "mine" not in b.trees


def test_background_runs_in_a_thread_and_leaves_the_loop_free():
    s = InspectorState(background=True)
    s.load_defaults()
    ticks, failures = [], []

    async def main():
        s.param.trigger("run")
        assert s.busy and s.status.startswith("Running weighted_sum")
        while s.busy:
            ticks.append(1)  # the loop keeps turning while the op runs
            await asyncio.sleep(0.001)

    def loop():  # a thread of its own: no other event loop around, as in a served session
        try:
            asyncio.run(main())
        except Exception as e:  # reported below, in the test's thread
            failures.append(e)

    thread = threading.Thread(target=loop)
    thread.start()
    thread.join(60)
    assert not failures and not thread.is_alive()
    assert s.error == "" and tree_lists(s.result.result) == examples.S1_EXPECTED
    assert ticks


def test_opening_a_checkpoint_keeps_its_leaves_lazy(state, tmp_path):
    import inspector

    path = tmp_path / "ckpt.npz"
    inspector.save({"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(3)}, path)
    state.file_root = str(tmp_path)
    state.open.open_paths = [str(path)]
    state.open.param.trigger("open_files")
    assert state.error == "" and state.selected == "ckpt.npz"
    loaded = state.trees["ckpt.npz"]
    assert not loaded.packed and loaded.n_leaves == 2 and loaded.source == "file ckpt.npz"
    assert any(isinstance(x, inspector.LazyArray) for x in jax.tree.leaves(loaded.tree))


def test_paths_outside_the_root_are_refused(state, tmp_path):
    (tmp_path / "inside").mkdir()
    state.file_root = str(tmp_path / "inside")
    state.open.open_paths = [str(tmp_path / "x.npz")]
    state.open.param.trigger("open_files")
    assert "outside the folder this app may open" in state.open.open_error
    assert state.error == ""  # an open failure is not an operation failure


def test_runs_show_once_then_time_their_repeats_on_the_working_set(tmp_path):
    import gc
    import weakref

    import numpy as np

    import inspector
    from inspector.core import working_set
    from inspector.ui.session.loaded import prepare
    from inspector.ui.session.state import InspectorState

    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        inspector.save({"w": rng.normal(size=(50, 40)).astype(np.float32),
                        "b": rng.normal(size=(40,)).astype(np.float32)},
                       tmp_path / f"{name}.safetensors")
    gc.collect()  # states of earlier tests that are garbage let go of what they held
    before = working_set.held_bytes()  # what live states of earlier tests still hold
    s = InspectorState(repeats=4)
    for name in ("a", "b"):
        s.add(prepare(name, inspector.load(tmp_path / f"{name}.safetensors"), "file"))
    s.ops["weighted_sum"].param.update(trees=["a", "b"], weights=[0.25, 0.75])
    shown = []
    s.param.watch(lambda e: e.new is not None and shown.append(len(e.new.times)), "result")
    s.param.trigger("run")
    assert shown == [1, 4]  # the result first (one execution), then its timed repeats
    # the first run read both files: the status says at what rate, apart from the kernel's
    assert re.fullmatch(r"weighted_sum finished in [0-9.]+ ms on cpu:0 \(run 1\) · read "
                        r"[0-9.e+-]+ GB/s, kernel [0-9.e+-]+ GB/s", s.run_status)
    assert s.result.read_bytes == 2 * (50 * 40 + 40) * 4  # each file's bytes, once
    assert sorted(h.name for h in s.held) == ["a", "b"]
    a, b = (inspector.load(tmp_path / f"{n}.safetensors") for n in ("a", "b"))
    want = 0.25 * np.asarray(a["w"], np.float64) + 0.75 * np.asarray(b["w"], np.float64)
    np.testing.assert_allclose(np.asarray(s.result.result.unpack()["w"]), want, atol=1e-6)
    buffers = [weakref.ref(x) for x in s.runs.working.get("a").buffers.values()]
    result = [weakref.ref(x) for x in s.result.result.buffers.values()]
    s.close()  # what the app calls when the browser session is destroyed
    gc.collect()
    assert all(r() is None for r in buffers + result)
    assert s.held == [] and s.trees == {} and s.result is None
    assert working_set.held_bytes() == before


def test_each_tree_view_keeps_its_own_expanded_nodes_selection_and_search(state):
    views = state.tree_views
    assert set(views) == {"input", "result", "diff"}
    views["input"].param.update(path="[0][0]", search="kernel")
    assert (views["result"].path, views["result"].search) == ("", "")
    assert (views["diff"].path, views["diff"].search) == ("", "")
    assert views["input"].expanded and views["result"].expanded == []
