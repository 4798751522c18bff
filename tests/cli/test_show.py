"""`pytree-inspector show`: the tree as text and JSON lines, against the file's own header."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import save_file

from inspector import examples
from inspector.core import node_text


def keystr(name: str) -> str:
    """A safetensors name as the key path the inspector shows (`a.b` -> `['a']['b']`)."""
    return "".join(f"[{part!r}]" for part in name.split("."))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """12 identical layers (which fold), written by the safetensors library with metadata."""
    tree = examples.transformer_checkpoint(n_layers=12)
    flat = {}

    def walk(node, prefix):
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                flat[f"{prefix}{k}"] = np.ascontiguousarray(v)

    walk(tree, "")
    path = tmp_path_factory.mktemp("show") / "model.safetensors"
    save_file(flat, str(path), metadata={"format": "pt", "step": "1200"})
    return path, flat


def test_show_folds_the_repeated_layers_under_the_metadata(cli, model):
    path, flat = model
    done = cli("show", path)
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    total = sum(a.nbytes for a in flat.values())
    params = sum(a.size for a in flat.values())
    assert lines[0] == (f"{path} · safetensors · {len(flat)} leaves · "
                        f"{node_text.human_count(params)} params · "
                        f"{node_text.human_bytes(total)}")
    assert lines[1:3] == ["metadata: format = pt", "metadata: step = 1200"]
    layer = {k: a for k, a in flat.items() if k.startswith("layers.layer_0000.")}
    each = sum(a.size for a in layer.values())
    in_all = sum(a.nbytes for k, a in flat.items() if k.startswith("layers."))
    fold = f"    ['layers'][0…11] ×12 (['layer_0000'] … ['layer_0011']) · dict of 4 · " \
           f"{each} params each · {in_all / 1024:.3g} KiB in all"
    assert fold in lines
    assert not any("layer_0003" in line for line in lines)  # folded away
    emb = flat["embed.tokens"]
    assert (f"    ['embed']['tokens'] float32[{emb.shape[0]},{emb.shape[1]}] · {emb.size} params"
            f" · {emb.nbytes / 1024:.3g} KiB") in lines


def test_all_lists_every_tensor_as_the_header_declares_it(cli, model):
    path, flat = model
    done = cli("show", path, "--all", "--json")
    assert done.returncode == 0
    records = done.records()
    assert records[0] == {"type": "file", "path": str(path), "format": "safetensors",
                          "metadata": {"format": "pt", "step": "1200"}, "leaves": len(flat),
                          "params": sum(a.size for a in flat.values()),
                          "bytes": sum(a.nbytes for a in flat.values())}
    leaves = {r["path"]: r for r in records if r["type"] == "node" and r["kind"] == "leaf"}
    assert set(leaves) == {keystr(k) for k in flat}
    for name, array in flat.items():
        r = leaves[keystr(name)]
        assert (r["shape"], r["dtype"], r["params"], r["bytes"]) == (
            list(array.shape), str(array.dtype), array.size, array.nbytes)
        assert r["depth"] == name.count(".") + 1
    assert not [r for r in records if r["type"] in ("fold", "range")]


def test_depth_and_match(cli, model):
    path, flat = model
    done = cli("show", path, "--depth", "1")
    assert [line.split(" · ")[0] for line in done.stdout.splitlines()[3:]] == [
        "(root) dict of 3", "  ['embed'] dict of 2", "  ['final_norm'] dict of 2",
        "  ['layers'] dict of 12"]
    done = cli("show", path, "--match", r"layer_001[01].*kernel", "--json")
    found = [r["path"] for r in done.records() if r["type"] == "node"]
    want = sorted(keystr(k) for k in flat if k.startswith(("layers.layer_0010.",
                                                             "layers.layer_0011."))
                  and k.endswith("kernel"))
    assert sorted(found) == want and len(want) == 12
    assert f"{len(want)} of " in done.stderr
    assert cli("show", path, "--match", "x", "-q").stderr == ""


def test_more_than_100_siblings_fold_into_ranges(cli, tmp_path):
    path = tmp_path / "many.safetensors"
    save_file({f"xs.{i}": np.full(2, i, np.float32) for i in range(250)}, str(path))
    done = cli("show", path)
    assert done.stdout.splitlines()[-3:] == [
        "    ['xs'][0–99] (['0'] … ['99']) · 100 leaves · 200 params · 800 B",
        "    ['xs'][100–199] (['100'] … ['199']) · 100 leaves · 200 params · 800 B",
        "    ['xs'][200–249] (['200'] … ['249']) · 50 leaves · 100 params · 400 B"]
    ranges = [r for r in cli("show", path, "--json").records() if r["type"] == "range"]
    assert [(r["lo"], r["hi"], r["leaves"], r["bytes"]) for r in ranges] == [
        (0, 100, 100, 800), (100, 200, 100, 800), (200, 250, 50, 400)]


def test_an_unreadable_file_or_bad_arguments_exit_2_without_a_traceback(cli, tmp_path):
    (tmp_path / "bad.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    done = cli("show", "bad.safetensors", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("pytree-inspector: Cannot load bad.safetensors: ")
    assert "Traceback" not in done.stderr
    done = cli("show", "bad.safetensors", "--depth", "-1", cwd=tmp_path)
    assert done.returncode == 2 and "--depth: '-1': give a whole number, 0 or more" in done.stderr
    done = cli("show", "x", "--match", "(", cwd=tmp_path)
    assert done.returncode == 2 and "is not a regular expression" in done.stderr


def test_show_and_diff_import_no_jax_and_no_ui(model):
    path, _ = model
    script = (
        "import sys\nfrom inspector.cli import main\n"
        f"assert main(['show', {str(path)!r}, '--all', '-q']) == 0\n"
        f"assert main(['diff', {str(path)!r}, {str(path)!r}]) == 0\n"
        "print(sorted(m for m in ('jax', 'panel', 'bokeh', 'param') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_a_quantized_weight_is_one_row_with_its_scheme_and_problems(cli, tmp_path):
    import ml_dtypes

    codes = np.ones((256, 384), ml_dtypes.float8_e4m3fn)
    save_file({"up.weight": codes, "up.weight_scale_inv": np.ones((2, 3), np.float32),
               "down.weight": codes[:128]}, str(tmp_path / "fp8.safetensors"))
    done = cli("show", tmp_path / "fp8.safetensors")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    up = next(line for line in lines if line.strip().startswith("['up']['weight']"))
    assert up.strip() == ("['up']['weight'] bfloat16[256,384] · fp8 e4m3 · 128x128 block "
                          "scales · 98.3K params · 96 KiB")
    assert not any("['weight_scale_inv']" in line for line in lines)  # inside its weight's row
    down = next(line for line in lines if line.strip().startswith("['down']['weight']"))
    assert "problem:" in down
    done = cli("show", tmp_path / "fp8.safetensors", "--json")
    records = [json.loads(line) for line in done.stdout.splitlines()]
    up = next(r for r in records if r.get("path") == "['up']['weight']")
    assert up["shape"] == [256, 384] and up["params"] == 256 * 384
    assert up["quant"]["scheme"] == "fp8"
    assert up["quant"]["members"]["scale"] == "['up']['weight_scale_inv']"


def test_a_model_folder_opens_its_model_file(cli, model, tmp_path):
    path, _ = model
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(path.read_bytes())
    done = cli("show", tmp_path / "m", "--depth", "0")
    assert done.returncode == 0
    assert done.stdout.splitlines()[1:3] == ["metadata: format = pt", "metadata: step = 1200"]
    (tmp_path / "two").mkdir()
    for name in ("a", "b"):
        save_file({"x": np.zeros(2, np.float32)}, str(tmp_path / "two" / f"{name}.safetensors"))
    done = cli("show", "two", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("pytree-inspector: Cannot load two: the folder holds 2 "
                                  ".safetensors files and no index (a.safetensors, "
                                  "b.safetensors, ...).")


def test_show_gives_a_gguf_files_key_values(cli, tmp_path):
    import gguf

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(2048)
    writer.add_token_list([f"t{i}" for i in range(300)])
    writer.add_tensor("blk.0.attn_q.weight", np.ones((2, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    done = cli("show", path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:4] == [
        "metadata: general.architecture = llama", "metadata: llama.context_length = 2048",
        "metadata: tokenizer.ggml.tokens = [300 × string: 't0', 't1', 't2', 't3', 't4', 't5', "
        "'t6', 't7', …]"]
    record = cli("show", path, "--json").records()[0]
    assert record["metadata"]["tokenizer.ggml.tokens"] == {
        "item_type": "string", "length": 300, "head": [f"t{i}" for i in range(8)]}
