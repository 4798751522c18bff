"""`check_index` on sharded checkpoints written by the safetensors library, and `load` of them."""

from __future__ import annotations

import json
import time

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

import inspector
from inspector.core.errors import LoadError
from inspector.io.sharded_index import KINDS, IndexProblem

S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
BF16 = ml_dtypes.bfloat16


def tensors():
    rng = np.random.default_rng(0)
    return {
        "model.embed.weight": rng.standard_normal((8, 4)).astype(BF16),
        "model.layers.0.q.weight": rng.standard_normal((4, 4)).astype(BF16),
        "model.layers.1.q.weight": rng.standard_normal((4, 4)).astype(BF16),
        "model.norm.weight": np.ones(4, BF16),
    }


def write_checkpoint(folder, shards=None, weight_map=None):
    """Shards as the safetensors library writes them, and an index (by default consistent)."""
    values = tensors()
    names = list(values)
    shards = shards or {S1: names[:2], S2: names[2:]}
    for shard, members in shards.items():
        safetensors.numpy.save_file({n: values[n] for n in members}, str(folder / shard))
    if weight_map is None:
        weight_map = {n: s for s, members in shards.items() for n in members}
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 96}, "weight_map": weight_map}))
    return index, values


def kinds(problems):
    return [(p.kind, p.path) for p in problems]


def test_a_consistent_checkpoint_has_no_problems(tmp_path):
    index, _ = write_checkpoint(tmp_path)
    assert inspector.check_index(index) == []
    info = inspector.file_info(index)
    assert info.format == "safetensors-index" and info.problems == ()
    assert info.metadata == {"total_size": 96}


def test_missing_file(tmp_path):
    index, values = write_checkpoint(tmp_path)
    (tmp_path / S2).unlink()
    problems = inspector.check_index(index)
    assert problems == [
        IndexProblem("missing_file", S2, "the index names it, but it is not beside the index")
    ]
    tree = inspector.load(index)  # what is consistent still loads
    assert set(tree["model"]) == {"embed", "layers"} and set(tree["model"]["layers"]) == {"0"}
    got = np.asarray(tree["model"]["embed"]["weight"])
    assert got.tobytes() == values["model.embed.weight"].tobytes()


def test_missing_tensor(tmp_path):
    names = list(tensors())
    weight_map = {n: S1 if i < 2 else S2 for i, n in enumerate(names)}
    weight_map["model.extra.weight"] = S1
    index, _ = write_checkpoint(tmp_path, weight_map=weight_map)
    assert kinds(inspector.check_index(index)) == [("missing_tensor", "model.extra.weight")]
    assert "extra" not in inspector.load(index)["model"]


def test_stray_tensor(tmp_path):
    names = list(tensors())
    index, _ = write_checkpoint(tmp_path, weight_map={n: S1 for n in names[:2]} | {names[2]: S2})
    problems = inspector.check_index(index)
    assert kinds(problems) == [("stray_tensor", "model.norm.weight")]
    assert problems[0].detail == f"{S2} holds it, but the index does not name it"
    assert "norm" not in inspector.load(index)["model"]


def test_tensor_in_another_shard_than_the_index_says(tmp_path):
    names = list(tensors())
    weight_map = {n: S1 if i < 2 else S2 for i, n in enumerate(names)}
    weight_map["model.norm.weight"] = S1  # it is in S2
    index, _ = write_checkpoint(tmp_path, weight_map=weight_map)
    problems = inspector.check_index(index)
    assert kinds(problems) == [
        ("missing_tensor", "model.norm.weight"),
        ("stray_tensor", "model.norm.weight"),
    ]
    assert problems[0].detail == f"the index maps it to {S1}, which does not hold it; it is in {S2}"


def test_duplicate(tmp_path):
    names = list(tensors())
    index, values = write_checkpoint(tmp_path, shards={S1: names[:3], S2: names[2:]})
    problems = inspector.check_index(index)
    assert kinds(problems) == [("duplicate", "model.layers.1.q.weight")]
    assert problems[0].detail == f"held by 2 shards: {S1}, {S2}; the index names {S2}"
    leaf = inspector.load(index)["model"]["layers"]["1"]["q"]["weight"]
    assert leaf.source.endswith(f"{S2}:model.layers.1.q.weight")  # the index's choice


def test_stray_file(tmp_path):
    index, _ = write_checkpoint(tmp_path)
    safetensors.numpy.save_file(
        {"x": np.zeros(2, np.float32)}, str(tmp_path / "consolidated.safetensors")
    )
    (tmp_path / "config.json").write_text("{}")
    problems = inspector.check_index(index)
    assert kinds(problems) == [("stray_file", "consolidated.safetensors")]


def test_dtype_mix_of_a_leftover_4bit_shard(tmp_path):
    values = tensors()
    names = list(values)
    safetensors.numpy.save_file({n: values[n] for n in names[:3]}, str(tmp_path / S1))
    packed = {  # a leftover of a 4-bit export: uint8 codes and float16 scales
        "model.norm.weight": np.zeros((8, 2), np.uint8),
        "model.norm.scales": np.ones(4, np.float16),
    }
    safetensors.numpy.save_file(packed, str(tmp_path / S2))
    weight_map = {n: S1 for n in names[:3]} | {n: S2 for n in packed}
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    problems = inspector.check_index(index)
    assert kinds(problems) == [("dtype_mix", S2)]
    assert problems[0].detail.startswith("holds mostly uint8 (16 values) while the checkpoint is")
    assert problems[0].detail.endswith(
        "mostly bfloat16: a leftover of another export (e.g. a quantized one)?"
    )


def test_damaged_shard_is_a_problem_not_a_refusal(tmp_path):
    index, _ = write_checkpoint(tmp_path)
    (tmp_path / S2).write_bytes(b"\x10\0\0\0\0\0\0\0{not json}......")
    problems = inspector.check_index(index)
    assert kinds(problems) == [("damaged_file", S2)]
    assert "is not valid JSON" in problems[0].detail
    assert set(inspector.load(index)["model"]["layers"]) == {"0"}


def test_every_kind_at_once_is_sorted_by_kind(tmp_path):
    names = list(tensors())
    weight_map = {n: S1 if i < 2 else S2 for i, n in enumerate(names)} | {
        "gone": "absent.safetensors"
    }
    index, _ = write_checkpoint(tmp_path, weight_map=weight_map)
    (tmp_path / "old.bin").write_bytes(b"x")
    found = [p.kind for p in inspector.check_index(index)]
    assert found == ["missing_file", "stray_file"]
    assert found == sorted(found, key=KINDS.index)


def test_nothing_loadable_is_still_a_load_error(tmp_path):
    index, _ = write_checkpoint(tmp_path)
    (tmp_path / S1).unlink()
    (tmp_path / S2).unlink()
    start = time.perf_counter()
    with pytest.raises(LoadError) as info:
        inspector.load(index)
    assert time.perf_counter() - start < 1
    message = str(info.value)
    assert "no tensor of its weight_map can be loaded" in message
    assert f"missing_file: {S1}" in message and f"missing_file: {S2}" in message


def test_an_unreadable_index_is_a_load_error(tmp_path):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"a": 3}}')
    with pytest.raises(LoadError, match="no 'weight_map' object"):
        inspector.check_index(index)


def test_an_fp8_checkpoint_keeping_a_bf16_shard_is_no_dtype_mix(tmp_path):
    fp8 = ml_dtypes.float8_e4m3fn
    safetensors.numpy.save_file(
        {"layers.0.w": np.ones((64, 64), fp8), "layers.0.w_scale_inv": np.ones(1, np.float32)},
        str(tmp_path / S1),
    )
    safetensors.numpy.save_file({"lm_head.weight": np.ones((8, 64), BF16)}, str(tmp_path / S2))
    weight_map = {"layers.0.w": S1, "layers.0.w_scale_inv": S1, "lm_head.weight": S2}
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    assert inspector.check_index(index) == []


def test_a_float32_shard_beside_bfloat16_ones_is_a_dtype_mix(tmp_path):
    values = tensors()
    names = list(values)
    safetensors.numpy.save_file({n: values[n] for n in names[:3]}, str(tmp_path / S1))
    safetensors.numpy.save_file({names[3]: np.ones(4, np.float32)}, str(tmp_path / S2))
    index = tmp_path / "model.safetensors.index.json"
    weight_map = {n: S1 for n in names[:3]} | {names[3]: S2}
    index.write_text(json.dumps({"weight_map": weight_map}))
    assert kinds(inspector.check_index(index)) == [("dtype_mix", S2)]


def test_opening_then_file_info_reads_each_shard_header_once(tmp_path, monkeypatch):
    from inspector.io import sharded_index

    index, values = write_checkpoint(tmp_path)
    inspector.clear_caches()
    reads = []
    original = sharded_index.read_header
    monkeypatch.setattr(sharded_index, "read_header",
                        lambda shard: reads.append(shard.local_path.name) or original(shard))
    tree = inspector.load(index)
    assert inspector.file_info(index).problems == ()
    assert sorted(reads) == [S1, S2]
    # a shard rewritten since (another size): its header is read again, and its new tensors
    # are what the next load gives
    safetensors.numpy.save_file({n: np.zeros((4, 4), BF16) for n in
                                 ("model.layers.1.q.weight", "model.norm.weight")},
                                str(tmp_path / S2))
    again = inspector.load(index)
    assert sorted(reads) == [S1, S1, S2, S2]
    assert np.asarray(again["model"]["layers"]["1"]["q"]["weight"]).shape == (4, 4)
    assert [p.kind for p in inspector.check_index(index)] == []
    np.testing.assert_array_equal(np.asarray(tree["model"]["embed"]["weight"]),
                                  values["model.embed.weight"])
