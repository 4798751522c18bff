"""Where each tree came from is a record (`origins.py`) that copy-as-code reads: every kind of
tree (a file, a sharded checkpoint's index, a URL, a tree sharded over a mesh, a kept result)
gives code that runs, with no `...` placeholder, and gives the app's values."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
import safetensors.numpy as stn

import inspector
from inspector.ui.session.origins import File, Result, Sharded, Url
from inspector.ui.session.snippet import state_snippet
from inspector.ui.session.state import InspectorState
from tests.io.servers import RangeServer

A = {"w": np.arange(12, dtype=np.float32).reshape(4, 3), "b": np.float32([1, -2, 3])}
B = {"w": np.full((4, 3), 0.5, np.float32), "b": np.float32([4, 5, 6])}


def _exec(code: str):
    assert "..." not in code, code
    namespace: dict = {}
    exec(compile(code, "<snippet>", "exec"), namespace)  # noqa: S102 - the app's own snippet
    return namespace["result"]


def _flat(tree) -> np.ndarray:
    if isinstance(tree, inspector.PackedTree):
        tree = tree.unpack()
    return np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree.leaves(tree)])


def _run_sum(s: InspectorState, names: list[str], weights: list[float]):
    s.ops["weighted_sum"].param.update(trees=names, weights=weights)
    s.op = "weighted_sum"
    s.param.trigger("run")
    assert s.error == ""
    return state_snippet(s)


@pytest.fixture
def opened(tmp_path, monkeypatch):
    """A session with a.safetensors and a sharded checkpoint (an index over two shards)."""
    stn.save_file(A, str(tmp_path / "a.safetensors"))
    stn.save_file({"w": B["w"]}, str(tmp_path / "m-1.safetensors"))
    stn.save_file({"b": B["b"]}, str(tmp_path / "m-2.safetensors"))
    (tmp_path / "m.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"w": "m-1.safetensors", "b": "m-2.safetensors"}}))
    s = InspectorState(file_root=str(tmp_path))
    s.open.open_paths = [str(tmp_path / "a.safetensors"),
                         str(tmp_path / "m.safetensors.index.json")]
    s.open.param.trigger("open_files")
    assert s.open.open_error == ""
    monkeypatch.chdir(tmp_path)  # the code loads paths relative to the app's root folder
    return s


def test_a_file_and_a_sharded_checkpoint_index_are_loaded_by_path(opened):
    assert opened.trees["a.safetensors"].origin == File("a.safetensors", root=True)
    assert opened.trees["a.safetensors"].source == "file a.safetensors"
    code = _run_sum(opened, ["a.safetensors", "m.safetensors.index.json"], [2.0, -1.0])
    assert 'm_safetensors_index_json = inspector.load("m.safetensors.index.json")' in code
    expected = {k: 2.0 * A[k].astype(np.float64) - B[k] for k in A}
    got = _exec(code)
    for key in A:
        np.testing.assert_allclose(np.asarray(got[key], np.float64), expected[key], rtol=1e-6)
    np.testing.assert_array_equal(_flat(got), _flat(opened.result.result))


def test_a_kept_result_is_its_run_and_a_tree_sharded_over_a_mesh_is_its_shard_call(opened):
    opened.ops["stack"].trees = ["a.safetensors", "m.safetensors.index.json"]
    opened.op = "stack"
    opened.param.trigger("run")
    opened.param.trigger("keep_result")
    kept = opened.trees["stack_1"].origin
    assert isinstance(kept, Result) and kept.call.op == "stack" and kept.part is None
    opened.param.update(op="unstack", selected="stack_1")
    opened.param.trigger("run")
    opened.param.trigger("keep_result")  # unstack_2[0], unstack_2[1]
    assert opened.trees["unstack_2[1]"].origin.part == 1
    n = len(jax.devices())
    opened.selected = "unstack_2[1]"
    opened.mesh.axes = f"data={n}"
    opened.mesh.set_spec("['b']", "data" if 3 % n == 0 else "")
    opened.mesh.param.trigger("shard")
    assert opened.error == ""
    sharded = opened.selected
    origin = opened.trees[sharded].origin
    assert isinstance(origin, Sharded) and origin.tree == "unstack_2[1]"
    code = _run_sum(opened, [sharded, "unstack_2[0]"], [1.0, 1.0])
    assert "stack_1 = inspector.stack([a_safetensors, m_safetensors_index_json])" in code
    assert "unstack_2_1 = inspector.unstack(stack_1)[1]" in code
    assert f"= inspector.shard(unstack_2_1, inspector.mesh({{\"data\": {n}}}), " in code
    got = _exec(code)
    np.testing.assert_allclose(_flat(got), _flat({k: A[k].astype(np.float64) + B[k]
                                                  for k in A}), rtol=1e-6)


def test_a_tree_opened_from_a_url_is_loaded_from_it(tmp_path):
    folder = tmp_path / "served"
    folder.mkdir()
    inspector.save(A, folder / "a.safetensors")
    inspector.save(B, folder / "b.safetensors")
    with RangeServer(folder) as server:
        s = InspectorState()
        s.open.remote_prefixes = []  # any URL
        for name in ("a", "b"):
            s.open.open_url_text = f"{server.url}/{name}.safetensors"
            s.open.param.trigger("open_url")
            assert s.open.open_error == ""
        names = list(s.trees)[-2:]
        assert s.trees[names[0]].origin == Url(f"{server.url}/a.safetensors")
        code = _run_sum(s, names, [1.0, 3.0])
        assert f'a_safetensors = inspector.load("{server.url}/a.safetensors")' in code
        got = _exec(code)
    np.testing.assert_allclose(_flat(got), _flat({k: A[k].astype(np.float64) + 3 * B[k]
                                                  for k in A}), rtol=1e-6)


def test_each_origin_reads_in_the_sidebar_as_before():
    from inspector.ui.session.origins import (
        CommandLine,
        Converted,
        Example,
        Origin,
        Upload,
        origin_of,
    )
    from inspector.ui.session.records import CallRecord

    call = CallRecord("stack", "stack(a, b)", ["a", "b"])
    assert [o.text for o in (
        File("sub/m.npz", root=True), Url("https://host/m.safetensors"), Upload("m.npz"),
        Example("S1: weighted sum", "t1"), Sharded("t1", {"data": 2, "model": 1}, "data"),
        Result(call), Result(call, 1), Converted("a", "b", "{}"), CommandLine("x.npz"),
        origin_of("added"))] == [
        "file sub/m.npz", "url https://host/m.safetensors", "upload m.npz", "example S1",
        "t1 sharded over data=2, model=1", "result of stack(a, b)", "result of stack(a, b)[1]",
        "a converted onto b", "command line", "added"]
    assert origin_of("command line") == CommandLine() and origin_of(Origin()) == Origin()
