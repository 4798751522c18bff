"""The command line's front: subcommands, the bare launcher, help, and what goes where."""

from __future__ import annotations

import io

import numpy as np

import inspector
from inspector import cli
from inspector.cli.output import Output, Progress, use_colour
from inspector.ui import app


def test_help_lists_the_subcommands(cli):
    done = cli("--help")
    assert done.returncode == 0
    for name in ("show", "diff", "merge", "serve"):
        assert f"    {name} " in done.stdout
    done = cli("show", "--help")
    assert done.returncode == 0 and "--depth N" in done.stdout and "--json" in done.stdout


def test_serve_is_the_default_and_can_be_named(tmp_path, monkeypatch, capsys):
    inspector.save({"w": np.ones(2)}, tmp_path / "m.npz")
    calls = []
    monkeypatch.setattr(app, "serve", lambda trees, **kw: calls.append((list(trees), kw)))
    assert cli.main([tmp_path / "m.npz", "--no-show", "--root", tmp_path]) == 0
    assert cli.main(["serve", tmp_path / "m.npz", "--no-show", "--root", tmp_path]) == 0
    assert [c[0] for c in calls] == [["m.npz"], ["m.npz"]]
    assert calls[0][1]["root"] == calls[1][1]["root"] == tmp_path.resolve()


def test_a_checkpoint_named_like_a_subcommand(tmp_path, monkeypatch, capsys):
    # The subcommand wins (a script's meaning never depends on the folder it runs in); the
    # user is told how to open the checkpoint instead.
    monkeypatch.chdir(tmp_path)
    inspector.save({"w": np.ones(2, np.float32)}, tmp_path / "x.safetensors")
    (tmp_path / "show").mkdir()
    assert cli.main(["show", "x.safetensors", "--depth", "0"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[1] == "(root) dict of 1 · 1 leaf · 2 params · 8 B"
    assert captured.err == ("pytree-inspector: note: 'show' is read as the subcommand; to open "
                            "the checkpoint of that name, write ./show or `pytree-inspector "
                            "serve show`.\n")
    calls = []
    monkeypatch.setattr(app, "serve", lambda trees, **kw: calls.append(list(trees)))
    assert cli.main(["./show", "--no-show"]) == 2  # a path: served (here: not a checkpoint)
    assert "Cannot load show" in capsys.readouterr().err and calls == []


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(Tty()) and not use_colour(io.StringIO())
    assert Output(stdout=Tty()).paint("x", "red") == "\x1b[31mx\x1b[0m"
    assert Output(as_json=True, stdout=Tty()).paint("x", "red") == "x"
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(Tty()) and Output(stdout=Tty()).paint("x", "red") == "x"


def test_progress_waits_a_second_then_draws_a_bar_or_prints_lines():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    now = [0.0]
    tty = Tty()
    bar = Progress("merging", tty, clock=lambda: now[0])
    bar(1, 4)
    assert tty.getvalue() == ""  # under a second: nothing
    now[0] = 1.5
    bar(2, 4, "1 MiB/s")
    assert tty.getvalue() == "\r\x1b[K[############------------] merging: 2/4 (50%) · 1 MiB/s"
    bar.close()
    assert tty.getvalue().endswith("\r\x1b[K")

    pipe = io.StringIO()
    lines = Progress("merging", pipe, clock=lambda: now[0])
    now[0] = 3.0
    lines(1, 4)
    now[0] = 4.0
    lines(3, 4)  # within 5 s of the last line: not printed
    lines.close()  # the last state, once
    assert pipe.getvalue() == ("pytree-inspector: merging: 1/4 (25%)\n"
                               "pytree-inspector: merging: 3/4 (75%)\n")
    quiet = io.StringIO()
    silent = Progress("merging", quiet, enabled=False, clock=lambda: now[0])
    now[0] = 10.0
    silent(1, 2)
    silent.close()
    assert quiet.getvalue() == ""
