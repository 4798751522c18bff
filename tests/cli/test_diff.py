"""`pytree-inspector diff`: every difference with its key path; exit 1 when any."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    rng = np.random.default_rng(0)
    a = {"enc.w": rng.standard_normal((16, 8)).astype(np.float32),
         "enc.b": np.zeros(8, np.float32),
         "head.w": rng.standard_normal((8, 4)).astype(np.float32),
         "old": np.ones(3, np.float32)}
    b = dict(a)
    b["enc.w"] = a["enc.w"].copy()
    b["enc.w"][3, 2] += 0.5
    b["enc.w"][7, 1] -= 2e-3
    b["head.w"] = a["head.w"].astype(np.float16)
    b["enc.b"] = np.zeros(9, np.float32)
    del b["old"]
    b["new"] = np.ones(2, np.float32)
    folder = tmp_path_factory.mktemp("diff")
    save_file(a, str(folder / "a.safetensors"))
    save_file(b, str(folder / "b.safetensors"))
    return folder, a, b


def test_structural_differences_exit_1_each_with_its_key_path(cli, pair):
    folder, _, _ = pair
    done = cli("diff", "a.safetensors", "b.safetensors", cwd=folder)
    assert done.returncode == 1 and done.stderr == ""
    assert done.stdout.splitlines() == [
        "['enc']['b']: shape (8,) vs (9,)",
        "['head']['w']: dtype float32 vs float16",
        "['old']: missing from the second tree (first has float32[3])",
        "['new']: only in the second tree (float32[2])",
        "4 difference(s) (1 shape, 1 dtype, 1 missing, 1 extra).",
    ]
    records = cli("diff", "a.safetensors", "b.safetensors", "--json", cwd=folder).records()
    assert records[0] == {"type": "difference", "path": "['enc']['b']", "kind": "shape",
                          "a": [8], "b": [9]}
    assert records[-1]["type"] == "summary" and records[-1]["differences"] == 4
    assert records[-1]["kinds"] == {"shape": 1, "dtype": 1, "missing": 1, "extra": 1}


def test_equal_files_exit_0(cli, pair):
    folder, _, _ = pair
    done = cli("diff", "a.safetensors", "a.safetensors", cwd=folder)
    assert (done.returncode, done.stdout) == (0, "No differences: the structure agrees.\n")
    done = cli("diff", "a.safetensors", "a.safetensors", "--values", "--json", cwd=folder)
    assert done.returncode == 0
    assert done.records() == [{"type": "summary", "differences": 0, "kinds": {},
                               "a": "a.safetensors", "b": "a.safetensors", "values": True}]


def test_values_give_the_figures_of_each_changed_leaf(cli, pair):
    folder, a, b = pair
    done = cli("diff", "a.safetensors", "b.safetensors", "--values", "--rtol", "1e-2",
               "--atol", "0", "--json", cwd=folder)
    assert done.returncode == 1
    values = [r for r in done.records() if r.get("kind") == "value"]
    assert [r["path"] for r in values] == ["['enc']['w']", "['head']['w']"]  # float16 rounds
    head = a["head.w"].astype(np.float64) - b["head.w"].astype(np.float64)
    np.testing.assert_allclose(values[1]["max_abs"], np.abs(head).max(), rtol=1e-6)
    x, y = a["enc.w"].astype(np.float64), b["enc.w"].astype(np.float64)
    d = x - y
    got = values[0]
    np.testing.assert_allclose(got["max_abs"], np.abs(d).max(), rtol=1e-6)
    np.testing.assert_allclose(got["rel_l2"], np.linalg.norm(d) / np.linalg.norm(x), rtol=1e-5)
    np.testing.assert_allclose(got["cosine"], x.ravel() @ y.ravel()
                               / np.linalg.norm(x) / np.linalg.norm(y), rtol=1e-6)
    changed = np.abs(d) > 0 + 1e-2 * np.abs(y)
    assert got["frac_changed"] == pytest.approx(changed.mean())
    text = cli("diff", "a.safetensors", "b.safetensors", "--values", cwd=folder).stdout
    assert "['enc']['w']: values differ, max |a-b| = 0.5, rel L2 = " in text


def test_refusals_exit_2_with_the_message(cli, pair):
    folder, _, _ = pair
    done = cli("diff", "a.safetensors", "nope.safetensors", cwd=folder)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("pytree-inspector: Cannot load nope.safetensors: the path "
                                  "does not exist.")
    assert "Traceback" not in done.stderr
    done = cli("diff", "a.safetensors", "b.safetensors", "--rtol", "0.1", cwd=folder)
    assert done.returncode == 2
    assert done.stderr == ("pytree-inspector: --rtol and --atol apply to value differences: "
                           "add --values.\n")
    done = cli("diff", "a.safetensors", cwd=folder)
    assert done.returncode == 2 and "the following arguments are required: b" in done.stderr


def test_colour_marks_the_path_and_the_kind(pair, monkeypatch, capsys):
    from inspector import cli
    from inspector.cli import output

    folder, _, _ = pair
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(output, "use_colour", lambda stream: True)  # as on a terminal
    assert cli.main(["diff", folder / "a.safetensors", folder / "b.safetensors"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "\x1b[1m['enc']['b']\x1b[0m: \x1b[33mshape (8,) vs (9,)\x1b[0m"
    assert lines[2] == ("\x1b[1m['old']\x1b[0m: \x1b[31mmissing from the second tree (first "
                        "has float32[3])\x1b[0m")
