"""`pytree-inspector timeline`: the per-step summary against NumPy float64; NaN -> exit 1."""

from __future__ import annotations

import numpy as np
import pytest


def test_timeline_per_step_summary(cli, run_dir):
    folder, steps = run_dir
    done = cli("timeline", ".", cwd=folder)
    assert done.returncode == 1, done.stderr  # the NaN of step 300
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["step", "leaves", "changed", "max", "rel_change", "where",
                                "nan/inf", "structure"]
    assert lines[1].split() == ["100", "2", "-", "-", "-", "0", "-"]
    assert lines[2].split() == ["200", "3", "1", "0.1", "['dense']['kernel']", "0", "1"]
    assert lines[3].split() == ["300", "3", "2", "inf", "['new']['x']", "2", "-"]
    assert "step 200: ['new']: appeared (dict of 1)" in lines
    assert "frozen at every step (1): ['frozen']['b']" in lines
    assert "first NaN/Inf: ['dense']['kernel'] at step 300" in lines
    records = cli("timeline", "ckpt_100.safetensors", "ckpt_200.safetensors",
                  "ckpt_300.safetensors", "--json", cwd=folder).records()
    by_type: dict = {}
    for r in records:
        by_type.setdefault(r["type"], []).append(r)
    a, b = (steps[s]["dense.kernel"].astype(np.float64) for s in (100, 200))
    step200 = by_type["step"][1]
    assert (step200["label"], step200["changed"], step200["max_rel_change_path"]) == (
        200, 1, "['dense']['kernel']")
    assert step200["max_rel_change"] == pytest.approx(np.linalg.norm(b - a)
                                                      / np.linalg.norm(a), rel=1e-6)
    assert step200["structure"] == [{"path": "['new']", "kind": "extra", "before": "None",
                                     "after": "dict of 1"}]
    assert by_type["step"][2]["nonfinite"] == 2
    assert by_type["step"][2]["max_rel_change"] == "inf"  # strict JSON has no Infinity
    assert by_type["frozen"] == [{"type": "frozen", "path": "['frozen']['b']"}]
    assert by_type["nonfinite"] == [{"type": "nonfinite", "path": "['dense']['kernel']",
                                     "first_label": 300}]
    assert by_type["summary"][0]["labels"] == [100, 200, 300]


def test_clean_timeline_exits_0_and_refusals_exit_2(cli, run_dir):
    folder, _ = run_dir
    done = cli("timeline", "ckpt_100.safetensors", "ckpt_200.safetensors", "-q", cwd=folder)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines()[-1].endswith("no NaN or Inf.")
    done = cli("timeline", "ckpt_100.safetensors", "nope.safetensors", cwd=folder)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert "nope.safetensors" in done.stderr and "does not exist" in done.stderr


def test_a_stray_numbered_file_is_left_out_and_named(cli, run_dir, tmp_path):
    import shutil

    folder, _ = run_dir
    mixed = tmp_path / "mixed"
    shutil.copytree(folder, mixed)
    shutil.copy(mixed / "ckpt_100.safetensors", mixed / "fp8.safetensors")
    done = cli("timeline", ".", cwd=mixed)
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines[1:4]] == ["100", "200", "300"]
    assert "left out (not named like the run's checkpoints): fp8.safetensors" in lines
    summary = cli("timeline", ".", "--json", cwd=mixed).records()[-1]
    assert summary["labels"] == [100, 200, 300]
    assert summary["left_out"] == ["fp8.safetensors"]  # as found under the folder given
