"""Malformed and hostile GGUF files: each a LoadError naming the problem, in well under a second.

The cases port llama.cpp's reader-validation tests (`tests/test-gguf.cpp`, its
`handcrafted_file_type`s): bad magic and versions, counts of tensors or key/values that no
file could hold, bad keys and value types, duplicate keys and names, bad alignments, too many
dimensions, negative or overflowing dimensions, unknown ggml types, bad and misaligned offsets,
truncated data; plus arrays and strings longer than the file. Each file is built byte by byte
here, so a case says exactly what it holds.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import inspector
from tests.io.io_assertions import assert_load_error

U64_MAX = 2**64 - 1
STRING, ARRAY, UINT32, INT32, UINT8 = 8, 9, 4, 5, 0
F32, I8, Q8_0 = 0, 24, 8


def _str(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv_u32(key: str, value: int, kind: int = UINT32) -> bytes:
    return _str(key) + struct.pack("<I", kind) + struct.pack("<I", value)


def tensor_info(
    name: str | bytes, ne, ggml_type: int = F32, offset: int = 0, n_dims: int | None = None
) -> bytes:
    dims = b"".join(struct.pack("<Q", d) for d in ne)
    return (
        _str(name)
        + struct.pack("<I", len(ne) if n_dims is None else n_dims)
        + dims
        + struct.pack("<II", ggml_type, 0)[:4]
        + struct.pack("<Q", offset)
    )


def gguf_file(
    tmp_path,
    name: str,
    kvs=(),
    infos=(),
    data: bytes = b"",
    *,
    magic=b"GGUF",
    version=3,
    n_tensors=None,
    n_kv=None,
    alignment=32,
    pad=True,
):
    """The bytes of a GGUF file: header, key/values, tensor infos, padding, data."""
    head = magic + struct.pack("<I", version)
    head += struct.pack(
        "<QQ", len(infos) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv
    )
    body = head + b"".join(kvs) + b"".join(infos)
    if pad:
        body += b"\0" * (-len(body) % alignment)
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(body + data)
    return path


def f32_tensor(n=8):
    return tensor_info("w", [n]), np.arange(n, dtype=np.float32).tobytes()


CASES = {
    # header
    "bad_magic": (dict(magic=b"FUGG"), ["the format is not recognised"]),
    "bad_version_0": (dict(version=0), ["its GGUF version is 0"]),
    "bad_version_1": (dict(version=1), ["its GGUF version is 1"]),
    "bad_version_future": (dict(version=4), ["its GGUF version is 4"]),
    "big_endian": (dict(version=3 << 24), ["big-endian GGUF"]),
    "bad_n_tensors": (dict(n_tensors=U64_MAX), ["declares 18446744073709551615 tensors"]),
    "bad_n_kv": (dict(n_kv=U64_MAX), ["18446744073709551615 key/values, more than"]),
    # key/values
    "kv_bad_key_size": (
        dict(kvs=[struct.pack("<Q", U64_MAX) + b"k"], n_kv=1),
        ["key 0 at byte 32 needs 18446744073709551615 bytes"],
    ),
    "kv_empty_key": (dict(kvs=[kv_u32("", 1)]), ["key 0 is empty"]),
    "kv_bad_type": (
        dict(kvs=[_str("k") + struct.pack("<I", 13) + b"\0" * 8]),
        ["the key 'k' has unknown value type 13"],
    ),
    "kv_duplicate_key": (dict(kvs=[kv_u32("k", 1), kv_u32("k", 2)]), ["the key 'k' appears twice"]),
    "kv_bad_align": (
        dict(kvs=[kv_u32("general.alignment", 13)]),
        ["general.alignment is 13, not a power of two"],
    ),
    "kv_zero_align": (
        dict(kvs=[kv_u32("general.alignment", 0)]),
        ["general.alignment is 0, not a power of two"],
    ),
    "kv_wrong_type_align": (
        dict(kvs=[kv_u32("general.alignment", 8, INT32)]),
        ["general.alignment is 8, not a uint32"],
    ),
    "kv_string_longer_than_file": (
        dict(kvs=[_str("k") + struct.pack("<I", STRING) + struct.pack("<Q", 2**40) + b"ab"]),
        ["the value of 'k'", "needs 1099511627776 bytes, but the file ends"],
    ),
    "kv_array_longer_than_file": (
        dict(kvs=[_str("k") + struct.pack("<IIQ", ARRAY, UINT8, 2**62) + b"\0" * 8]),
        ["the array 'k' declares 4611686018427387904 items", "bytes left in the file"],
    ),
    "kv_string_array_longer_than_file": (
        dict(kvs=[_str("k") + struct.pack("<IIQ", ARRAY, STRING, U64_MAX) + _str("a")]),
        ["the array 'k' declares 18446744073709551615 items of at least 8 bytes"],
    ),
    "kv_nested_array": (
        dict(
            kvs=[
                _str("k")
                + struct.pack("<IIQ", ARRAY, ARRAY, 1)
                + struct.pack("<IQ", UINT8, 1)
                + b"\0"
            ]
        ),
        ["the array 'k' has item type 9", "nested arrays"],
    ),
    # tensor infos
    "tensors_bad_name_size": (
        dict(infos=[struct.pack("<Q", U64_MAX) + b"w" * 24]),
        ["a tensor name at byte 32 needs 18446744073709551615"],
    ),
    "tensors_name_too_long": (
        dict(infos=[tensor_info("w" * 64, [4])], data=b"\0" * 16),
        ["its name is 64 bytes long, llama.cpp's limit is 63"],
    ),
    "tensors_bad_n_dims": (
        dict(infos=[tensor_info("w", [1, 1, 1, 1, 1])], data=b"\0" * 4),
        ["tensor 'w' has 5 dimensions, more than ggml's 4"],
    ),
    "tensors_bad_shape": (
        dict(infos=[tensor_info("w", [U64_MAX])]),
        ["tensor 'w': dimensions [18446744073709551615]", "overflow"],
    ),
    "tensors_ne_too_big": (
        dict(infos=[tensor_info("w", [4 * (2**31 - 1)] * 2)]),
        ["tensor 'w': dimensions [8589934588, 8589934588]", "overflow"],
    ),
    "tensors_nbytes_too_big": (
        dict(infos=[tensor_info("w", [2**31, 2**31], I8)]),
        ["tensor 'w' (I8, 4611686018427387904 bytes at data offset 0) ends past the file"],
    ),
    "tensors_bad_type": (
        dict(infos=[tensor_info("w", [4], 999)], data=b"\0" * 16),
        ["tensor 'w' has unknown ggml type 999"],
    ),
    "tensors_removed_type_q4_2": (
        dict(infos=[tensor_info("w", [32], 4)], data=b"\0" * 64),
        ["tensor 'w' has unknown ggml type 4"],
    ),
    "tensors_bad_offset": (
        dict(infos=[tensor_info("w", [4], offset=U64_MAX - 31)], data=b"\0" * 16),
        ["ends past the file"],
    ),
    "tensors_duplicate_name": (
        dict(infos=[tensor_info("w", [4]), tensor_info("w", [4], offset=32)], data=b"\0" * 48),
        ["tensor 'w' appears twice"],
    ),
    "tensors_misaligned_offset": (
        dict(infos=[tensor_info("a", [4]), tensor_info("b", [4], offset=16)], data=b"\0" * 32),
        ["tensor 'b' starts at data offset 16, not a multiple of the alignment 32"],
    ),
    "tensors_overlapping": (
        dict(infos=[tensor_info("a", [16]), tensor_info("b", [8], offset=32)], data=b"\0" * 64),
        ["tensors 'a' and 'b': their data overlap"],
    ),
    "tensors_partial_block": (
        dict(infos=[tensor_info("w", [33], Q8_0)], data=b"\0" * 68),
        ["its rows of 33 values are not whole Q8_0 blocks of 32"],
    ),
    # data
    "data_not_enough_data": (
        dict(infos=[tensor_info("w", [8])], data=b"\0" * 31),
        ["tensor 'w' (F32, 32 bytes at data offset 0) ends past the file"],
    ),
    "data_mem_size_overflow": (
        dict(
            infos=[
                tensor_info("a", [0x7FFFFFFFFFFFFFC0], I8),
                tensor_info("b", [0x7FFFFFFFFFFFFFC0], I8),
            ],
            data=b"\0" * 32,
        ),
        ["ends past the file"],
    ),
    "truncated_in_header": (dict(kvs=[kv_u32("k", 1)[:-2]], pad=False), ["the file ends"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_gguf_is_refused_fast(tmp_path, name):
    spec, fragments = CASES[name]
    path = gguf_file(tmp_path, name, **spec)
    assert_load_error(path, *fragments)


def test_empty_header_loads(tmp_path):
    assert inspector.load(gguf_file(tmp_path, "empty")) == {}


def test_zero_dimension_loads(tmp_path):  # llama.cpp: HANDCRAFTED_TENSORS_ZERO_DIM loads
    path = gguf_file(tmp_path, "zero_dim", infos=[tensor_info("w", [32, 0])])
    assert inspector.load(path)["w"].shape == (0, 32)


def test_custom_alignment_loads(tmp_path):  # HANDCRAFTED_DATA_CUSTOM_ALIGN: alignment 1
    info, data = f32_tensor(3)
    kvs = [kv_u32("general.alignment", 1)]
    path = gguf_file(
        tmp_path,
        "align1",
        kvs=kvs,
        infos=[info, tensor_info("v", [1], offset=12)],
        data=data + b"\0\0\x80\x3f",
        alignment=1,
    )
    tree = inspector.load(path)
    assert np.asarray(tree["w"]).tolist() == [0, 1, 2] and np.asarray(tree["v"]).tolist() == [1]


def test_valid_handmade_file_loads(tmp_path):
    info, data = f32_tensor()
    path = gguf_file(
        tmp_path, "valid", kvs=[kv_u32("llama.context_length", 8)], infos=[info], data=data
    )
    assert np.asarray(inspector.load(path)["w"]).tolist() == list(range(8))
    assert inspector.file_info(path).metadata == {"llama.context_length": 8}
