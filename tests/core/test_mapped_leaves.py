"""`run` on the CPU uses the leaves of local files where they lie (`mapped_leaves.py`): the
same values as reading them, each byte counted once, a file that shrank refused."""

from __future__ import annotations

import json
import os
import struct

import jax
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

import inspector
from inspector.core import host_read
from inspector.core.errors import LoadError
from inspector.core.mapped_leaves import MappedLeaf
from inspector.core.runner import PlannedRun

pytestmark = pytest.mark.skipif(jax.devices()[0].platform != "cpu",
                                reason="leaves are mapped for CPU kernels only")


def _pair(tmp_path, seed: int):
    """Two checkpoints of one structure: float32, float16 and float64 tensors written by the
    safetensors library (the header puts them off a 64-byte boundary), and bfloat16 /
    float8 ones written by the inspector."""
    rng = np.random.default_rng(seed)
    paths = []
    for name in ("a", "b"):
        plain = {"f32": rng.standard_normal((64, 33)).astype(np.float32),
                 "g32": rng.standard_normal((3, 5)).astype(np.float32),
                 # g32's shape 60 bytes later: another shift, the same kernel
                 "k32": rng.standard_normal((3, 5)).astype(np.float32),
                 "h16": rng.standard_normal((4, 4)).astype(np.float16),
                 "x64": rng.standard_normal(7)}
        save_file(plain, str(tmp_path / f"{name}.safetensors"))
        inspector.save({"bf": rng.standard_normal(9).astype(ml_dtypes.bfloat16),
                        "e4": rng.standard_normal(16).astype(ml_dtypes.float8_e4m3fn)},
                       tmp_path / f"{name}_low.safetensors")
        paths.append(tmp_path / name)
    trees = [{"plain": inspector.load(f"{p}.safetensors"),
              "low": inspector.load(f"{p}_low.safetensors")} for p in paths]
    return trees


def _mappable(trees) -> int:
    """Leaves `run` maps: those of a dtype JAX keeps (float64 is not, here)."""
    return sum(x.dtype != np.float64 for tree in trees for x in jax.tree_util.tree_leaves(tree))


def _leaves(tree) -> dict:
    return {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(tree)}


def test_run_maps_file_leaves_reads_each_byte_once_and_matches_numpy(tmp_path):
    a, b = _pair(tmp_path, 0)
    la, lb = _leaves(a), _leaves(b)
    before = host_read.stats()["bytes"]
    planned = PlannedRun(inspector.weighted_sum, [a, b], [0.25, -1.5], device="cpu:0",
                         map_files=True)
    # float64 is not mapped (JAX keeps float32 here: the leaf is read and converted)
    assert planned.mapped == _mappable([a, b]) == 2 * 6
    assert host_read.stats()["bytes"] - before == sum(
        np.asarray(v).nbytes for v in [*la.values(), *lb.values()])
    assert not any(isinstance(x, MappedLeaf) for c in planned.plan.calls for x in c.args)
    for _ in range(2):  # every execution reads the maps again: same values
        result, _ = planned.execute()
        out = _leaves(result)
        for key, x in la.items():
            expected = 0.25 * np.asarray(x, np.float64) - 1.5 * np.asarray(lb[key], np.float64)
            got = np.asarray(out[key])
            assert got.shape == x.shape, key
            tol = 1e-6 if got.dtype in (np.float32, np.float64) else 6e-2
            np.testing.assert_allclose(got.astype(np.float64), expected, rtol=tol,
                                       atol=tol * 4, err_msg=key)


def test_mapped_and_read_runs_give_the_same_bits_for_every_op(tmp_path):
    a, b = _pair(tmp_path, 1)
    where = {"plain": {"f32": "1:40:3, -2", "g32": "2", "h16": ":", "k32": "1:, ::2",
                       "x64": "3"}, "low": "2:"}
    ops = [(inspector.weighted_sum, ([a, b], [0.5, 2.0]), {}),
           (inspector.stack, ([a, b],), {}),
           (inspector.index, (a, where), {})]
    for op, args, kwargs in ops:
        read = PlannedRun(op, *args, device="cpu:0", **kwargs)
        mapped = PlannedRun(op, *args, device="cpu:0", map_files=True, **kwargs)
        assert read.mapped == 0 and mapped.mapped > 0, op.__name__
        want, got = _leaves(read.execute()[0]), _leaves(mapped.execute()[0])
        assert want.keys() == got.keys()
        for key in want:
            np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(want[key]),
                                          err_msg=f"{op.__name__} {key}")


def _by_hand(path, half: np.ndarray, single: np.ndarray) -> None:
    """A safetensors file with a float32 tensor 6 bytes past its float16 one: the format
    allows it (the reference writer sorts tensors by alignment, so it never writes one)."""
    header = {"a_half": {"dtype": "F16", "shape": [3], "data_offsets": [0, 6]},
              "b_single": {"dtype": "F32", "shape": [5], "data_offsets": [6, 26]},
              "c_tail": {"dtype": "F32", "shape": [256], "data_offsets": [26, 1050]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    tail = np.arange(256, dtype=np.float32)
    path.write_bytes(struct.pack("<Q", len(text)) + text + half.tobytes() + single.tobytes()
                     + tail.tobytes())


def test_a_leaf_off_its_element_boundary_is_read(tmp_path):
    """No whole number of elements from a 64-byte boundary (both float32 leaves, 2 bytes off
    theirs): read as before; the float16 leaf before them is mapped."""
    for name in ("a", "b"):
        _by_hand(tmp_path / f"{name}.safetensors", np.arange(3, dtype=np.float16),
                 np.arange(5, dtype=np.float32) + (name == "b"))
    a, b = (inspector.load(tmp_path / f"{n}.safetensors") for n in "ab")
    assert a["b_single"].region[1] % 4 == 2
    r = inspector.run(inspector.weighted_sum, [a, b], [1.0, 10.0], repeats=1, warmup=0)
    np.testing.assert_array_equal(np.asarray(r.result["b_single"]),
                                  np.arange(5) + 10 * (np.arange(5) + 1))
    np.testing.assert_array_equal(np.asarray(r.result["a_half"]), 11 * np.arange(3))
    np.testing.assert_array_equal(np.asarray(r.result["c_tail"]), 11 * np.arange(256))
    planned = PlannedRun(inspector.weighted_sum, [a, b], [1.0, 1.0], device="cpu:0",
                         map_files=True)
    assert planned.mapped == 2


def test_a_file_that_shrank_after_loading_is_refused_by_name(tmp_path):
    a, b = _pair(tmp_path, 2)
    before = host_read.stats()["bytes"]
    twice = PlannedRun(inspector.weighted_sum, [a, a], [1.0, 1.0], device="cpu:0",
                       map_files=True)  # one tree twice: each leaf mapped and counted once
    assert twice.mapped == _mappable([a])
    assert host_read.stats()["bytes"] - before == sum(
        np.asarray(v).nbytes for v in _leaves(a).values())
    path = tmp_path / "b.safetensors"
    os.truncate(path, os.path.getsize(path) - 100)
    with pytest.raises(LoadError, match=r"b\.safetensors.*(shrank|ended)"):
        inspector.run(inspector.weighted_sum, [a, b], [1.0, 1.0], repeats=1, warmup=0)
    # the other tree is untouched: it still runs, read or mapped
    r = inspector.run(inspector.weighted_sum, [a, a], [1.0, 1.0], repeats=1, warmup=0)
    np.testing.assert_allclose(np.asarray(r.result["plain"]["g32"]),
                               2 * np.asarray(a["plain"]["g32"]), rtol=1e-6)


def test_npz_members_off_their_element_boundaries_are_read(tmp_path):
    """`np.savez` stores members uncompressed, each a run of the zip file (`region`), but
    wherever the zip's headers leave them: not a whole number of elements from a 64-byte
    boundary, so `run` reads them, with the same values."""
    rng = np.random.default_rng(3)
    values = []
    for name in ("a", "b"):
        values.append({"w": rng.standard_normal((40, 24)).astype(np.float32),
                       "v": rng.standard_normal(37).astype(np.float32)})
        np.savez(tmp_path / f"{name}.npz", **values[-1])
    a, b = (inspector.load(tmp_path / f"{n}.npz") for n in "ab")
    leaves = jax.tree_util.tree_leaves([a, b])
    assert all(x.region is not None and x.region[1] % 4 for x in leaves)
    planned = PlannedRun(inspector.weighted_sum, [a, b], [3.0, -0.5], device="cpu:0",
                         map_files=True)
    assert planned.mapped == 0
    result, _ = planned.execute()
    for key in ("w", "v"):
        np.testing.assert_allclose(np.asarray(result[key]), 3.0 * values[0][key].astype(
            np.float64) - 0.5 * values[1][key], rtol=1e-6, atol=1e-6)
