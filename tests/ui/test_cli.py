"""The launcher: `pytree-inspector CKPT...` / `python -m inspector CKPT...`."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

import inspector
from inspector import cli
from inspector.ui import app


def test_a_bad_file_exits_2_naming_it_without_a_traceback(tmp_path):
    (tmp_path / "bad.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    inspector.save({"w": np.ones(2)}, tmp_path / "good.npz")
    done = subprocess.run([sys.executable, "-m", "inspector", "good.npz", "bad.safetensors",
                           "--no-show"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("pytree-inspector: Cannot load bad.safetensors: ")
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_a_missing_file_and_a_bad_root_exit_2(tmp_path, capsys):
    assert cli.main([str(tmp_path / "nope.npz"), "--no-show"]) == 2
    err = capsys.readouterr().err
    assert f"Cannot load {tmp_path / 'nope.npz'}: the path does not exist." in err
    assert cli.main(["--root", str(tmp_path / "nowhere"), "--no-show"]) == 2
    assert f"--root {tmp_path / 'nowhere'}: not a folder" in capsys.readouterr().err


def test_arguments_and_names(tmp_path):
    args = cli.parse_args(["a.safetensors", "b.npz", "--port", "5010", "--no-show"])
    assert [str(p) for p in args.paths] == ["a.safetensors", "b.npz"]
    assert (args.port, args.show, args.address, args.examples) == (5010, False, "127.0.0.1",
                                                                   None)
    assert cli.parse_args([]).show and cli.parse_args(["--examples"]).examples
    inspector.save({"w": np.ones(2)}, tmp_path / "m.npz")
    (tmp_path / "sub").mkdir()
    inspector.save({"w": np.ones(3)}, tmp_path / "sub" / "m.npz")
    trees = cli.load_all([tmp_path / "m.npz", tmp_path / "sub" / "m.npz"])
    assert list(trees) == ["m.npz", "m.npz'"]  # same file name twice: told apart


def test_main_serves_the_loaded_trees_with_the_root(tmp_path, monkeypatch, capsys):
    inspector.save({"w": np.ones(2)}, tmp_path / "m.npz")
    calls = {}

    def fake_serve(trees, **kwargs):
        calls.update(trees=trees, **kwargs)
        kwargs["started"]("http://127.0.0.1:1234/inspector")

    monkeypatch.setattr(app, "serve", fake_serve)
    assert cli.main([str(tmp_path / "m.npz"), "--root", str(tmp_path), "--no-show"]) == 0
    assert list(calls["trees"]) == ["m.npz"] and calls["root"] == tmp_path.resolve()
    assert calls["infos"]["m.npz"] == inspector.file_info(tmp_path / "m.npz")  # shown above
    assert calls["show"] is False and calls["examples"] is False and calls["port"] == 0
    assert "serving 1 checkpoint(s) at http://127.0.0.1:1234/inspector" in \
        capsys.readouterr().out


def test_a_wider_address_needs_explicit_origins_and_warns(tmp_path, monkeypatch, capsys):
    calls = {}

    def fake_serve(trees, **kwargs):
        calls.update(kwargs)

    monkeypatch.setattr(app, "serve", fake_serve)
    assert cli.main(["--address", "0.0.0.0", "--no-show", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pytree-inspector: --address 0.0.0.0 serves the app beyond this "
                          "machine; name the host(s) whose pages may use it with "
                          "--allow-websocket-origin HOST[:PORT]")
    assert calls == {}  # nothing served
    assert cli.main(["--address", "0.0.0.0", "--allow-websocket-origin", "lab.example:5006",
                     "--no-show", "--root", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "warning: serving on 0.0.0.0: anyone who can reach this machine can open the app" in err
    assert calls["address"] == "0.0.0.0" and calls["origins"] == ["lab.example:5006"]
    assert cli.main(["--no-show", "--root", str(tmp_path)]) == 0  # the default: no warning
    assert capsys.readouterr().err == ""
    assert calls["address"] == "127.0.0.1" and calls["origins"] is None


def _launched_page(tmp_path, monkeypatch, files: dict):
    """The page one session of `pytree-inspector FILE...` shows: the launcher's own loading,
    then the page `serve` builds for each session (no server started)."""
    for name, tree in files.items():
        inspector.save(tree, tmp_path / name)
    calls = {}
    monkeypatch.setattr(app, "serve", lambda trees, **kwargs: calls.update(trees=trees))
    assert cli.main([str(tmp_path / name) for name in files] + ["--no-show"]) == 0
    from inspector.ui.session.loaded import prepare

    prepared = [prepare(n, t, "command line") for n, t in calls["trees"].items()]
    return app.create_app(background=False, defaults=False, trees=prepared, root=tmp_path)


def _layer(seed: int, width: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((width, 2)).astype(np.float32), "b": np.zeros(2, np.float32)}


def test_checkpoints_of_one_structure_open_on_their_weighted_sum(tmp_path, monkeypatch):
    files = {f"m{i}.safetensors": _layer(i) for i in range(3)}
    page = _launched_page(tmp_path, monkeypatch, files)
    state, tabs = page.inspector.state, page.inspector.tabs
    assert tabs.active == 0 and state.op == "weighted_sum" and state.selected == "m0.safetensors"
    assert state.ops["weighted_sum"].trees == list(files)
    assert state.ops["weighted_sum"].weights == [1 / 3] * 3
    state.param.trigger("run")
    mean = sum(np.float64(t["w"]) for t in files.values()) / 3
    result = state.result.result
    result = result.unpack() if isinstance(result, inspector.PackedTree) else result
    np.testing.assert_allclose(np.asarray(result["w"]), mean, rtol=1e-6)


def test_checkpoints_of_different_structures_open_on_their_comparison(tmp_path, monkeypatch):
    files = {"small.safetensors": _layer(0), "wide.safetensors": _layer(1, width=5)}
    page = _launched_page(tmp_path, monkeypatch, files)
    view, state = page.inspector, page.inspector.state
    assert view.tabs.active == 1 and len(view.tabs[1]) == 1  # the Compare tab, drawn
    assert (state.compare.diff_a, state.compare.diff_b) == ("small.safetensors", "wide.safetensors")
    assert "wide.safetensors" not in state.ops["weighted_sum"].trees
    assert state.error == "" and "Cannot" not in state.form_error  # was "Cannot take a
    # weighted sum ... 2 differences" in red: the form now holds no trees of another structure
    assert [(d.path, d.kind) for d in state.compare.diff_result.differences] == [("['w']", "shape")]


def test_one_checkpoint_opens_on_its_tree(tmp_path, monkeypatch):
    page = _launched_page(tmp_path, monkeypatch, {"only.npz": _layer(0)})
    state = page.inspector.state
    assert page.inspector.tabs.active == 0 and state.selected == "only.npz"
    assert state.ops["weighted_sum"].trees == [] and state.error == ""


def test_a_model_folder_opens_its_model_file_named_after_the_folder(tmp_path, monkeypatch):
    folder = tmp_path / "Llama-FP8"
    folder.mkdir()
    inspector.save({"w": np.ones(2, np.float32)}, folder / "model.safetensors")
    calls = {}
    monkeypatch.setattr(app, "serve", lambda trees, **kwargs: calls.update(trees=trees, **kwargs))
    assert cli.main([str(folder), "--root", str(tmp_path), "--no-show"]) == 0  # as `show` does
    assert list(calls["trees"]) == ["Llama-FP8"]
    assert np.asarray(calls["trees"]["Llama-FP8"]["w"]).tolist() == [1.0, 1.0]
    assert calls["infos"]["Llama-FP8"].format == "safetensors"
