"""safetensors as its specification and reference implementation define it.

Every header case of the reference's own tests (`safetensors/src/tensor.rs`) is ported here,
and each is also given to the reference (`safetensors._safetensors_rust.deserialize`): the
inspector accepts exactly the files the reference accepts. Every dtype of the specification reads
with exact values (checked against hand-known values and ml_dtypes' tables), packed F4 / F6
included, and what `inspector.save` writes the reference reads back byte for byte.
"""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import pytest
from safetensors import _safetensors_rust as reference

import inspector
from inspector.core.errors import LoadError
from inspector.io import load, safetensors_format


def _reference_accepts(data: bytes) -> bool:
    try:
        reference.deserialize(data)
    except Exception:  # SafetensorError, or a JSON error raised while parsing
        return False
    return True


def _i32(shape, offsets) -> dict:
    return {"dtype": "I32", "shape": shape, "data_offsets": offsets}


def _file(header: dict | bytes, data: bytes = b"", length: int | None = None) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


_ZEROS16 = b"\0" * 16
_ATTACK = {f"weight_{i}": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}
           for i in range(10)}  # fmt: skip

# name: (file bytes, None if it loads, else a fragment of the LoadError)
CASES = {
    "empty_file": (b"", "fewer than the 8-byte safetensors header length"),
    "invalid_header_length": (b"<\0\0\0\0\0\0\0",
                              "header length is 60 bytes, larger than the 0 bytes that follow"),
    "header_too_large": (_file({"test": _i32([2, 2], [0, 16])}, _ZEROS16, length=0xFFFFFF0000003C),
                         "above the 100000000-byte limit"),
    "non_utf8_header": (b"\x01\0\0\0\0\0\0\0\xff", "the safetensors header is not UTF-8 text"),
    "not_json": (b"\x01\0\0\0\0\0\0\0{", "the safetensors header is not valid JSON"),
    "whitespace_padded": (b"\x06\0\0\0\0\0\0\0{}\x0d\x20\x09\x0a", None),
    "whitespace_leading_padded": (b"\x06\0\0\0\0\0\0\0\x09\x0a{}\x0d\x20", None),
    "zero_sized_tensor": (_file({"test": _i32([2, 0], [0, 0])}), None),
    "empty_shape_is_a_scalar": (_file({"test": _i32([], [0, 4])}, b"\0" * 4), None),
    "deserialization": (_file({"test": _i32([2, 2], [0, 16])}, _ZEROS16), None),
    "invalid_info": (_file({"test": _i32([2, 2], [0, 4])}, b"\0" * 4),
                     "'test': data_offsets [0, 4] hold 4 bytes, but I32[2, 2] needs 16"),
    "shape_overflows": (_file({"test": _i32([2, 18446744073709551614], [0, 16])}, _ZEROS16),
                        "'test': I32[2, 18446744073709551614] needs more than 2**64 bytes"),
    "numel_times_size_overflows": (
        _file({"test": _i32([2, 9223372036854775807], [0, 16])}, _ZEROS16),
        "'test': I32[2, 9223372036854775807] needs more than 2**64 bytes"),
    "json_attack_same_offsets": (_file(_ATTACK, _ZEROS16), "their data ranges overlap"),
    "overlapping": (_file({"a": _i32([4], [0, 16]), "b": _i32([4], [8, 24])}, b"\0" * 24),
                    "'a' and 'b': their data ranges overlap ('a' ends at byte 16, 'b' starts "
                    "at 8)"),
    "gap_between_tensors": (_file({"a": _i32([1], [0, 4]), "b": _i32([1], [8, 12])}, b"\0" * 12),
                            "'b': data_offsets start at 8, but the tensors before it end at 4: "
                            "4 bytes belong to no tensor"),
    "header_out_of_offset_order": (
        _file({"b": _i32([1], [4, 8]), "a": _i32([1], [0, 4])}, b"\0" * 8), None),
    "trailing_bytes": (_file({"test": _i32([2, 2], [0, 16])},
                             _ZEROS16 + b"extra_bogus_data_for_polyglot_file"),
                       "the data section has 50 bytes but the tensors cover 16: 34 bytes after "
                       "the data section"),
    "missing_bytes": (_file({"test": _i32([2, 2], [0, 16])}, b"\0" * 14),
                      "'test': data_offsets end at 16, beyond the 14-byte data section"),
    "f4_misaligned": (_file({"a": {"dtype": "F4", "shape": [1, 3], "data_offsets": [0, 2]}},
                            b"\0\0"),
                      "'a': F4[1, 3] is 3 elements of 4 bits, not a whole number of bytes"),
    "f4_wrong_size": (_file({"a": {"dtype": "F4", "shape": [1, 2], "data_offsets": [0, 2]}},
                            b"\0\0"),
                      "'a': data_offsets [0, 2] hold 2 bytes, but F4[1, 2] needs 1"),
    "f6_misaligned": (_file({"a": {"dtype": "F6_E2M3", "shape": [3], "data_offsets": [0, 3]}},
                            b"\0\0\0"),
                      "'a': F6_E2M3[3] is 3 elements of 6 bits, not a whole number of bytes"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_header_case(tmp_path, name):
    data, refused = CASES[name]
    assert _reference_accepts(data) is (refused is None), "the reference disagrees"
    path = tmp_path / f"{name}.safetensors"
    path.write_bytes(data)
    if refused is None:
        tree = safetensors_format.load(path)
        assert all(np.asarray(x).size == 0 or not np.asarray(x).any()
                   for x in _flat(tree))  # fmt: skip
        return
    with pytest.raises(LoadError) as info:
        safetensors_format.load(path)
    assert refused in str(info.value) and str(path) in str(info.value)


def _flat(tree):
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _flat(v)]
    return [tree]


def test_reference_cases_read_their_shapes(tmp_path):
    for name, shape in [("zero_sized_tensor", (2, 0)), ("empty_shape_is_a_scalar", ()),
                        ("deserialization", (2, 2))]:  # fmt: skip
        path = tmp_path / f"{name}.safetensors"
        path.write_bytes(CASES[name][0])
        leaf = load(path)["test"]
        assert (leaf.shape, str(leaf.dtype)) == (shape, "int32")
        np.testing.assert_array_equal(np.asarray(leaf), np.zeros(shape, np.int32))


# --- every dtype, exact ------------------------------------------------------------------------

# code: (ml_dtypes type, bits, hand-known values: code -> value)
DTYPES = {
    "F8_E4M3FNUZ": (ml_dtypes.float8_e4m3fnuz, 8,
                    {0x00: 0.0, 0x08: 2.0**-7 * 1, 0x40: 1.0, 0x7F: 240.0, 0xFF: -240.0}),
    "F8_E5M2FNUZ": (ml_dtypes.float8_e5m2fnuz, 8,
                    {0x00: 0.0, 0x40: 1.0, 0x7F: 57344.0, 0x01: 2.0**-17}),
    "F4": (ml_dtypes.float4_e2m1fn, 4,
           {0: 0.0, 1: 0.5, 2: 1.0, 3: 1.5, 4: 2.0, 5: 3.0, 6: 4.0, 7: 6.0, 9: -0.5, 15: -6.0}),
    "F6_E2M3": (ml_dtypes.float6_e2m3fn, 6, {0: 0.0, 1: 0.125, 8: 1.0, 31: 7.5, 63: -7.5}),
    "F6_E3M2": (ml_dtypes.float6_e3m2fn, 6, {0: 0.0, 1: 0.0625, 12: 1.0, 31: 28.0, 63: -28.0}),
}  # fmt: skip


def _pack_bits(codes: list[int], bits: int) -> bytes:
    """Element i at bits [bits*i, bits*(i+1)) of one little-endian bit stream (an int here)."""
    stream = sum(c << (bits * i) for i, c in enumerate(codes))
    return stream.to_bytes(len(codes) * bits // 8, "little")


@pytest.mark.parametrize("code", sorted(DTYPES))
def test_every_code_of_each_dtype_reads_its_exact_value(tmp_path, code):
    dtype, bits, known = DTYPES[code]
    codes = list(range(1 << bits)) * 2  # every code, twice: rows of 2 ** bits
    shape = [2, 1 << bits]
    data = _pack_bits(codes, bits)
    header = {"w": {"dtype": code, "shape": shape, "data_offsets": [0, len(data)]}}
    raw = _file(header, data)
    assert _reference_accepts(raw)
    path = tmp_path / f"{code}.safetensors"
    path.write_bytes(raw)
    leaf = load(path)["w"]
    got = np.asarray(leaf).astype(np.float64)
    want = np.array(codes, np.uint8).view(dtype).astype(np.float64).reshape(shape)
    np.testing.assert_array_equal(got, want)  # NaNs in the same places count as equal
    for c, value in known.items():
        assert got[0, c] == value, (code, hex(c))
    sub_byte = bits < 8
    assert leaf.dtype == (np.dtype(np.float32) if sub_byte else np.dtype(dtype))
    assert inspector.describe({"w": leaf})[1].dtype == ("float32" if sub_byte else code_name(dtype))


def code_name(dtype) -> str:
    return np.dtype(dtype).name


@pytest.mark.parametrize("code", sorted(DTYPES))
def test_ops_and_statistics_compute_them_in_float32(tmp_path, code):
    dtype, bits, _ = DTYPES[code]
    codes = np.arange(1 << bits, dtype=np.uint8)
    values = codes.view(dtype).astype(np.float64)
    codes = codes[np.isfinite(values)]
    data = _pack_bits(codes.tolist()[: len(codes) // 4 * 4], bits)
    n = len(data) * 8 // bits
    path = tmp_path / "w.safetensors"
    path.write_bytes(_file({"w": {"dtype": code, "shape": [n], "data_offsets": [0, len(data)]}},
                           data))  # fmt: skip
    tree = load(path)
    result = inspector.weighted_sum([tree, tree], [0.25, 0.5])
    expected = 0.75 * codes[:n].view(dtype).astype(np.float64)
    got = np.asarray(result["w"]).astype(np.float64)
    if bits < 8:  # float32 leaves: the float32 result of the exact values
        np.testing.assert_allclose(got, expected, rtol=1e-7)
    else:  # like bfloat16: accumulated in float32, rounded once to the leaf's dtype
        np.testing.assert_array_equal(got, expected.astype(np.float32).astype(dtype)
                                      .astype(np.float64))  # fmt: skip


def test_save_packs_sub_byte_floats_and_the_reference_reads_them(tmp_path):
    rng = np.random.default_rng(3)
    tree = {
        "f4": rng.integers(0, 16, (3, 4), dtype=np.uint8).view(ml_dtypes.float4_e2m1fn),
        "f6": rng.integers(0, 64, (2, 8), dtype=np.uint8).view(ml_dtypes.float6_e3m2fn),
        "fnuz": rng.integers(0, 255, (5,), dtype=np.uint8).view(ml_dtypes.float8_e4m3fnuz),
        "w": rng.standard_normal((3, 3)).astype(np.float32),
    }
    path = inspector.save(tree, tmp_path / "packed.safetensors")
    got = dict(reference.deserialize(path.read_bytes()))
    assert got["f4"]["dtype"] == "F4" and got["f4"]["shape"] == [3, 4]
    assert bytes(got["f4"]["data"]) == _pack_bits(tree["f4"].view(np.uint8).ravel().tolist(), 4)
    assert bytes(got["f6"]["data"]) == _pack_bits(tree["f6"].view(np.uint8).ravel().tolist(), 6)
    assert got["fnuz"]["dtype"] == "F8_E4M3FNUZ"
    back = load(path)
    for name, x in tree.items():
        np.testing.assert_array_equal(np.asarray(back[name]).astype(np.float64),
                                      x.astype(np.float64))  # fmt: skip


def test_save_refuses_a_sub_byte_tensor_of_a_fractional_byte_count(tmp_path):
    odd = np.zeros(3, np.uint8).view(ml_dtypes.float4_e2m1fn)
    with pytest.raises(inspector.InspectorError, match="3 elements of 4 bits, not a whole number"):
        inspector.save({"a": odd}, tmp_path / "odd.safetensors")


def test_the_streamed_writer_writes_files_the_reference_accepts(tmp_path):
    a = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, ml_dtypes.bfloat16)}
    out = tmp_path / "sum.safetensors"
    inspector.weighted_sum([a, a], [0.5, 0.25], out=out)
    got = dict(reference.deserialize(out.read_bytes()))
    np.testing.assert_array_equal(np.frombuffer(got["w"]["data"], np.float32).reshape(2, 3),
                                  0.75 * a["w"])  # fmt: skip
    assert got["b"]["dtype"] == "BF16"
