"""`.npy` and `.npz`: files written by NumPy, bfloat16 through the dtype marker, damage."""

from __future__ import annotations

import json
import time
import zipfile

import ml_dtypes
import numpy as np
import pytest

from inspector.core.lazy import LazyArray
from inspector.io import load, save, sniff
from inspector.io.npz_format import DTYPES_MEMBER
from tests.io.io_assertions import assert_load_error, assert_tree_equal


def _arrays():
    rng = np.random.default_rng(2)
    return {
        "params/dense/kernel": rng.standard_normal((3, 4)).astype(np.float32),
        "params/dense/bias": np.zeros(4, np.float32),
        "params/embed.table": rng.integers(0, 100, (5, 2)),
        "step": np.asarray(12),
        "fortran": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        "big_endian": np.arange(5, dtype=">i4"),
    }


def _expected(arrays):
    return {
        "params": {
            "dense": {
                "kernel": arrays["params/dense/kernel"],
                "bias": arrays["params/dense/bias"],
            },
            "embed": {"table": arrays["params/embed.table"]},
        },
        "step": arrays["step"],
        "fortran": arrays["fortran"],
        "big_endian": arrays["big_endian"].astype("<i4"),  # read in native byte order
    }


@pytest.mark.parametrize("writer", [np.savez, np.savez_compressed])
def test_npz_written_by_numpy_nests_on_slash_and_dot(tmp_path, writer):
    path = tmp_path / "ckpt.npz"
    writer(path, **_arrays())
    assert sniff(path) == "npz"
    assert_tree_equal(load(path), _expected(_arrays()))


def test_npy_is_one_lazy_leaf(tmp_path):
    path = tmp_path / "w.npy"
    array = np.asfortranarray(np.arange(24, dtype=np.float16).reshape(2, 3, 4))
    np.save(path, array)
    leaf = load(path)
    assert isinstance(leaf, LazyArray) and leaf.shape == (2, 3, 4)
    np.testing.assert_array_equal(np.asarray(leaf), array)


def test_npz_leaves_are_read_when_used(tmp_path):
    path = tmp_path / "lazy.npz"
    np.savez(path, w=np.zeros(4, np.float32))
    tree = load(path)
    data = path.read_bytes()
    start = data.index(np.zeros(4, np.float32).tobytes(), data.index(b"shape"))
    with open(path, "r+b") as f:  # change the stored bytes after loading
        f.seek(start)
        f.write(np.arange(4, dtype=np.float32).tobytes())
    np.testing.assert_array_equal(np.asarray(tree["w"]), np.arange(4, dtype=np.float32))


def test_structure_of_a_huge_npy_costs_milliseconds(tmp_path):
    path = tmp_path / "huge.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (2**33,)}
        )
        f.truncate(f.tell() + 2**35)  # sparse: 32 GiB declared, nothing written
    start = time.perf_counter()
    leaf = load(path)
    assert leaf.nbytes == 2**35 and time.perf_counter() - start < 2.0  # 32 GiB unread


def test_bfloat16_and_float8_round_trip_through_the_marker(tmp_path):
    tree = {
        "w": np.linspace(-2, 2, 6).astype(ml_dtypes.bfloat16).reshape(2, 3),
        "f8": np.linspace(-1, 1, 4).astype(ml_dtypes.float8_e5m2),
        "plain": np.ones(2, np.float32),
    }
    path = save(tree, tmp_path / "bf16.npz")
    assert_tree_equal(load(path), tree)
    # the marker is one JSON member; NumPy alone reads the bits as unsigned integers
    with zipfile.ZipFile(path) as archive:
        assert f"{DTYPES_MEMBER}.npy" in archive.namelist()
    plain = np.load(path)
    assert json.loads(str(plain[DTYPES_MEMBER])) == {"w": "bfloat16", "f8": "float8_e5m2"}
    assert plain["w"].dtype == np.uint16
    np.testing.assert_array_equal(plain["w"].view(ml_dtypes.bfloat16), tree["w"])


def test_bfloat16_saved_by_plain_numpy_stays_void(tmp_path):
    # np.savez writes bfloat16 as "V2" and records nothing else: the dtype cannot be known
    path = tmp_path / "plain.npz"
    np.savez(path, w=np.ones(3, ml_dtypes.bfloat16))
    assert load(path)["w"].dtype == np.dtype("V2")


# --- damaged files ---------------------------------------------------------------------------


def test_object_array_is_refused_without_unpickling(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, ok=np.ones(2), names=np.array(["a", {"b": 1}], dtype=object))
    assert_load_error(path, "member 'names.npy' holds Python objects", "only pickle can read")


def test_truncated_npz(tmp_path):
    path = tmp_path / "truncated.npz"
    np.savez(path, w=np.ones(1000))
    path.write_bytes(path.read_bytes()[:4000])
    assert_load_error(path, "zip directory is unreadable")


def test_truncated_npy(tmp_path):
    path = tmp_path / "truncated.npy"
    np.save(path, np.ones((10, 10)))
    path.write_bytes(path.read_bytes()[:500])
    assert_load_error(path, "the array holds 500 bytes", "float64[10, 10]", "takes 928")


def test_damaged_npy_header(tmp_path):
    path = tmp_path / "header.npy"
    np.save(path, np.ones(3))
    data = bytearray(path.read_bytes())
    data[10:11] = b"("  # the header dict literal now opens with a parenthesis
    path.write_bytes(bytes(data))
    assert_load_error(path, "the file has a damaged .npy header")


def test_npz_member_with_wrong_magic(tmp_path):
    path = tmp_path / "magic.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("w.npy", b"NOTNUMPY" + bytes(64))
    assert_load_error(path, "member 'w.npy' does not start with the .npy magic bytes")


def test_zip_with_neither_npy_nor_pickle(tmp_path):
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hi")
    assert_load_error(path, "neither .npy members (npz) nor a data.pkl (PyTorch)")


def test_clashing_npz_keys(tmp_path):
    path = tmp_path / "clash.npz"
    np.savez(path, **{"a.b": np.ones(1), "a/b": np.zeros(1)})
    assert_load_error(path, "'a.b' and 'a/b'")
