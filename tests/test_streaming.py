"""`weighted_sum(..., out=path)`: the result streamed into a file, leaf by leaf, atomically."""

import os

import ml_dtypes
import numpy as np
import pytest

import inspector
from inspector import LazyArray
from tests.core.test_streaming import Tracker


def checkpoints(tmp_path, k=3, seed=0):
    rng = np.random.default_rng(seed)
    trees = [{"emb": rng.normal(size=(40, 16)).astype(np.float32),
              "layers": [{"w": rng.normal(size=(16, 16)).astype(np.float32),
                          "b": rng.normal(size=(16,)).astype(ml_dtypes.bfloat16)}
                         for _ in range(3)],
              "step": np.array(7 + i, np.int32)} for i in range(k)]
    paths = [inspector.save(t, tmp_path / f"in{i}.safetensors") for i, t in enumerate(trees)]
    return trees, paths


def test_streamed_file_equals_the_in_memory_result_and_numpy(tmp_path):
    trees, paths = checkpoints(tmp_path)
    weights = [0.5, 0.25, 0.25]
    loaded = [inspector.load(p) for p in paths]
    out = inspector.weighted_sum(loaded, weights, out=tmp_path / "merged.safetensors")
    assert isinstance(out["emb"], LazyArray)  # opened lazily, nothing held
    memory = inspector.weighted_sum(loaded, weights)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in0.safetensors", "in1.safetensors", "in2.safetensors", "merged.safetensors"]
    for got, want, key in [(out["emb"], memory["emb"], "emb"),
                           (out["layers"]["1"]["w"], memory["layers"]["1"]["w"], None)]:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        if key:
            ref = sum(w * t[key].astype(np.float64) for w, t in zip(weights, trees, strict=True))
            np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-6, atol=1e-6)
    b = np.asarray(out["layers"]["2"]["b"])
    assert b.dtype == ml_dtypes.bfloat16  # the dtype rule holds in the file
    ref = sum(w * t["layers"][2]["b"].astype(np.float64) for w, t in
              zip(weights, trees, strict=True))
    np.testing.assert_allclose(b.astype(np.float64), ref, rtol=1e-2, atol=1e-2)
    assert np.asarray(out["step"]).dtype == np.float32  # int leaves, float weights: float32


def test_each_input_leaf_is_read_once_and_few_at_a_time(tmp_path):
    rng = np.random.default_rng(2)
    values = [{f"w{i}": rng.normal(size=(50, 20)).astype(np.float32) for i in range(20)}
              for _ in range(2)]
    tracker = Tracker()
    lazy = [{k: tracker.lazy(v, k) for k, v in t.items()} for t in values]
    out = inspector.weighted_sum(lazy, [1, -1], out=tmp_path / "d.npz")
    assert tracker.reads == 40
    assert tracker.peak <= 2  # one output leaf's inputs at a time
    np.testing.assert_allclose(np.asarray(out["w7"]),
                               values[0]["w7"].astype(np.float64) - values[1]["w7"], atol=1e-6)


def test_a_failure_midway_leaves_no_file_under_the_final_name(tmp_path):
    good = {f"w{i}": np.full((4, 4), i, np.float32) for i in range(6)}

    def broken():
        raise OSError("disk went away")

    bad = dict(good, w3=LazyArray((4, 4), "float32", broken, source="b.safetensors:w3"))
    target = tmp_path / "merged.safetensors"
    with pytest.raises(OSError, match="disk went away"):
        inspector.weighted_sum([good, bad], [0.5, 0.5], out=target)
    assert os.listdir(tmp_path) == []  # neither the file nor its temporary
    inspector.save({"old": np.zeros(2, np.float32)}, target)
    with pytest.raises(OSError):
        inspector.weighted_sum([good, bad], [0.5, 0.5], out=target)
    assert list(inspector.load(target)) == ["old"]  # an older file is left as it was


def test_bad_inputs_fail_before_anything_is_written(tmp_path):
    with pytest.raises(inspector.StructureMismatchError, match=r"\['b'\]"):
        inspector.weighted_sum([{"a": np.ones(2)}, {"b": np.ones(2)}], [1, 1],
                               out=tmp_path / "x.safetensors")
    with pytest.raises(inspector.InspectorError, match="no format for suffix '.txt'"):
        inspector.weighted_sum([{"a": np.ones(2)}], [1], out=tmp_path / "x.txt")
    assert os.listdir(tmp_path) == []


def test_run_still_finds_the_public_weighted_sum():
    r = inspector.run(inspector.weighted_sum, [{"a": np.ones(3)}, {"a": np.ones(3)}], [1, 2],
                      repeats=1)
    assert r.op == "weighted_sum" and np.asarray(r.result["a"]).tolist() == [3.0] * 3


def test_merge_streams_into_a_file_reading_each_leaf_once(tmp_path):
    rng = np.random.default_rng(5)
    base = {f"w{i}": rng.normal(size=(30, 20)).astype(np.float32) for i in range(12)}
    tuned = [{k: v + 0.1 * rng.normal(size=v.shape).astype(np.float32) for k, v in base.items()}
             for _ in range(2)]
    tracker = Tracker()
    lazy = lambda t, n: {k: tracker.lazy(v, f"{n}{k}") for k, v in t.items()}  # noqa: E731
    kw = dict(weights=[1.0, 0.5], density=0.3, lam=0.9)
    out = inspector.merge("ties", [lazy(t, i) for i, t in enumerate(tuned)],
                          base=lazy(base, "base"), out=tmp_path / "ties.safetensors", **kw)
    assert isinstance(out["w3"], LazyArray)
    # the inputs of the output leaf being written and of the one computed ahead of it
    # (`lazy_result(ahead=True)`), not the checkpoints' 36
    assert tracker.reads == 36 and tracker.peak <= 6
    memory = inspector.merge("ties", tuned, base=base, **kw)
    for k in base:
        np.testing.assert_array_equal(np.asarray(out[k]), np.asarray(memory[k]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ties.safetensors"]


def test_merge_with_out_checks_everything_before_writing(tmp_path):
    a = {"w": np.ones(3, np.float32)}
    with pytest.raises(inspector.InspectorError, match="'ties' needs base="):
        inspector.merge("ties", [a, a], out=tmp_path / "x.safetensors")
    assert list(tmp_path.iterdir()) == []
