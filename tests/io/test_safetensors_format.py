"""safetensors: files written by the safetensors library, sharded indexes, damaged headers."""

from __future__ import annotations

import json
import struct
import time

import numpy as np
import pytest
import safetensors.numpy

from inspector.core.lazy import LazyArray
from inspector.io import load, sniff
from tests.io.io_assertions import assert_load_error, assert_tree_equal


def _tensors():
    rng = np.random.default_rng(1)
    return {
        "model.embed.weight": rng.standard_normal((10, 4)).astype(np.float32),
        "model.layers.0.attn.q": rng.standard_normal((4, 4)).astype(np.float16),
        "model.layers.0.mlp.up": rng.integers(-9, 9, (4, 8)).astype(np.int32),
        "model.layers.1.attn.q": rng.standard_normal((4, 4)).astype(np.float16),
        "model.norm": np.ones(4, np.float64),
        "flags": np.array([True, False, True]),
    }


NESTED = {
    "model": {
        "embed": {"weight": "model.embed.weight"},
        "layers": {
            "0": {"attn": {"q": "model.layers.0.attn.q"}, "mlp": {"up": "model.layers.0.mlp.up"}},
            "1": {"attn": {"q": "model.layers.1.attn.q"}},
        },
        "norm": "model.norm",
    },
    "flags": "flags",
}


def _expected(tensors, nested=NESTED):
    if isinstance(nested, str):
        return tensors[nested]
    return {k: _expected(tensors, v) for k, v in nested.items()}


def test_file_written_by_the_safetensors_library(tmp_path):
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(_tensors(), str(path), metadata={"format": "np"})
    assert sniff(path) == "safetensors"
    assert_tree_equal(load(path), _expected(_tensors()))


def test_the_library_reads_what_save_writes(tmp_path):
    from inspector.io import save

    path = save(
        {"a": {"b": np.arange(6, dtype=np.int16).reshape(2, 3)}}, tmp_path / "m.safetensors"
    )
    back = safetensors.numpy.load_file(str(path))
    assert list(back) == ["a.b"]
    np.testing.assert_array_equal(back["a.b"], np.arange(6, dtype=np.int16).reshape(2, 3))


def test_leaves_are_lazy_and_read_the_file_when_used(tmp_path):
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"w": np.zeros(4, np.float32)}, str(path))
    tree = load(path)
    # change the data on disk after loading: the leaf must see the new bytes, so nothing was
    # read at load time
    with open(path, "r+b") as f:
        f.seek(-16, 2)
        f.write(np.arange(4, dtype=np.float32).tobytes())
    assert isinstance(tree["w"], LazyArray)
    np.testing.assert_array_equal(np.asarray(tree["w"]), np.arange(4, dtype=np.float32))


def test_structure_of_a_huge_file_costs_milliseconds(tmp_path):
    # a 32 GiB tensor in a sparse file: only the header exists on disk
    header = json.dumps(
        {"big": {"dtype": "F32", "shape": [2**33], "data_offsets": [0, 2**35]}}
    ).encode()
    path = tmp_path / "huge.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + 2**35)
    start = time.perf_counter()
    tree = load(path)
    elapsed = time.perf_counter() - start
    assert (tree["big"].shape, tree["big"].nbytes) == ((2**33,), 2**35)
    assert elapsed < 2.0  # reading 32 GiB would take far longer; a loose bound for busy CI


def _write_shards(tmp_path):
    tensors = _tensors()
    names = list(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:3],
              "model-00002-of-00002.safetensors": names[3:]}  # fmt: skip
    for shard, members in shards.items():
        safetensors.numpy.save_file({n: tensors[n] for n in members}, str(tmp_path / shard))
    index = {
        "metadata": {"total_size": sum(t.nbytes for t in tensors.values())},
        "weight_map": {n: s for s, members in shards.items() for n in members},
    }
    path = tmp_path / "model.safetensors.index.json"
    path.write_text(json.dumps(index, indent=2))
    return path, tensors


def test_sharded_checkpoint_is_merged_into_one_tree(tmp_path):
    path, tensors = _write_shards(tmp_path)
    assert sniff(path) == "safetensors-index"
    assert_tree_equal(load(path), _expected(tensors))


def test_sharded_checkpoint_with_a_missing_shard_loads_the_rest(tmp_path):
    # the index's problems are listed by inspector.check_index (tests/io/test_sharded_index.py)
    path, tensors = _write_shards(tmp_path)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    first = {"model": {"embed": {"weight": "model.embed.weight"},
                       "layers": {"0": {"attn": {"q": "model.layers.0.attn.q"},
                                        "mlp": {"up": "model.layers.0.mlp.up"}}}}}
    assert_tree_equal(load(path), _expected(tensors, first))


def test_sharded_checkpoint_naming_a_tensor_its_shard_lacks_loads_the_rest(tmp_path):
    path, tensors = _write_shards(tmp_path)
    index = json.loads(path.read_text())
    index["weight_map"]["model.extra"] = "model-00001-of-00002.safetensors"
    path.write_text(json.dumps(index))
    assert_tree_equal(load(path), _expected(tensors))


def test_sharded_index_may_not_point_outside_its_folder(tmp_path):
    path = tmp_path / "model.safetensors.index.json"
    path.write_text(json.dumps({"weight_map": {"w": "../elsewhere.safetensors"}}))
    assert_load_error(path, "outside the checkpoint's folder")


# --- damaged files: one builder per case ----------------------------------------------------


def _raw(tmp_path, header: bytes, data: bytes = b"", length: int | None = None, name="bad"):
    path = tmp_path / f"{name}.safetensors"
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header + data)
    return path


def _header(**tensors) -> bytes:
    return json.dumps(tensors).encode()


def test_truncated_file(tmp_path):
    path = tmp_path / "truncated.safetensors"
    safetensors.numpy.save_file({"w": np.ones((64, 64), np.float32)}, str(path))
    path.write_bytes(path.read_bytes()[:-1000])
    assert_load_error(path, "'w': data_offsets end at 16384, beyond the 15384-byte data section")


def test_truncated_inside_the_length(tmp_path):
    path = tmp_path / "short.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    assert_load_error(path, "header length is 16 bytes, larger than the 1 bytes that follow")


def test_header_length_larger_than_the_file(tmp_path):
    path = _raw(tmp_path, _header(w={"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}),
                b"\0" * 4, length=10**6, name="header_too_long")  # fmt: skip
    assert_load_error(path, "header length is 1000000 bytes, larger than the")


def test_invalid_json(tmp_path):
    path = _raw(tmp_path, b'{"w": {"dtype": "F32", "shape": [1], ', name="invalid_json")
    assert_load_error(path, "the safetensors header is not valid JSON")


def test_non_utf8_json(tmp_path):
    path = _raw(tmp_path, b'{"w\xff\xfe": {}}', name="non_utf8")
    assert_load_error(path, "the safetensors header is not UTF-8 text")


def test_duplicate_keys_in_the_header(tmp_path):
    one = '{"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}'
    path = _raw(tmp_path, f'{{"w": {one}, "w": {one}}}'.encode(), b"\0" * 4, name="duplicate")
    assert_load_error(path, "the safetensors header repeats the key 'w'")


def test_offsets_out_of_range(tmp_path):
    header = _header(w={"dtype": "F32", "shape": [4], "data_offsets": [100, 116]})
    path = _raw(tmp_path, header, b"\0" * 16, name="out_of_range")
    assert_load_error(path, "'w': data_offsets end at 116, beyond the 16-byte data section")


def test_overlapping_offsets(tmp_path):
    header = _header(
        a={"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        b={"dtype": "F32", "shape": [4], "data_offsets": [8, 24]},
    )
    path = _raw(tmp_path, header, b"\0" * 24, name="overlapping")
    assert_load_error(path, "'a' and 'b': their data ranges overlap")


def test_offsets_not_matching_shape_and_dtype(tmp_path):
    header = _header(w={"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]})
    path = _raw(tmp_path, header, b"\0" * 16, name="size_mismatch")
    assert_load_error(path, "'w': data_offsets [0, 16] hold 16 bytes, but F32[2, 3] needs 24")


def test_unknown_dtype_and_bad_shape_are_all_listed(tmp_path):
    header = _header(
        a={"dtype": "F33", "shape": [1], "data_offsets": [0, 4]},
        b={"dtype": "F32", "shape": [-1], "data_offsets": [4, 8]},
    )
    path = _raw(tmp_path, header, b"\0" * 8, name="unknown_dtype")
    error = assert_load_error(path, "2 problem(s) in the safetensors header")
    assert "'a': unknown dtype 'F33'" in str(error)
    assert "'b': shape [-1] is not a list of non-negative integers" in str(error)


def test_header_that_is_not_an_object(tmp_path):
    path = _raw(tmp_path, b"{}", name="empty_header")
    assert load(path) == {}
    path = _raw(tmp_path, b"{" + b" " * 3, name="unterminated")
    assert_load_error(path, "not valid JSON")


@pytest.mark.parametrize("keys", [("a", "a.b"), ("a.b", "a")])
def test_clashing_keys(tmp_path, keys):
    tensors = {k: np.ones(1, np.float32) for k in keys}
    path = tmp_path / "clash.safetensors"
    safetensors.numpy.save_file(tensors, str(path))
    assert_load_error(path, "1 pair(s) of keys clash", "'a' and 'a.b'")
