"""`pytree-inspector merge CONFIG.yml OUT_DIR` against merges mergekit itself computed.

The models and mergekit 0.1.5's results are the fixture of tests/core/test_merge_mergekit.py
(tests/core/fixtures/make_mergekit_fixtures.py made it); each model is written here as a
Hugging Face style folder (model.safetensors, config.json) and merged from a mergekit YAML.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import yaml

import inspector
from inspector import cli

FIXTURE = np.load(pathlib.Path(__file__).parents[1] / "core" / "fixtures"
                  / "mergekit_reference.npz")
CASES = {c["name"]: c for c in map(json.loads, FIXTURE["__cases__"])}
LEAVES = ("b", "conv", "w")

# The four configurations as a mergekit user writes them.
YAMLS = {
    "linear": """
merge_method: linear
models:
  - model: m0
    parameters: {weight: 0.3}
  - model: m1
    parameters: {weight: 0.5}
  - model: m2
    parameters: {weight: 0.2}
dtype: float32
""",
    "task_arithmetic": """
merge_method: task_arithmetic
base_model: base
models:
  - model: m0
    parameters:
      weight: 0.7
  - model: m1
    parameters:
      weight: 0.4
parameters:
  lambda: 0.8
""",
    "ties": """
merge_method: ties
base_model: base
models:
  - model: base
  - model: m0
    parameters: {weight: 1.0, density: 0.5}
  - model: m1
    parameters: {weight: 0.6, density: 0.3}
  - model: m2
    parameters: {weight: 0.8, density: 0.7}
parameters:
  normalize: true
  int8_mask: true
tokenizer_source: base
dtype: float32
""",
    "slerp": """
merge_method: slerp
base_model: m0
models:
  - model: m0
  - model: m1
parameters:
  t: 0.3
""",
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The fixture's input models as folders, beside which the tests write their YAML."""
    folder = tmp_path_factory.mktemp("merge")
    for name in ("base", "m0", "m1", "m2", "m0x2"):
        (folder / name).mkdir()
        inspector.save({leaf: FIXTURE[f"in/{name}/{leaf}"] for leaf in LEAVES},
                       folder / name / "model.safetensors")
        (folder / name / "config.json").write_text(json.dumps({"model": name}))
    return folder


@pytest.fixture(autouse=True)
def _in_the_models_folder(models, monkeypatch):
    monkeypatch.chdir(models)  # model paths in a YAML are relative to the working directory


def merge(folder, text: str, out: str = "out", *extra) -> int:
    (folder / "merge.yml").write_text(text)
    return cli.main(["merge", str(folder / "merge.yml"), str(folder / out), *extra])


def assert_equals_mergekit(path, case: str) -> None:
    merged = inspector.load(path)
    for leaf in LEAVES:
        expected = FIXTURE[f"out/{case}/{leaf}"]
        got = np.asarray(merged[leaf])
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6, err_msg=f"{case} {leaf}")


def test_ties_yaml_in_a_subprocess_equals_mergekit(cli, models):
    (models / "ties.yml").write_text(YAMLS["ties"])
    done = cli("merge", "ties.yml", "out_ties", "--json", cwd=models, timeout=300)
    assert done.returncode == 0, done.stderr
    (record,) = done.records()
    assert record["type"] == "merge" and record["files"] == ["model.safetensors"]
    assert record["models"] == ["m0", "m1", "m2"] and record["base"] == "base"
    assert record["tensors"] == 3 and record["bytes"] == sum(
        FIXTURE[f"in/base/{k}"].nbytes for k in LEAVES)
    assert record["seconds"] > 0 and record["peak_rss_bytes"] > 10 << 20
    assert "`tokenizer_source` is ignored" in done.stderr
    assert "`int8_mask` is ignored" in done.stderr
    assert "base is the base model: it is not merged as one of the models" in done.stderr
    out = models / "out_ties"
    assert_equals_mergekit(out / "model.safetensors", "ties")
    assert json.loads((out / "config.json").read_text()) == {"model": "base"}
    assert yaml.safe_load((out / "mergekit_config.yml").read_text())["merge_method"] == "ties"
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "np") as f:  # what transformers checks
        assert f.metadata() == {"format": "pt"}


@pytest.mark.parametrize("case", ["linear", "task_arithmetic", "slerp"])
def test_yaml_equals_mergekit(models, case, capsys):
    assert merge(models, YAMLS[case], f"out_{case}") == 0
    assert_equals_mergekit(models / f"out_{case}" / "model.safetensors", case)
    line = capsys.readouterr().out
    assert line.startswith(f"merged {len(CASES[case]['models'])} model(s) by {case} into ")
    assert " s, peak memory " in line
    config = json.loads((models / f"out_{case}" / "config.json").read_text())
    assert config == {"model": "base" if CASES[case]["base"] else "m0"}


def _yaml_of(case: dict) -> str:
    """A case of the fixture as mergekit YAML (per-model weight/density, the rest global)."""
    params = dict(case["params"])
    per_model = {k: params.pop(k) for k in ("weights", "density") if isinstance(
        params.get(k), list)}
    models = [{"model": m, "parameters": {("weight" if k == "weights" else k): v[i]
                                          for k, v in per_model.items()}}
              for i, m in enumerate(case["models"])]
    top = {{"lam": "lambda", "weights": "weight"}.get(k, k): v for k, v in params.items()}
    config = {"merge_method": case["method"], "models": models, "parameters": top}
    if case["base"] or case["method"] == "slerp":
        config["base_model"] = case["base"] or case["models"][0]
    return yaml.safe_dump(config)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if c not in YAMLS])
def test_every_other_fixture_case(models, case):
    assert merge(models, _yaml_of(CASES[case]), f"out_{case}") == 0
    assert_equals_mergekit(models / f"out_{case}" / "model.safetensors", case)


def test_past_the_shard_size_the_output_is_sharded_with_an_index(models, capsys):
    # b: 132 bytes, conv: 480, w: 512: at most 600 bytes a file gives one file each
    assert merge(models, YAMLS["linear"], "out_sharded", "--out-shard-size", "600") == 0
    out = models / "out_sharded"
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {"b": "model-00001-of-00003.safetensors",
                                   "conv": "model-00002-of-00003.safetensors",
                                   "w": "model-00003-of-00003.safetensors"}
    assert index["metadata"]["total_size"] == 132 + 480 + 512
    assert_equals_mergekit(out / "model.safetensors.index.json", "linear")
    assert "(3 shards + model.safetensors.index.json)" in capsys.readouterr().out
    assert merge(models, YAMLS["linear"], "out_sharded") == 0  # again, unsharded:
    assert sorted(p.name for p in out.iterdir()) == [  # the old shards are gone
        "config.json", "mergekit_config.yml", "model.safetensors"]


@pytest.mark.parametrize("text, message", [
    ("merge_method: ties\nslices:\n  - sources:\n      - model: m0\n        layer_range: "
     "[0, 4]\n", "`slices:` (layer ranges) is not supported: this merge takes whole models"),
    ("merge_method: della\nmodels:\n  - model: m0\n",
     "merge_method 'della' is not one this merge runs; it runs: linear, task_arithmetic, ties"),
    ("merge_method: slerp\nbase_model: m0\nmodels: [{model: m0}, {model: m1}]\n"
     "parameters:\n  t: [0, 0.5, 1]\n",
     "parameters.t = [0, 0.5, 1] varies over layers (a gradient or a filtered value)"),
    ("merge_method: linear\nmodels:\n  - model: m0\n    parameters: {weight: 1}\n"
     "  - model: m1\n", "models[1] (m1) has no weight; linear needs one per model"),
    ("merge_method: ties\nbase_model: base\nmodels:\n  - model: m0\n    parameters: "
     "{weight: 1, epsilon: 0.1}\n", "models[0].parameters: ties has no parameter 'epsilon'; "
     "it takes: density, int8_mask, lambda, normalize, rescale, weight."),
    ("merge_method: ties\nbase_model: base\nmodels:\n  - model: m0\n    parameters: "
     "{weight: 1, normalize: false}\n", "models[0].parameters: normalize applies to the whole "
     "merge, not one model: put it under the top-level `parameters:`."),
    ("merge_method: task_arithmetic\nmodels:\n  - model: m0\n    parameters: {weight: 1}\n",
     "task_arithmetic needs `base_model:`"),
    ("merge_method: linear\nmodels:\n  - model: org/Model-7B\n    parameters: {weight: 1}\n",
     "model 'org/Model-7B' is not a local folder, file or URL. A Hugging Face repo must be "
     "downloaded first (huggingface-cli download org/Model-7B --local-dir DIR"),
    ("merge_method: linear\nmodels: [\n", "is not valid YAML"),
])
def test_what_it_cannot_do_exits_2_with_the_reason(models, capsys, text, message):
    assert merge(models, text, "refused") == 2
    err = capsys.readouterr().err
    assert err.startswith("pytree-inspector: ") and message in err, err
    assert not (models / "refused").exists()


def test_a_refusal_in_a_subprocess(cli, models):
    (models / "bad.yml").write_text("merge_method: linear\nmodels:\n  - model: nowhere\n"
                                    "    parameters: {weight: 1}\n")
    done = cli("merge", "bad.yml", "out_bad", cwd=models)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.startswith("pytree-inspector: model 'nowhere' is not a local folder")


def test_dtype_casts_the_written_tensors_once(models):
    text = YAMLS["linear"].replace("dtype: float32", "dtype: bfloat16")
    assert merge(models, text, "out_bf16") == 0
    merged = inspector.load(models / "out_bf16" / "model.safetensors")
    for leaf in LEAVES:
        assert merged[leaf].dtype.name == "bfloat16"
        expected = FIXTURE[f"out/linear/{leaf}"].astype(merged[leaf].dtype)  # float32, cast
        np.testing.assert_array_equal(np.asarray(merged[leaf]), expected)


def test_models_that_do_not_match_exit_2_naming_the_key_path(models, capsys):
    (models / "odd").mkdir(exist_ok=True)
    odd = {leaf: FIXTURE[f"in/m1/{leaf}"] for leaf in LEAVES}
    odd["w"] = odd["w"][:4]
    inspector.save(odd, models / "odd" / "model.safetensors")
    text = YAMLS["linear"].replace("model: m1", "model: odd")
    assert merge(models, text, "refused") == 2
    err = capsys.readouterr().err
    assert err.startswith("pytree-inspector: Cannot merge 3 trees with 'linear'") and "['w']" in err
    assert not (models / "refused").exists()
