"""GGUF files written by llama.cpp's own `gguf.GGUFWriter`: structure, values, ops, diff.

Values are checked against NumPy float64 implementations of each block format's definition
(ggml-quants.c's `dequantize_row_*`) on hand-made blocks whose answer is known, not against
the library that reads them.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import inspector
from inspector.io import gguf_format, sniff
from inspector.io.location import LocalFile, Location

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType


def write_gguf(path, tensors: dict, arch: str = "llama", **kv) -> str:
    """Writes `{name: array}` (or `{name: (raw uint8 blocks, ggml type)}`) with GGUFWriter."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(kv.get("context_length", 4096))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_token_list(kv.get("tokens", ["<unk>", "<s>", "</s>", "hello"]))
    for name, value in tensors.items():
        if isinstance(value, tuple):
            raw, qtype = value
            writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)
        else:
            writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


# --- hand-made blocks and their float64 definitions -----------------------------------------


def q8_0_blocks(rng, rows: int, blocks: int):
    """Raw Q8_0 rows (d: f16, then 32 int8) and their float64 values d * q."""
    d = rng.uniform(0.01, 2, (rows, blocks)).astype(np.float16)
    q = rng.integers(-128, 128, (rows, blocks, 32)).astype(np.int8)
    raw = np.concatenate([d[..., None].view(np.uint8), q.view(np.uint8)], axis=-1)
    values = d.astype(np.float64)[..., None] * q.astype(np.float64)
    return raw.reshape(rows, blocks * 34), values.reshape(rows, blocks * 32)


def q4_0_blocks(rng, rows: int, blocks: int):
    """Raw Q4_0 rows (d: f16, 16 bytes of nibbles) and values d * (nibble - 8); value j is
    byte j's low nibble, value j + 16 its high nibble."""
    d = rng.uniform(0.01, 2, (rows, blocks)).astype(np.float16)
    qs = rng.integers(0, 256, (rows, blocks, 16)).astype(np.uint8)
    raw = np.concatenate([d[..., None].view(np.uint8), qs], axis=-1)
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float64) - 8
    values = d.astype(np.float64)[..., None] * nibbles
    return raw.reshape(rows, blocks * 18), values.reshape(rows, blocks * 32)


def q4_k_blocks(rng, rows: int, blocks: int):
    """Raw Q4_K rows (d, dmin: f16; 12 bytes of 6-bit scales/mins; 128 bytes of nibbles) and
    their values, as ggml's dequantize_row_q4_K defines them, in float64."""
    d = rng.uniform(0.001, 0.1, (rows, blocks)).astype(np.float16)
    dmin = rng.uniform(0.001, 0.1, (rows, blocks)).astype(np.float16)
    scales = rng.integers(0, 256, (rows, blocks, 12)).astype(np.uint8)
    qs = rng.integers(0, 256, (rows, blocks, 128)).astype(np.uint8)
    raw = np.concatenate(
        [d[..., None].view(np.uint8), dmin[..., None].view(np.uint8), scales, qs], axis=-1
    )
    values = np.empty((rows, blocks, 256))
    for r in range(rows):
        for b in range(blocks):
            s = scales[r, b].astype(np.int64)

            def scale_min(j, s=s):
                if j < 4:
                    return s[j] & 63, s[j + 4] & 63
                return (
                    (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
                    (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
                )

            for chunk in range(4):
                q = qs[r, b, 32 * chunk : 32 * chunk + 32].astype(np.float64)
                for half, nib in enumerate((q % 16, q // 16)):
                    sc, m = scale_min(2 * chunk + half)
                    at = 64 * chunk + 32 * half
                    values[r, b, at : at + 32] = float(d[r, b]) * sc * nib - float(dmin[r, b]) * m
    return raw.reshape(rows, blocks * 144), values.reshape(rows, blocks * 256)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A small llama-like GGUF: F32, F16, BF16, Q8_0, Q4_0 and Q4_K tensors."""
    rng = np.random.default_rng(0)
    q8, q8_values = q8_0_blocks(rng, 3, 2)
    q4, q4_values = q4_0_blocks(rng, 5, 1)
    q4k, q4k_values = q4_k_blocks(rng, 2, 2)
    norm = rng.standard_normal(64).astype(np.float32)
    embed = rng.standard_normal((6, 64)).astype(np.float16)
    bf16 = rng.standard_normal((2, 32)).astype(np.float32)
    path = write_gguf(
        tmp_path_factory.mktemp("gguf") / "model.gguf",
        {
            "token_embd.weight": embed,
            "blk.0.attn_norm.weight": norm,
            "blk.0.attn_q.weight": (q8, Q.Q8_0),
            "blk.0.ffn_up.weight": (q4, Q.Q4_0),
            "blk.0.ffn_down.weight": (q4k, Q.Q4_K),
            "output.weight": (gguf.quants.quantize(bf16, Q.BF16), Q.BF16),
        },
        context_length=2048,
    )
    expected = {
        "embed": embed,
        "norm": norm,
        "q8": q8_values,
        "q4": q4_values,
        "q4k": q4k_values,
        "bf16": bf16,
    }
    return path, expected


def test_structure_without_reading_data(model):
    path, _ = model
    assert sniff(path) == "gguf"
    tree = inspector.load(path)
    block = tree["blk"]["0"]
    assert block["attn_q"]["weight"].shape == (3, 64)  # NumPy order: ggml's ne reversed
    assert block["ffn_up"]["weight"].shape == (5, 32)
    assert block["ffn_down"]["weight"].shape == (2, 512)
    assert tree["token_embd"]["weight"].dtype == np.float16
    assert block["attn_norm"]["weight"].dtype == np.float32
    assert str(tree["output"]["weight"].dtype) == "bfloat16"
    assert block["attn_q"]["weight"].dtype == np.float32  # dequantized when read
    rows = {r.path: r for r in inspector.describe(tree)}
    assert (
        rows["['blk']['0']['attn_q']['weight']"].quant
        == "Q8_0 · 8.5 bits/value · 204 B in the file"
    )  # 3 rows x 2 blocks x 34 bytes
    assert rows["['blk']['0']['ffn_down']['weight']"].quant.startswith("Q4_K · 4.5 bits/value")
    assert rows["['blk']['0']['attn_norm']['weight']"].quant is None


def test_metadata_is_the_file_info(model):
    path, _ = model
    info = inspector.file_info(path)
    assert info.format == "gguf" and info.problems == ()
    assert info.metadata["general.architecture"] == "llama"
    assert info.metadata["llama.context_length"] == 2048
    assert info.metadata["general.quantization_version"] == gguf.GGML_QUANT_VERSION
    tokens = info.metadata["tokenizer.ggml.tokens"]
    assert (tokens.item_type, tokens.length, tokens.head) == (
        "string",
        4,
        ("<unk>", "<s>", "</s>", "hello"),
    )
    assert "llama.context_length: 2048" in info.lines()


def test_long_arrays_keep_their_head(tmp_path):
    tokens = [f"tok{i}" for i in range(1000)]
    path = write_gguf(tmp_path / "vocab.gguf", {"w": np.zeros(4, np.float32)}, tokens=tokens)
    array = inspector.file_info(path).metadata["tokenizer.ggml.tokens"]
    assert array.length == 1000 and array.head == tuple(tokens[:8])
    assert str(array).startswith("[1,000 × string: 'tok0', 'tok1'") and str(array).endswith("…]")


def test_header_larger_than_one_read(tmp_path):
    tokens = [f"token-{i:06d}" for i in range(150_000)]  # 2.7 MB of strings: several reads
    path = write_gguf(tmp_path / "big.gguf", {"w": np.arange(4, dtype=np.float32)}, tokens=tokens)
    header = gguf_format.read(path)
    assert header.metadata["tokenizer.ggml.tokens"].length == 150_000
    assert header.bytes_read > 2 * (1 << 20)
    assert np.asarray(inspector.load(path)["w"]).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("key, name", [("q8", "attn_q"), ("q4", "ffn_up"), ("q4k", "ffn_down")])
def test_quantized_values_equal_the_definition(model, key, name):
    path, expected = model
    got = np.asarray(inspector.load(path)["blk"]["0"][name]["weight"])
    want = expected[key]
    if key == "q4k":  # float32 products of f16 scales: a rounding apart
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    else:  # f16 scale x small integer: exact in float32
        assert got.dtype == np.float32 and np.array_equal(got.astype(np.float64), want)


def test_plain_values_are_the_bytes(model):
    path, expected = model
    tree = inspector.load(path)
    assert np.array_equal(np.asarray(tree["token_embd"]["weight"]), expected["embed"])
    assert np.array_equal(np.asarray(tree["blk"]["0"]["attn_norm"]["weight"]), expected["norm"])
    bf16 = np.asarray(tree["output"]["weight"]).astype(np.float64)
    np.testing.assert_allclose(bf16, expected["bf16"], rtol=2**-8)


def test_writer_quantized_file_is_close_to_its_source(tmp_path):
    x = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
    files = {}
    for qtype in (Q.Q8_0, Q.Q4_0):
        raw = gguf.quants.quantize(x, qtype)
        files[qtype.name] = write_gguf(tmp_path / f"m-{qtype.name}.gguf", {"w": (raw, qtype)})
    q8 = np.asarray(inspector.load(files["Q8_0"])["w"])
    q4 = np.asarray(inspector.load(files["Q4_0"])["w"])
    scale = np.abs(x).reshape(8, 8, 32).max(-1, keepdims=True)
    # half a step, plus the f16 rounding of the scale times up to 127 steps
    assert np.all(np.abs(q8 - x).reshape(8, 8, 32) <= scale / 127 * (0.5 + 127 * 2**-11))
    assert np.all(np.abs(q4 - x).reshape(8, 8, 32) <= scale / 8 * 1.01 + 1e-6)


def test_quant_vs_quant_diff_of_one_model(tmp_path):
    rng = np.random.default_rng(2)
    weights = {
        "blk.0.attn_q.weight": rng.standard_normal((4, 64)).astype(np.float32),
        "blk.0.ffn_up.weight": rng.standard_normal((2, 128)).astype(np.float32),
    }
    trees = {}
    for qtype in (Q.Q8_0, Q.Q4_0):
        path = write_gguf(
            tmp_path / f"m-{qtype.name}.gguf",
            {n: (gguf.quants.quantize(w, qtype), qtype) for n, w in weights.items()},
        )
        trees[qtype.name] = inspector.load(path)
    differences = inspector.diff(trees["Q8_0"], trees["Q4_0"], values=True)
    assert {d.kind for d in differences} == {"value"}
    for d in differences:
        name = d.path.replace("']['", ".").strip("[']")
        a = gguf.quants.dequantize(gguf.quants.quantize(weights[name], Q.Q8_0), Q.Q8_0)
        b = gguf.quants.dequantize(gguf.quants.quantize(weights[name], Q.Q4_0), Q.Q4_0)
        want = np.abs(a.astype(np.float64) - b.astype(np.float64)).max()
        assert d.max_abs == pytest.approx(want, rel=1e-6)


def test_ops_run_on_dequantized_leaves(model):
    path, expected = model
    tree = inspector.load(path)
    result = inspector.weighted_sum([tree, tree], [0.25, 0.5])
    got = np.asarray(result["blk"]["0"]["attn_q"]["weight"])
    np.testing.assert_allclose(got, 0.75 * expected["q8"], rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_dequantize_writes_the_quantized_tensors_in_its_dtype(model, tmp_path, dtype):
    path, expected = model
    tree = inspector.load(path)
    out = inspector.dequantize(tree, dtype)
    block = out["blk"]["0"]
    for name, key in (("attn_q", "q8"), ("ffn_up", "q4"), ("ffn_down", "q4k")):
        got = np.asarray(block[name]["weight"])  # ggml's float64 definition, rounded once
        assert got.dtype == np.dtype(dtype)
        want = expected[key].astype(np.float32).astype(got.dtype)
        assert got.tobytes() == want.tobytes(), name
    # tensors the file holds as plain floats (F32, F16, BF16) are kept as they are
    assert block["attn_norm"]["weight"] is tree["blk"]["0"]["attn_norm"]["weight"]
    assert out["token_embd"]["weight"] is tree["token_embd"]["weight"]
    inspector.dequantize(tree, dtype, out=tmp_path / "w.safetensors")  # streamed to a file
    written = inspector.load(tmp_path / "w.safetensors")
    assert np.asarray(written["blk"]["0"]["ffn_up"]["weight"]).tobytes() == \
        np.asarray(block["ffn_up"]["weight"]).tobytes()
    # packed (as the app holds it): its slots remember what the file held quantized
    packed = inspector.dequantize(inspector.pack(tree), dtype)
    packed = packed.unpack() if isinstance(packed, inspector.PackedTree) else packed
    for name in ("attn_q", "ffn_up", "ffn_down", "attn_norm"):
        got, want = (np.asarray(t["blk"]["0"][name]["weight"]) for t in (packed, out))
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), name


def test_zero_size_tensor_loads(tmp_path):
    path = write_gguf(tmp_path / "empty.gguf", {"w": np.zeros((0, 32), np.float32)})
    leaf = inspector.load(path)["w"]
    assert leaf.shape == (0, 32) and np.asarray(leaf).shape == (0, 32)


def test_header_read_reports_its_bytes(model):
    path, _ = model
    header = gguf_format.read(path)
    assert header.version == 3 and header.alignment == 32
    assert 0 < header.bytes_read <= (1 << 20)
    assert [t.type_name for t in header.tensors] == ["F16", "F32", "Q8_0", "Q4_0", "Q4_K", "BF16"]


class _Unmapped(Location):
    """A local file read by ranges only, as a remote one is (no memory map)."""

    def __init__(self, path):
        self._file = LocalFile(path)
        self.name = f"unmapped:{path}"
        self.reads = 0

    def exists(self):
        return self._file.exists()

    def is_dir(self):
        return False

    def size(self):
        return self._file.size()

    def read(self, start, end):
        self.reads += 1
        return self._file.read(start, end)

    def array_reader(self, offset, dtype, shape, order="C"):
        return self._file.array_reader(offset, dtype, shape, order)


def test_header_read_by_ranges_grows_its_buffer(tmp_path):
    tokens = [f"t{i}" * (1 + i % 7) for i in range(100_000)]  # ~1 MB: many chunks
    path = write_gguf(
        tmp_path / "ranges.gguf", {"w": np.arange(4, dtype=np.float32)}, tokens=tokens
    )
    location = _Unmapped(path)
    by_ranges, mapped = gguf_format.read(location), gguf_format.read(path)
    assert by_ranges.metadata == mapped.metadata and by_ranges.tensors == mapped.tensors
    assert by_ranges.bytes_read >= by_ranges.data_start - 32
    assert location.reads <= 8  # 64 KiB, then doubling
    truncated = tmp_path / "truncated.gguf"
    data = pathlib.Path(path).read_bytes()
    truncated.write_bytes(data[: len(data) - 50_000])  # inside the vocabulary
    with pytest.raises(inspector.LoadError, match="a string of 'tokenizer.ggml.tokens'"):
        gguf_format.read(_Unmapped(truncated))


def test_nonfinite_scales_read_as_values_not_warnings(tmp_path):
    d = np.array([np.inf, np.nan], np.float16)  # two Q8_0 blocks: scale inf, then NaN
    q = np.zeros((2, 32), np.int8)
    q[0, 1] = 3
    raw = np.concatenate([d[:, None].view(np.uint8), q.view(np.uint8)], axis=1).reshape(1, 68)
    path = write_gguf(tmp_path / "nonfinite.gguf", {"w": (raw, Q.Q8_0)})
    values = np.asarray(inspector.load(path)["w"])  # warnings are errors under pytest
    assert np.isnan(values[0, 0]) and values[0, 1] == np.inf and np.isnan(values[0, 32:]).all()


def test_a_header_is_read_once_until_its_file_changes(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", {"w": np.zeros(4, np.float32)})
    first = gguf_format.read(path)
    assert gguf_format.read(path) is first  # the app reads it for the tree, then the metadata
    with pytest.raises(TypeError):
        first.metadata["general.architecture"] = "x"  # shared, so read-only
    write_gguf(path, {"w": np.zeros(8, np.float32)})
    assert gguf_format.read(path).tensors[0].shape == (8,)
