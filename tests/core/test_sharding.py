"""Meshes and sharded trees: shard / describe / device_bytes, every op on the mesh, errors.

The 8-device checks run `eight_devices.py` once in a subprocess (XLA_FLAGS must be set before
JAX starts; each start costs seconds) and assert its record here; spec parsing and the errors
that need no devices run in this process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import inspector
from inspector import ShardingError
from inspector.core.sharding import presets

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


@pytest.fixture(scope="module")
def record():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(
                   [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(HERE / "eight_devices.py")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _tree(seed: int) -> dict:  # the trees eight_devices.py builds, for float64 references
    rng = np.random.default_rng(seed)
    return {"w": rng.normal(size=(8, 4)).astype(np.float32),
            "b": rng.normal(size=(4,)).astype(np.float32),
            "e": rng.normal(size=(8, 2)).astype(ml_dtypes.bfloat16),
            "i": rng.integers(-50, 50, size=(8,)).astype(np.int32),
            "s": np.float32(seed + 0.5)}


def _specs(values: dict) -> dict:
    return {path: v[2] for path, v in values.items()}


INPUT_SPECS = {"['w']": "P('data', 'model')", "['b']": "P()", "['e']": "P('data',)",
               "['i']": "P(('data', 'model'),)", "['s']": "P()"}


def test_mesh_spans_the_eight_devices(record):
    assert record["devices"] == [f"cpu:{i}" for i in range(8)]
    assert record["mesh"] == [["data", "model"], [4, 2], list(range(8))]


def test_shard_places_each_leaf_and_describe_says_how(record):
    assert _specs(record["inputs"][0]) == INPUT_SPECS
    assert record["rows"] == {
        "": [None, None],
        "['b']": ["8 devices", "replicated over 8 devices"],
        "['e']": ["8 devices", "PartitionSpec('data') over data=4, model=2"],
        "['i']": ["8 devices", "PartitionSpec(('data', 'model'),) over data=4, model=2"],
        "['n']": [None, None],
        "['s']": ["8 devices", "replicated over 8 devices"],
        "['w']": ["8 devices", "PartitionSpec('data', 'model') over data=4, model=2"],
    }
    # the values survive the placement exactly
    for path, v in record["inputs"][1].items():
        key = path[2:-2]
        np.testing.assert_array_equal(v[3], np.asarray(_tree(1)[key], np.float64))


def test_device_bytes_counts_each_devices_shards(record):
    # w 8x4 f32 split 4x2: 2x2x4 = 16; b replicated: 16; e 8x2 bf16 over data: 2x2x2 = 8;
    # i 8 int32 over data*model: 4; s replicated: 4.
    assert record["device_bytes"] == {f"cpu:{i}": 16 + 16 + 8 + 4 + 4 for i in range(8)}
    assert record["device_bytes_host"] == {f"cpu:{i}": 0 for i in range(8)}
    # packed buffers (40 float32 split over data=4, replicated over model) and host ones
    assert record["packed"][3] == {f"cpu:{i}": 40 for i in range(8)}
    assert record["packed"][4] == {f"cpu:{i}": 0 for i in range(8)}


def test_weighted_sum_on_the_mesh_keeps_shardings_and_matches_one_device(record):
    mesh, one = record["wsum_mesh"], record["wsum_one"]
    assert _specs(mesh) == INPUT_SPECS
    assert {p: v[:2] for p, v in mesh.items()} == {p: v[:2] for p, v in one.items()}
    assert {p: v[3] for p, v in mesh.items()} == {p: v[3] for p, v in one.items()}  # bit for bit
    trees = [_tree(k) for k in range(3)]
    weights = [0.5, -1.25, 2.0]
    for key in ("w", "b", "i", "s"):
        ref = sum(w * np.asarray(t[key], np.float64) for w, t in zip(weights, trees, strict=True))
        np.testing.assert_allclose(mesh[f"['{key}']"][3], ref, rtol=1e-5, atol=1e-5)
    ref = sum(w * np.asarray(t["e"], np.float64) for w, t in zip(weights, trees, strict=True))
    np.testing.assert_allclose(mesh["['e']"][3], ref, rtol=1e-2, atol=2e-2)
    assert record["run"] == ["8 devices", "data=4, model=2", "P('data', 'model')"]


def test_scenario_s1_on_the_mesh(record):
    assert record["s1"] == [
        [[[[26, 11], [21, 24]], [30, 15]], [[[23, 20], [18, 33]], [33, 18]]],
        ["P('model',)"], ["int32"]]


def test_stack_adds_an_unsharded_axis_and_unstack_gives_back_the_inputs(record):
    mesh, one = record["stack_mesh"], record["stack_one"]
    assert _specs(mesh) == {"['w']": "P(None, 'data', 'model')", "['b']": "P(None,)",
                            "['e']": "P(None, 'data')", "['i']": "P(None, ('data', 'model'))",
                            "['s']": "P(None,)"}
    assert {p: v[3] for p, v in mesh.items()} == {p: v[3] for p, v in one.items()}
    for k, tree in enumerate(record["unstack_mesh"]):
        assert _specs(tree) == INPUT_SPECS
        assert tree == record["inputs"][k]


def test_index_keeps_the_layout_of_kept_axes(record):
    mesh, one = record["index_mesh"], record["index_one"]
    assert _specs(mesh) == {"['w']": "P('data',)", "['b']": "P()", "['e']": "P('data', None)",
                            "['i']": "P()", "['s']": "P()"}
    assert {p: v[:2] + v[3:] for p, v in mesh.items()} == {p: v[:2] + v[3:]
                                                           for p, v in one.items()}
    t = _tree(0)
    np.testing.assert_array_equal(mesh["['w']"][3], t["w"][2:6, 0])
    np.testing.assert_array_equal(mesh["['i']"][3], t["i"][-1])


def test_merges_on_the_mesh_keep_shardings_and_match_one_device(record):
    for method, (mesh, one) in record["merge"].items():
        assert _specs(mesh) == {p: s for p, s in INPUT_SPECS.items()
                                if p in ("['w']", "['b']", "['e']")}, method
        assert {p: v[3] for p, v in mesh.items()} == {p: v[3] for p, v in one.items()}, method


def test_packed_weighted_sum_on_mesh_buffers(record):
    spec, on_mesh, on_one = record["packed"][:3]
    assert spec == "P('data',)"
    assert on_mesh == on_one
    t = [_tree(k) for k in range(2)]
    a, b = (np.concatenate([x["w"].ravel(), x["w"][:, 0]]).astype(np.float64) for x in t)
    np.testing.assert_allclose(on_mesh, 1.5 * a - 0.25 * b, rtol=1e-6, atol=1e-6)


def test_any_function_runs_over_the_mesh(record):
    assert record["function"][0] == "data=4, model=2"
    np.testing.assert_array_equal(record["function"][1], 2 * _tree(0)["w"])


def test_sharding_errors_name_every_path(record):
    assert record["errors"]["divide"] == (
        "Cannot shard the tree over the mesh data=4, model=2: 3 places do not fit.\n"
        "  - ['a']: shape (6, 3), spec PartitionSpec('data'): dimension 0 (6) does not divide "
        "over data=4 (the mesh has data=4, model=2)\n"
        "  - ['b'][0]: shape (4, 3), spec PartitionSpec('model', 'data'): dimension 1 (3) does "
        "not divide over data=4 (the mesh has data=4, model=2)\n"
        "  - ['b'][1]: shape (8, 5), spec PartitionSpec('data', 'model'): dimension 1 (5) does "
        "not divide over model=2 (the mesh has data=4, model=2)\n"
        "Each split dimension must divide by the product of its mesh axes' sizes; write None "
        "for dimensions to keep whole (or no spec to replicate).")
    two = record["errors"]["two_meshes"]
    assert two.startswith("Cannot take a weighted sum of 2 trees: 5 leaves lie on another mesh "
                          "than data=4, model=2 (devices [0, 1, 2, 3, 4, 5, 6, 7]).\n"
                          "  - ['b'] (tree 1): on a mesh data=8")
    assert record["errors"]["mesh"] == (
        "A mesh data=3, model=2 needs 6 devices, but there are 8 (cpu). Choose sizes whose "
        "product is 8, e.g. {'data': 4, 'model': 2}.")


# --- in this process (one device) ------------------------------------------------------------


def test_parse_spec_reads_text_without_eval():
    assert inspector.parse_spec("data, None") == P("data", None)
    assert inspector.parse_spec(" 'data' ,  \"model\" ") == P("data", "model")
    assert inspector.parse_spec("(data, model), None") == P(("data", "model"), None)
    assert inspector.parse_spec("PartitionSpec('data', None)") == P("data", None)
    assert inspector.parse_spec("P()") == P()
    assert inspector.parse_spec("replicated") == P()
    assert inspector.parse_spec("data,") == P("data")


@pytest.mark.parametrize(("text", "problem", "column"), [
    ("data model", "expected ',' between entries, found 'model'", 6),
    ("data, , model", "an entry is missing before ','", 7),
    ("(data, model", "'(' is never closed", 1),
    ("()", "an empty group '()'; write None for a dimension that is not split", 1),
    ("__import__('os').system('x')", "unexpected character '.'", 17),
    ("data; x", "unexpected character ';'", 5),
    ("'da ta'", "'da ta' is not a mesh axis name", 1),
])
def test_parse_spec_errors_show_where(text, problem, column):
    with pytest.raises(ShardingError) as info:
        inspector.parse_spec(text)
    assert str(info.value).splitlines()[0] == (
        f"Cannot parse spec {text!r}: {problem} (at column {column}).")


def test_mesh_errors():
    n = len(jax.devices())
    with pytest.raises(ShardingError,
                       match=f"A mesh data={n + 1} needs {n + 1} devices, but there are {n} "):
        inspector.mesh({"data": n + 1})
    with pytest.raises(ShardingError, match="Mesh axes need identifier names and positive "
                                            "integer sizes; not:\n  - 'a b': 1\n  - 'x': 0"):
        inspector.mesh({"a b": 1, "x": 0})
    with pytest.raises(ShardingError, match="A mesh needs named axes"):
        inspector.mesh({})
    assert presets(8) == [{"data": 8}, {"data": 4, "model": 2}, {"data": 2, "model": 4},
                          {"model": 8}]


def test_shard_refuses_bad_spec_trees_listing_every_place():
    m = inspector.mesh({"data": len(jax.devices())})
    tree = {"a": np.zeros((2, 3)), "b": [np.zeros(2), np.zeros(()), "text"]}
    with pytest.raises(ShardingError) as info:
        inspector.shard(tree, m, {"a": "data, None, None", "b": ["data", "x", None], "c": None})
    assert str(info.value).splitlines()[:2] == [
        f"Cannot shard the tree over the mesh data={len(jax.devices())}: 1 place does not fit.",
        "  - (root): ['c'] not in the tree"]
    with pytest.raises(ShardingError) as info:
        inspector.shard(tree, m, {"a": "data, None, None", "b": ["data", "x", None]})
    assert str(info.value).splitlines()[1:3] == [
        "  - ['a']: shape (2, 3), spec PartitionSpec('data', None, None): the spec has 3 "
        f"entries for a leaf of rank 2 (the mesh has data={len(jax.devices())})",
        "  - ['b'][1]: shape (), spec PartitionSpec('x'): the spec has 1 entry for a leaf of "
        f"rank 0 (the mesh has data={len(jax.devices())})"]
    with pytest.raises(ShardingError, match=r"  - \['a'\]: Cannot parse spec 'data;'"):
        inspector.shard(tree, m, {"a": "data;", "b": None})


def test_shard_on_one_device_keeps_values_and_strings():
    m = inspector.mesh({"data": len(jax.devices())})
    tree = {"w": np.arange(4.0, dtype=np.float32), "name": "x", "none": None, "n": 3}
    out = inspector.shard(tree, m, None)
    assert out["name"] == "x" and out["none"] is None
    np.testing.assert_array_equal(np.asarray(out["w"]), tree["w"])
    assert out["n"].dtype == np.int32 and int(out["n"]) == 3
    assert [r.sharding for r in inspector.describe(out)] == [None] * 5  # one device: no text


def test_device_bytes_of_lazy_and_host_trees_is_zero_and_of_placed_ones_their_bytes(tmp_path):
    path = inspector.save({"w": np.ones((3, 4), np.float32)}, tmp_path / "m.safetensors")
    lazy = inspector.load(path)
    assert isinstance(lazy["w"], inspector.LazyArray)
    names = [inspector.device_name(d) for d in jax.local_devices()]
    assert inspector.device_bytes(lazy) == dict.fromkeys(names, 0)
    assert inspector.device_bytes(inspector.pack({"w": np.ones(5, np.int16)})) == \
        dict.fromkeys(names, 0)
    placed = jax.device_put(np.ones((3, 4), np.float32), jax.local_devices()[0])
    assert inspector.device_bytes({"a": placed, "b": lazy})[names[0]] == 48
