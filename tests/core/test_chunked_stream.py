"""`weighted_sum(..., out=)` of safetensors files in chunks across leaves (issue 26), and the
blocked passes of the merge kernels' k-th-largest search."""

import json
import os
import struct

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import inspector
from inspector.core import chunked_stream
from inspector.core.errors import LoadError
from inspector.core.merge import kernels

ON_CPU = pytest.mark.skipif(
    jax.devices()[0].platform != "cpu",
    reason="the chunked stream serves the CPU device (elsewhere outputs stream leaf by leaf)")

def _trees(rng):
    shapes = {"b.w": (300, 7), "a.x": (5,), "c": (1000, 33), "s": (), "z": (0, 3),
              "h": (17, 9)}
    one = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    one["h"] = one["h"].astype(ml_dtypes.bfloat16)  # a second dtype: its own kernel
    return one


def _save_reversed(tree, path, pad: int = 13):
    """A safetensors file whose data holds the tensors in reverse name order, after a header
    of an odd length (unaligned offsets): no run of it matches the output's order."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tree, reverse=True):
        value = np.asarray(tree[name])
        code = {"float32": "F32", "bfloat16": "BF16"}[value.dtype.name]
        header[name] = {"dtype": code, "shape": list(value.shape),
                        "data_offsets": [offset, offset + value.nbytes]}
        offset += value.nbytes
        blobs.append(value.tobytes())
    header["__metadata__"] = {"pad": "x" * pad}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def _reference(trees, weights):
    out = {}
    for k in trees[0]:
        total = sum(w * t[k].astype(np.float64) for w, t in zip(weights, trees, strict=True))
        out[k] = total.astype(trees[0][k].dtype)
    return out


@ON_CPU
@pytest.mark.parametrize("chunk", [100, 4096, 16 << 20])
def test_chunks_across_leaves_give_the_leaf_by_leaf_values(tmp_path, monkeypatch, chunk):
    rng = np.random.default_rng(0)
    trees = [_trees(rng), _trees(rng)]
    paths = [tmp_path / "a.safetensors", tmp_path / "b.safetensors"]
    save_file(trees[0], str(paths[0]))
    # the second file holds its tensors in another order: its chunks are gathered
    _save_reversed(trees[1], paths[1])
    gathered = []
    original = chunked_stream._pread
    monkeypatch.setattr(chunked_stream, "_pread", lambda *a: gathered.append(a) or original(*a))
    monkeypatch.setattr(chunked_stream, "CHUNK_BYTES", chunk)
    lazy = [inspector.load(p) for p in paths]
    seen = []
    out = tmp_path / "m.safetensors"
    inspector.weighted_sum(lazy, [0.3, 0.7], out=out, progress=seen.append)
    got = load_file(str(out))
    memory = inspector.weighted_sum(trees, [0.3, 0.7])
    for k, ref in _reference(trees, [0.3, 0.7]).items():
        assert got[k].dtype == ref.dtype and got[k].shape == ref.shape
        np.testing.assert_array_equal(got[k], np.asarray(memory[k]))  # bit for bit
        np.testing.assert_allclose(got[k].astype(np.float64), ref.astype(np.float64),
                                   rtol=1e-2 if k == "h" else 1e-6, atol=1e-6)
    total = sum(v.nbytes for v in got.values())
    assert seen[-1].done == seen[-1].total == len(trees[0]) and seen[-1].nbytes == total
    if chunk == 100:  # many chunks: the stream reported each, not once per leaf
        assert len(seen) > len(trees[0])
    assert str(paths[1]) in {str(a[0]) for a in gathered}
    assert sorted(os.listdir(tmp_path)) == ["a.safetensors", "b.safetensors", "m.safetensors"]


@ON_CPU
def test_output_buffers_are_reused_not_made_per_chunk(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    tree = {f"w{i}": rng.standard_normal((64, 64)).astype(np.float32) for i in range(20)}
    save_file(tree, str(tmp_path / "a.safetensors"))
    made = []
    original = chunked_stream._Buffers.__init__

    def tracked(self, *args):
        original(self, *args)
        made.append(self)

    monkeypatch.setattr(chunked_stream._Buffers, "__init__", tracked)
    monkeypatch.setattr(chunked_stream, "CHUNK_BYTES", 4096)  # 80 chunks
    a = inspector.load(tmp_path / "a.safetensors")
    inspector.weighted_sum([a, a], [1.0, 1.0], out=tmp_path / "m.safetensors")
    assert len(made) == 1 and made[0]._made <= chunked_stream.BUFFERS
    got = load_file(str(tmp_path / "m.safetensors"))
    for k, v in tree.items():
        np.testing.assert_array_equal(got[k], v + v)


def _eight_leaves(tmp_path, seed: int):
    """A file of eight (256, 64) float32 tensors, and the tree loaded from it."""
    rng = np.random.default_rng(seed)
    tree = {f"w{i}": rng.standard_normal((256, 64)).astype(np.float32) for i in range(8)}
    path = tmp_path / "a.safetensors"
    save_file(tree, str(path))
    return path, inspector.load(path)


def test_a_file_that_shrank_midway_leaves_no_file_under_the_final_name(tmp_path, monkeypatch):
    path, a = _eight_leaves(tmp_path, 2)
    out = tmp_path / "m.safetensors"
    out.write_bytes(b"older")
    with open(path, "r+b") as f:  # after `load`: the header still names every tensor
        f.truncate(os.path.getsize(path) // 2)
    monkeypatch.setattr(chunked_stream, "CHUNK_BYTES", 16384)
    with pytest.raises(LoadError, match="changed.*after it was opened"):
        inspector.weighted_sum([a, a], [0.5, 0.5], out=out)
    assert out.read_bytes() == b"older"
    assert sorted(os.listdir(tmp_path)) == ["a.safetensors", "m.safetensors"]


def test_leaves_not_on_disk_still_stream_leaf_by_leaf(tmp_path):
    tree = {"w": np.arange(6, dtype=np.float32)}
    out = inspector.weighted_sum([tree, tree], [1, 2], out=tmp_path / "m.safetensors")
    assert np.asarray(out["w"]).tolist() == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0]


@pytest.mark.parametrize("size", [2 * kernels._BLOCK, 5 * kernels._BLOCK + 77])
def test_blocked_passes_find_the_kth_largest_exactly(size):
    rng = np.random.default_rng(3)
    values = np.abs(rng.standard_normal((2, size))).astype(np.float32)
    values[1, ::3] = values[1, 5]  # many ties in the second row
    bits = values.view(np.int32)
    k = np.array([size // 2, size // 3], np.int32)
    got = np.asarray(kernels.kth_largest_bits(jnp.asarray(bits), jnp.asarray(k)))
    want = [np.sort(bits[r])[size - k[r]] for r in range(2)]
    assert got.tolist() == want
    t = np.array(want, np.int32)
    counts = np.asarray(kernels.count_at_least(jnp.asarray(bits), jnp.asarray(t)))
    assert counts.tolist() == [int((bits[r] >= t[r]).sum()) for r in range(2)]


def test_merge_out_computing_one_leaf_ahead_keeps_values_and_report_order(tmp_path):
    rng = np.random.default_rng(4)
    trees = [{f"w{i}": rng.standard_normal((40, 50)).astype(np.float32) for i in range(12)}
             for _ in range(3)]
    paths = []
    for n, tree in enumerate(trees):
        paths.append(tmp_path / f"{n}.safetensors")
        save_file(tree, str(paths[-1]))
    base, a, b = (inspector.load(p) for p in paths)
    seen = []
    out = inspector.merge("ties", [a, b], base=base, density=0.5, out=tmp_path / "m.safetensors",
                          progress=seen.append)
    memory = inspector.merge("ties", trees[1:], base=trees[0], density=0.5)
    for k in trees[0]:
        np.testing.assert_array_equal(np.asarray(out[k]), np.asarray(memory[k]))
    assert [p.done for p in seen] == list(range(1, 13))
    assert [p.nbytes for p in seen] == sorted(p.nbytes for p in seen)


def test_a_file_that_shrinks_during_the_stream_raises_instead_of_crashing(tmp_path, monkeypatch):
    path, a = _eight_leaves(tmp_path, 5)
    monkeypatch.setattr(chunked_stream, "CHUNK_BYTES", 16384)
    calls = []

    def shrink(p):  # after the first chunk, with the file already mapped
        calls.append(p)
        if len(calls) == 1:
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2)

    with pytest.raises(LoadError, match="changed.*after it was opened"):
        inspector.weighted_sum([a, a], [0.5, 0.5], out=tmp_path / "m.safetensors",
                               progress=shrink)
    assert sorted(os.listdir(tmp_path)) == ["a.safetensors"]
