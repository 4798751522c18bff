"""A session's first weighted sum on two safetensors checkpoints reads their float32 groups
where they lie in the files (`mapped_groups.py`); the working set then holds packed copies,
and later runs, a weight change included, use those (states, no browser)."""

from __future__ import annotations

import threading
import time

import jax
import numpy as np
import pytest
from safetensors.numpy import save_file

import inspector
from inspector.core import weighted_sum_host, working_set
from inspector.core.mapped_groups import has_mapped
from inspector.ui.session import launcher_warm
from inspector.ui.session.formatting import human_bytes
from inspector.ui.session.loaded import prepare
from inspector.ui.session.state import InspectorState
from inspector.ui.timing_card import timing_lines

SHAPES = {"h.10.w": (37, 21), "h.9.w": (21, 37), "h.9.b": (21,)}


@pytest.fixture(autouse=True)
def small_groups(monkeypatch):
    """Every float32 group goes to the loop and is mapped (the app: 16 MiB and more)."""
    monkeypatch.setattr(weighted_sum_host, "MIN_BYTES", 0)
    monkeypatch.setattr(working_set, "SETTLE_DELAY", 0.0)
    yield
    launcher_warm.release()


def checkpoints(tmp_path):
    rng = np.random.default_rng(5)
    values, loaded = [], []
    for i in range(2):
        v = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
        path = tmp_path / f"m{i}.safetensors"
        save_file(v, str(path))
        values.append(v)
        loaded.append(prepare(path.name, inspector.load(str(path)), "file"))
    return values, loaded


def check(rr, values, weights) -> None:
    out = {jax.tree_util.keystr(p, simple=True, separator="."): np.asarray(x)
           for p, x in jax.tree_util.tree_flatten_with_path(rr.result.unpack())[0]}
    for name in SHAPES:
        want = sum(w * v[name].astype(np.float64) for w, v in zip(weights, values, strict=True))
        np.testing.assert_allclose(out[name], want, rtol=1e-6, atol=1e-6)


def settled(s: InspectorState, names: list[str], timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        held = [s.runs.working.get(n) for n in names]
        if all(h is not None and not has_mapped(h) for h in held):
            return True
        time.sleep(0.02)
    return False


def test_the_first_run_sums_the_files_maps_and_later_runs_their_packed_copies(tmp_path,
                                                                              monkeypatch):
    values, loaded = checkpoints(tmp_path)
    go, copy = threading.Event(), working_set._settle
    monkeypatch.setattr(working_set, "_settle", lambda *a: (go.wait(30), copy(*a)))
    s = InspectorState(repeats=1)
    try:
        for t in loaded:
            s.add(t)
        names = [t.name for t in loaded]
        s.ops["weighted_sum"].param.update(trees=names, weights=[0.25, 0.75])
        s.op = "weighted_sum"
        s.run = True
        assert s.error == ""
        first = s.result
        check(first, values, [0.25, 0.75])
        nbytes = sum(4 * np.prod(shape) for shape in SHAPES.values())
        assert first.read_bytes == first.mapped_bytes == 2 * nbytes  # counted once
        assert "inputs mapped from their files" in s.run_status and "read " not in s.run_status
        card = dict(timing_lines(first))["read"]
        assert f"{human_bytes(2 * nbytes)} used in place in the files' maps, not copied" in card
        assert all(has_mapped(s.runs.working.get(n)) for n in names)  # not copied: mapped
        go.set()
        assert settled(s, names)  # packed copies replaced the maps in the background
        s.ops["weighted_sum"].weights = [-1.0, 2.0]  # a weight change: one kernel
        s.run = True
        assert s.error == ""
        check(s.result, values, [-1.0, 2.0])
        assert s.result.read_bytes == 0  # resident: nothing read again
    finally:
        s.close()
