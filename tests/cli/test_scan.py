"""`pytree-inspector scan`: the table's figures against NumPy float64; NaN/Inf -> exit 1."""

from __future__ import annotations

import numpy as np
import pytest


def test_scan_table_of_a_clean_file_exits_0(cli, run_dir):
    folder, _ = run_dir
    done = cli("scan", "ckpt_200.safetensors", cwd=folder)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["path", "dtype", "shape", "nan", "inf", "min", "max", "mean",
                                "std", "l2", "max_abs", "zeros"]
    assert [line.split()[0] for line in lines[1:4]] == ["['dense']['kernel']",
                                                         "['frozen']['b']", "['new']['x']"]
    assert lines[2].split() == ["['frozen']['b']", "float32", "3", "0", "0", "1", "1", "1",
                                "0", "1.732", "1", "0"]
    assert lines[-1].startswith("3 leaves (17 params) scanned in ")
    assert lines[-1].endswith(": no NaN or Inf.")


def test_scan_planted_nan_exits_1_names_the_path_figures_against_numpy(cli, run_dir):
    folder, steps = run_dir
    done = cli("scan", "ckpt_300.safetensors", "--nonfinite", cwd=folder)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert len(lines) == 3  # header, the one leaf, the summary
    assert lines[1].split()[:5] == ["['dense']['kernel']", "float32", "4x3", "1", "1"]
    assert lines[-1].endswith(": 1 with NaN/Inf (1 NaN, 1 Inf): ['dense']['kernel'].")
    done = cli("scan", "ckpt_300.safetensors", "--json", cwd=folder)
    assert done.returncode == 1
    records = done.records()
    assert [r["type"] for r in records] == ["leaf", "leaf", "leaf", "summary"]
    x = steps[300]["dense.kernel"].astype(np.float64)
    finite = x[np.isfinite(x)]  # the figures are over the finite elements
    leaf = records[0]
    assert (leaf["path"], leaf["shape"], leaf["zeros"]) == ("['dense']['kernel']", [4, 3], 0)
    assert (leaf["nan"], leaf["posinf"], leaf["neginf"]) == (1, 0, 1)
    assert leaf["min"] == finite.min() and leaf["max"] == finite.max()
    assert leaf["max_abs"] == np.abs(finite).max()
    np.testing.assert_allclose([leaf["mean"], leaf["std"], leaf["l2"]],
                               [finite.mean(), finite.std(), np.linalg.norm(finite)], rtol=1e-6)
    ones = records[1]
    assert (ones["path"], ones["min"], ones["std"], ones["nan"]) == ("['frozen']['b']", 1, 0, 0)
    assert ones["l2"] == pytest.approx(np.sqrt(3), rel=1e-7)
    assert records[-1]["nonfinite_leaves"] == ["['dense']['kernel']"]
    assert (records[-1]["nan"], records[-1]["inf"], records[-1]["params"]) == (1, 1, 17)


def test_scan_refusal_exits_2_with_the_message(cli, run_dir):
    folder, _ = run_dir
    done = cli("scan", "nope.safetensors", cwd=folder)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.startswith("pytree-inspector: Cannot load nope.safetensors: the path "
                                  "does not exist.")


def test_colour_marks_the_nonfinite_rows(run_dir, monkeypatch, capsys):
    from inspector import cli
    from inspector.cli import output

    folder, _ = run_dir
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(output, "use_colour", lambda stream: True)  # as on a terminal
    assert cli.main(["scan", folder / "ckpt_300.safetensors", "-q"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("\x1b[1mpath ")
    assert lines[1].startswith("\x1b[31m['dense']['kernel']") and lines[1].endswith("\x1b[0m")
    assert lines[2].startswith("['frozen']['b']")  # finite: as is
