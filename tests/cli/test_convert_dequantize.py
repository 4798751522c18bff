"""`pytree-inspector convert` and `dequantize`: the written files against NumPy references."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A torch-style source, the Flax-style target it ports onto bit for bit (kernels
    transposed), a target with a leaf nothing fits, and an FP8 checkpoint with block scales
    and one orphan scale."""
    folder = tmp_path_factory.mktemp("port")
    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 4), (3, 8)))
    b1 = rng.standard_normal(8).astype(np.float32)
    save_file({"fc1.weight": w1, "fc1.bias": b1, "fc2.weight": w2},
              str(folder / "torch.safetensors"))
    target = {"Dense_0.kernel": w1.T.copy(), "Dense_0.bias": b1, "Dense_1.kernel": w2.T.copy()}
    save_file(target, str(folder / "flax.safetensors"))
    save_file({**target, "head.kernel": np.zeros((5, 7), np.float32)},
              str(folder / "flax_head.safetensors"))
    codes = rng.standard_normal((256, 384)).astype(ml_dtypes.float8_e4m3fn)
    scale = rng.uniform(0.5, 2.0, (2, 3)).astype(np.float32)
    norm = rng.standard_normal(4).astype(np.float32)
    save_file({"up.weight": codes, "up.weight_scale_inv": scale, "norm.weight": norm},
              str(folder / "fp8.safetensors"))
    save_file({"up.weight": codes, "up.weight_scale_inv": scale,
               "down.weight_scale_inv": np.ones((1, 1), np.float32)},
              str(folder / "orphan.safetensors"))
    return folder, target, (codes, scale, norm)


def test_convert_writes_the_target_bit_for_bit(cli, files):
    folder, target, _ = files
    done = cli("convert", "torch.safetensors", "--to", "flax.safetensors", "-o",
               "ported.safetensors", "--save-mapping", "m.json", cwd=folder)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("aligned 3 target leaves (2 with a layout change), 0 unmatched, "
                        "0 ambiguous, 0 source leaves unused.")
    assert lines[1].startswith("wrote ported.safetensors: 3 tensors, 256 B in ")
    written = load_file(str(folder / "ported.safetensors"))
    assert sorted(written) == sorted(target)
    for name, value in target.items():
        assert written[name].dtype == value.dtype
        assert written[name].tobytes() == value.tobytes(), name
    assert json.loads((folder / "m.json").read_text())["format"] == "pytree-inspector alignment"
    # the saved mapping applied again, with --json
    done = cli("convert", "torch.safetensors", "--to", "flax.safetensors", "--mapping",
               "m.json", "-o", "again.npz", "--json", cwd=folder)
    assert done.returncode == 0, done.stderr
    records = done.records()
    pairs = {r["target"]: r for r in records if r["type"] == "pair"}
    assert pairs["['Dense_0']['kernel']"]["source"] == "['fc1']['weight']"
    assert pairs["['Dense_0']['kernel']"]["transform"] == "transpose (1, 0)"
    assert records[-1]["type"] == "summary" and records[-1]["tensors"] == 3
    from inspector import load

    again = load(str(folder / "again.npz"))  # nested as the target's key paths say
    for name, value in target.items():
        module, leaf = name.split(".")
        assert np.asarray(again[module][leaf]).tobytes() == value.tobytes(), name


def test_convert_unmatched_exits_1_unless_allowed(cli, files):
    folder, target, _ = files
    done = cli("convert", "torch.safetensors", "--to", "flax_head.safetensors", "-o",
               "x.safetensors", cwd=folder)
    assert done.returncode == 1
    # two kernels of one-kernel modules now, one fc2 to give: neither is guessed
    assert done.stdout.splitlines()[:2] == [
        "unmatched: ['Dense_1']['kernel']: no source leaf fits",
        "unmatched: ['head']['kernel']: no source leaf fits"]
    assert "nothing written" in done.stdout and not (folder / "x.safetensors").exists()
    done = cli("convert", "torch.safetensors", "--to", "flax_head.safetensors", "-o",
               "x.safetensors", "--allow-missing", "--json", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert {"type": "unmatched", "target": "['head']['kernel']"} in done.records()
    written = load_file(str(folder / "x.safetensors"))
    assert sorted(written) == ["Dense_0.bias", "Dense_0.kernel"]
    assert all(written[k].tobytes() == target[k].tobytes() for k in written)
    done = cli("convert", "torch.safetensors", "--to", "flax.safetensors", "--mapping",
               "nope.json", "-o", "y.safetensors", cwd=folder)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("pytree-inspector: Cannot read the mapping nope.json: ")


def test_dequantize_equals_codes_times_scale_in_float64(cli, files):
    folder, _, (codes, scale, norm) = files
    done = cli("dequantize", "fp8.safetensors", "-o", "bf16.safetensors", cwd=folder)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "dequantized 1 weight: fp8 e4m3 · 128x128 block scales"
    assert lines[1].startswith("wrote bf16.safetensors: 1 weight dequantized to bfloat16; "
                               "2 tensors, ")
    full = np.kron(scale.astype(np.float64), np.ones((128, 128)))
    expected = (codes.astype(np.float64) * full).astype(ml_dtypes.bfloat16)
    from inspector import load  # safetensors' NumPy reader has no bfloat16

    written = load(str(folder / "bf16.safetensors"))
    got = np.asarray(written["up"]["weight"])
    assert got.dtype == ml_dtypes.bfloat16 and got.shape == (256, 384)
    assert got.view(np.uint16).tolist() == expected.view(np.uint16).tolist()
    assert np.asarray(written["norm"]["weight"]).tobytes() == norm.tobytes()
    assert sorted(written) == ["norm", "up"] and sorted(written["up"]) == ["weight"]


def test_dequantize_lists_what_is_left_and_exits_1(cli, files):
    folder, _, (codes, scale, _) = files
    done = cli("dequantize", "orphan.safetensors", "-o", "f32.safetensors", "--dtype",
               "float32", "--json", cwd=folder)
    assert done.returncode == 1, done.stderr
    groups = [r for r in done.records() if r["type"] == "group"]
    assert [(g["path"], g["dequantized"]) for g in groups] == [("['up']['weight']", True),
                                                               ("['down']['weight']", False)]
    assert groups[1]["problems"][0].startswith("no weight")
    summary = done.records()[-1]
    assert (summary["dequantized"], summary["left"], summary["dtype"]) == (1, 1, "float32")
    written = load_file(str(folder / "f32.safetensors"))
    expected = codes.astype(np.float64) * np.kron(scale.astype(np.float64), np.ones((128, 128)))
    assert written["up.weight"].tobytes() == expected.astype(np.float32).tobytes()
    assert written["down.weight_scale_inv"].tolist() == [[1.0]]
    done = cli("dequantize", "fp8.safetensors", "-o", "x.safetensors", "--dtype", "int8",
               cwd=folder)
    assert done.returncode == 2 and "invalid choice: 'int8'" in done.stderr


def test_dequantize_writes_a_gguf_s_quantized_tensors_in_the_dtype(cli, tmp_path):
    gguf = pytest.importorskip("gguf")
    from tests.io.test_gguf_format import write_gguf

    q8 = gguf.GGMLQuantizationType.Q8_0
    w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    norm = np.arange(64, dtype=np.float32)
    write_gguf(tmp_path / "m.gguf", {"blk.0.attn_q.weight": (gguf.quants.quantize(w, q8), q8),
                                     "blk.0.attn_norm.weight": norm})
    done = cli("dequantize", "m.gguf", "-o", "f16.safetensors", "--dtype", "float16",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "dequantized 1 weight: Q8_0 (as the file's reader decodes it)"
    assert lines[1].startswith("wrote f16.safetensors: 1 weight dequantized to float16; ")
    written = load_file(str(tmp_path / "f16.safetensors"))
    q8_values = gguf.quants.dequantize(gguf.quants.quantize(w, q8), q8)  # llama.cpp's own
    assert written["blk.0.attn_q.weight"].dtype == np.float16
    assert written["blk.0.attn_q.weight"].tolist() == q8_values.astype(np.float16).tolist()
    assert written["blk.0.attn_norm.weight"].tobytes() == norm.tobytes()  # F32: kept
    done = cli("dequantize", "m.gguf", "-o", "x.safetensors", "--json", cwd=tmp_path)
    records = done.records()
    assert records[0] == {"type": "stored", "ggml_type": "Q8_0", "count": 1}  # one per type
    assert records[-1]["dequantized"] == 1 and records[-1]["dtype"] == "bfloat16"
