"""flax msgpack: files written by `flax.serialization.msgpack_serialize`, walked without copying."""

from __future__ import annotations

import time

import jax.numpy as jnp
import msgpack
import numpy as np
import pytest
from flax import serialization

from inspector.io import load, sniff
from tests.io.io_assertions import assert_load_error, assert_tree_equal


def _state():
    rng = np.random.default_rng(3)
    return {
        "params": {
            "Dense_0": {
                "kernel": rng.standard_normal((3, 4)).astype(np.float32),
                "bias": jnp.zeros(4, jnp.bfloat16),
            },
            "Embed_0": {"embedding": rng.integers(0, 9, (5, 2)).astype(np.int8)},
        },
        "batch_stats": {"mean": np.arange(4.0), "var": np.ones(4)},
        "opt": {"count": np.int32(5), "mu": [np.zeros(2), np.ones((0, 3))]},
        "step": 1000,
        "lr": 0.01,
        "name": "resnet",
        "done": True,
        "nothing": None,
        "z": 1 + 2j,
    }


def _expected(tree):
    if isinstance(tree, dict):
        return {k: _expected(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_expected(v) for v in tree]
    if isinstance(tree, (np.ndarray, np.generic)) or hasattr(tree, "__array__"):
        return np.asarray(tree)
    return tree


def _write(tmp_path, tree, name="state.msgpack"):
    path = tmp_path / name
    path.write_bytes(serialization.msgpack_serialize(tree))
    return path


def test_file_written_by_flax(tmp_path):
    path = _write(tmp_path, _state())
    assert sniff(path) == "flax-msgpack"
    loaded = load(path)
    assert_tree_equal(loaded, _expected(_state()))
    # and flax reads the same values back
    restored = serialization.msgpack_restore(path.read_bytes())
    np.testing.assert_array_equal(
        np.asarray(loaded["params"]["Dense_0"]["kernel"]), restored["params"]["Dense_0"]["kernel"]
    )


def test_bfloat16_stays_bfloat16(tmp_path):
    tree = {"w": jnp.linspace(-3, 3, 7, dtype=jnp.bfloat16)}
    loaded = load(_write(tmp_path, tree))
    assert loaded["w"].dtype == jnp.bfloat16
    assert np.asarray(loaded["w"]).tobytes() == np.asarray(tree["w"]).tobytes()


def test_chunked_arrays_are_joined(tmp_path, monkeypatch):
    # flax splits arrays above MAX_CHUNK_SIZE (1 GiB); a small limit makes it chunk a small one
    monkeypatch.setattr(serialization, "MAX_CHUNK_SIZE", 64)
    tree = {"big": np.arange(100, dtype=np.float32).reshape(10, 10), "small": np.ones(2)}
    path = _write(tmp_path, tree)
    assert b"__msgpack_chunked_array__" in path.read_bytes()
    assert_tree_equal(load(path), tree)


def test_leaves_are_read_when_used(tmp_path):
    path = _write(tmp_path, {"w": np.zeros(4, np.float32)})
    tree = load(path)
    data = path.read_bytes()
    start = data.rindex(np.zeros(4, np.float32).tobytes())
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(np.arange(4, dtype=np.float32).tobytes())
    np.testing.assert_array_equal(np.asarray(tree["w"]), np.arange(4, dtype=np.float32))


def test_structure_of_many_leaves_costs_milliseconds(tmp_path):
    tree = {f"layer_{i}": {"w": np.zeros((64, 64), np.float32), "b": np.zeros(64)}
            for i in range(300)}  # fmt: skip
    path = _write(tmp_path, tree)
    load(path)
    start = time.perf_counter()
    loaded = load(path)
    assert time.perf_counter() - start < 2.0  # loose bound for busy CI machines
    assert len(loaded) == 300 and loaded["layer_7"]["w"].shape == (64, 64)


# --- damaged files ---------------------------------------------------------------------------


def test_truncated_file(tmp_path):
    path = _write(tmp_path, _state(), "truncated.msgpack")
    path.write_bytes(path.read_bytes()[:-20])
    assert_load_error(path, "bytes are needed but only")


def test_trailing_bytes(tmp_path):
    path = _write(tmp_path, {"w": np.ones(2)}, "trailing.msgpack")
    path.write_bytes(path.read_bytes() + b"\x00\x00")
    assert_load_error(path, "2 bytes follow the end of the msgpack data")


def test_container_declaring_more_elements_than_bytes(tmp_path):
    path = tmp_path / "huge_count.msgpack"
    path.write_bytes(b"\xdf\xff\xff\xff\xff" + b"\xa1a\x01")  # map32 of 4 billion entries
    assert_load_error(path, "a map declares 4294967295 entries but only 3 bytes remain")


def test_nesting_too_deep(tmp_path):
    path = tmp_path / "deep.msgpack"
    path.write_bytes(b"\x81\xa1a" * 400 + b"\x01")
    assert_load_error(path, "the data nests deeper than 256 levels")


def test_array_payload_size_mismatch(tmp_path):
    payload = msgpack.packb(((2, 2), "float32", b"\0" * 12), use_bin_type=True)
    path = tmp_path / "short_array.msgpack"
    path.write_bytes(msgpack.packb({"w": msgpack.ExtType(1, payload)}, use_bin_type=True))
    assert_load_error(path, "an array of float32[2, 2] needs 16 bytes but holds 12")


def test_object_dtype_is_refused(tmp_path):
    payload = msgpack.packb(((1,), "object", b"\0" * 8), use_bin_type=True)
    path = tmp_path / "object.msgpack"
    path.write_bytes(msgpack.packb({"w": msgpack.ExtType(1, payload)}, use_bin_type=True))
    assert_load_error(path, "an array has unsupported dtype 'object'")


def test_unknown_ext_type(tmp_path):
    path = tmp_path / "ext.msgpack"
    path.write_bytes(msgpack.packb({"w": msgpack.ExtType(42, b"xx")}, use_bin_type=True))
    assert_load_error(path, "msgpack ext type 42 is not one flax writes")


@pytest.mark.parametrize("blob", [b"\x81\xa1a\xc1", b"\x81\xa1a\xa3\xff\xfe\xfd"])
def test_invalid_bytes(tmp_path, blob):
    path = tmp_path / "invalid.msgpack"
    path.write_bytes(blob)
    assert_load_error(path, "at byte")
