"""`pytree-inspector check`: index, quantization and refused-file problems; exit 1 when any."""

from __future__ import annotations

import json
import pathlib

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("check")
    sharded = folder / "sharded"
    sharded.mkdir()
    save_file({"a": np.ones(2, np.float32)}, str(sharded / "model-00001-of-00002.safetensors"))
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                        "b": "model-00002-of-00002.safetensors"}}))
    rng = np.random.default_rng(0)
    save_file({"up.weight": rng.standard_normal((256, 384)).astype(ml_dtypes.float8_e4m3fn),
               "up.weight_scale_inv": np.ones((2, 3), np.float32),
               "down.weight_scale_inv": np.ones((1, 1), np.float32)},
              str(folder / "fp8.safetensors"))
    save_file({"w": np.ones((2, 2), np.float32)}, str(folder / "clean.safetensors"))
    good = (folder / "clean.safetensors").read_bytes()
    # a header that claims more data than the file holds: refused as damaged
    (folder / "damaged.safetensors").write_bytes(good[:-4])
    return folder


def test_missing_shard_is_named(cli, files):
    done = cli("check", "sharded", cwd=files)  # a model folder: its index
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("index: missing_file: model-00002-of-00002.safetensors: ")
    assert lines[-1] == "1 problem(s) (1 index)."
    records = cli("check", "sharded/model.safetensors.index.json", "--json",
                  cwd=files).records()
    assert records[0] == {"type": "problem", "source": "index", "kind": "missing_file",
                          "path": "model-00002-of-00002.safetensors",
                          "detail": records[0]["detail"]}
    assert records[-1]["problems"] == 1 and records[-1]["tensors"] == 1


def test_quantization_orphan_and_refused_file(cli, files):
    done = cli("check", "fp8.safetensors", cwd=files)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "quant: ['down']['weight']: fp8: no weight: the scale 'weight_scale_inv' has no "
        "float8 weight 'weight' beside it",
        "1 problem(s) (1 quant).",
    ]
    done = cli("check", "damaged.safetensors", "--json", cwd=files)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    problem, summary = done.records()
    assert (problem["source"], problem["path"]) == ("refused", "damaged.safetensors")
    assert "damaged.safetensors" in problem["detail"]
    assert summary["problems"] == 1 and summary["tensors"] is None


def test_hostile_pickle_is_a_finding_and_nothing_runs(cli, tmp_path):
    hostile = pathlib.Path(__file__).parents[1] / "io" / "hostile" / "torch_reduce_os_system.pt"
    done = cli("check", hostile, cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stdout.splitlines()  # the library's message, its fix on a line of its own
    assert lines[0].startswith("refused: Cannot load ") and "torch_reduce_os_system" in lines[0]
    assert "this file asks to run os.system: refused; nothing was run" in lines[0]
    assert lines[-1] == "1 problem(s) (1 refused)."


def test_clean_file_exits_0_and_a_missing_path_exits_2(cli, files):
    done = cli("check", "clean.safetensors", cwd=files)
    assert (done.returncode, done.stdout) == (
        0, "No problems: 1 tensors, 0 quantized weights, all whole.\n")
    done = cli("check", "nope.safetensors", cwd=files)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("pytree-inspector: Cannot check nope.safetensors: the path does "
                           "not exist.\n")


def test_a_gguf_s_quantized_tensors_are_counted_by_type(cli, tmp_path):
    gguf = pytest.importorskip("gguf")
    from tests.io.test_gguf_format import write_gguf

    q8, q4 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0
    w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    write_gguf(tmp_path / "m.gguf", {"a.weight": (gguf.quants.quantize(w, q8), q8),
                                     "b.weight": (gguf.quants.quantize(w, q4), q4),
                                     "c.weight": (gguf.quants.quantize(w, q4), q4),
                                     "norm.weight": np.ones(64, np.float32)})
    done = cli("check", "m.gguf", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (
        0, "No problems: 4 tensors, 3 quantized weights (1 Q8_0, 2 Q4_0), all whole.\n")
    summary = cli("check", "m.gguf", "--json", cwd=tmp_path).records()[-1]
    assert summary["stored_quantized"] == {"Q8_0": 1, "Q4_0": 2}
