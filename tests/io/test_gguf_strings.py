"""Long GGUF string arrays skipped by `gguf_strings` (NumPy-found length fields, the chain
followed in runs) land exactly where the string-by-string walk does, with every kind of
string a vocabulary holds: empty, one byte, 255 and 256 bytes, 70 kB, NUL bytes and fake
length fields inside the text, and a file that ends inside the array."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import inspector
from inspector.io import gguf_format, gguf_header
from tests.io.test_gguf_format import _Unmapped
from tests.io.test_gguf_hostile import ARRAY, STRING, _str, gguf_file, kv_u32, tensor_info

UINT32, FLOAT32 = 4, 6


def _awkward(n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    odd = [b"", b"a", b"\x00", b"\x00" * 9, b"a" + b"\x00" * 7 + b"b", b"x" * 255, b"y" * 256,
           b"z" * 300, struct.pack("<Q", 3) + b"abc", b"\x05" + b"\x00" * 7, b"w" * 70_000,
           "▁token".encode(), "Ġa b".encode()]
    out = []
    for i in range(n):
        if rng.random() < 0.05:
            out.append(odd[int(rng.integers(len(odd)))])
        else:
            out.append(f"tok{i}".encode() * int(rng.integers(1, 4)))
    return out


def _array_kv(key: str, items: list[bytes]) -> bytes:
    return (_str(key) + struct.pack("<I", ARRAY) + struct.pack("<IQ", STRING, len(items))
            + b"".join(map(_str, items)))


def _vocab_file(tmp_path, name, tokens, merges):
    scores = (_str("tokenizer.ggml.scores") + struct.pack("<I", ARRAY)
              + struct.pack("<IQ", FLOAT32, len(tokens))
              + np.arange(len(tokens), dtype=np.float32).tobytes())
    info, data = tensor_info("w", [8]), np.arange(8, dtype=np.float32).tobytes()
    kvs = [kv_u32("llama.context_length", 2048), _array_kv("tokenizer.ggml.tokens", tokens),
           scores, _array_kv("tokenizer.ggml.merges", merges), kv_u32("general.after", 7)]
    return gguf_file(tmp_path, name, kvs=kvs, infos=[info], data=data)


def _fast(location):
    gguf_format.forget()
    return gguf_format.read(location)


def _plain(monkeypatch, location):
    """The header read string by string (the skipper switched off)."""
    with monkeypatch.context() as m:
        m.setattr(gguf_header, "_VECTOR_MIN", 1 << 62)
        gguf_format.forget()
        return gguf_format.read(location)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_skipped_arrays_end_where_the_plain_walk_ends(tmp_path, monkeypatch, seed):
    tokens, merges = _awkward(20_000, seed), _awkward(9_000, seed + 10)
    path = _vocab_file(tmp_path, f"v{seed}", tokens, merges)
    gguf_format.forget()
    fast = gguf_format.read(path)
    assert fast == _plain(monkeypatch, path)
    meta = fast.metadata
    assert meta["general.after"] == 7 and meta["llama.context_length"] == 2048
    assert meta["tokenizer.ggml.tokens"].length == 20_000
    assert meta["tokenizer.ggml.tokens"].head == tuple(
        t.decode("utf-8", errors="replace") for t in tokens[:8])
    assert meta["tokenizer.ggml.scores"].length == 20_000
    assert meta["tokenizer.ggml.merges"].length == 9_000
    assert fast.tensors[0].name == "w" and fast.tensors[0].offset == fast.data_start
    assert np.asarray(inspector.load(path)["w"]).tolist() == list(range(8))
    # read by ranges (a remote file): the buffer grows under the skipper
    gguf_format.forget()
    assert gguf_format.read(_Unmapped(path)) == fast


def test_a_file_ending_inside_the_array_names_the_array(tmp_path):
    tokens = _awkward(20_000, 5)
    path = _vocab_file(tmp_path, "whole", tokens, [b"a b"])
    data = path.read_bytes()
    cut = data.index(b"tokenizer.ggml.scores") - 5000  # inside the last tokens
    for location in (path.with_name("cut.gguf"), _Unmapped(path.with_name("cut.gguf"))):
        path.with_name("cut.gguf").write_bytes(data[:cut])
        gguf_format.forget()
        with pytest.raises(inspector.LoadError, match="a string of 'tokenizer.ggml.tokens'"):
            gguf_format.read(location)


def test_a_length_past_the_file_is_refused_not_followed(tmp_path):
    tokens = [b"tok%d" % i for i in range(5000)]
    blob = bytearray(_array_kv("tokenizer.ggml.tokens", tokens))
    at = blob.index(b"tok2500") - 8
    blob[at:at + 8] = struct.pack("<Q", 2**40)  # a length far past the end of the file
    path = gguf_file(tmp_path, "long", kvs=[bytes(blob)])
    with pytest.raises(inspector.LoadError, match="a string of 'tokenizer.ggml.tokens'"):
        gguf_format.read(path)


def test_a_128k_vocabulary_reads_its_head_and_every_key_after_it(tmp_path, monkeypatch):
    tokens = [f"▁token{i}".encode() for i in range(128_256)]
    merges = [f"Ġa{i} b{i}".encode() for i in range(50_000)]
    path = _vocab_file(tmp_path, "llama3", tokens, merges)
    gguf_format.forget()
    header = gguf_format.read(path)
    array = header.metadata["tokenizer.ggml.tokens"]
    assert array.length == 128_256 and array.head[:2] == ("▁token0", "▁token1")
    assert str(array).startswith("[128,256 × string: '▁token0'")
    assert header.metadata["tokenizer.ggml.merges"].head[0] == "Ġa0 b0"
    assert header.metadata["general.after"] == 7
    assert header == _plain(monkeypatch, path)
    assert header.bytes_read >= header.data_start - 32  # the walk read the whole header


def test_a_vocabulary_of_long_strings_is_walked_string_by_string(tmp_path, monkeypatch):
    tokens = [b"%05d" % i + b"l" * (250 + i % 20) for i in range(6000)]  # most of 256+ bytes
    path = _vocab_file(tmp_path, "long", tokens, [b"a b"] * 3000)
    gguf_format.forget()
    header = gguf_format.read(path)
    assert header == _plain(monkeypatch, path)
    assert header.metadata["tokenizer.ggml.tokens"].head[0] == "00000" + "l" * 250


def test_mutated_vocabularies_read_or_fail_as_the_plain_walk_does(tmp_path, monkeypatch):
    path = _vocab_file(tmp_path, "seed", _awkward(6000, 7), _awkward(3000, 8))
    data = path.read_bytes()
    start = data.index(b"tokenizer.ggml.tokens")
    rng = np.random.default_rng(3)
    for trial in range(40):
        mutated = bytearray(data)
        for at in rng.integers(start, len(data) - 64, 1 + trial % 4):
            mutated[at] = int(rng.integers(256)) if trial % 3 else 0
        bad = tmp_path / f"m{trial}.gguf"
        bad.write_bytes(bytes(mutated))
        outcomes = []
        for read in (_fast, lambda p: _plain(monkeypatch, p)):
            try:
                outcomes.append(read(bad))
            except inspector.LoadError as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1], trial
