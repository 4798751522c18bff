"""A held checkpoint's float32 groups read where they lie in its file (`mapped_groups.py`):
the values, what reads them in place and what gets a packed copy, the working set's copies
made in the background, and the files that cannot be mapped."""

from __future__ import annotations

import json
import struct

import jax
import numpy as np
import pytest
from safetensors.numpy import save_file

import inspector
from inspector.core import host_read, in_flight, weighted_sum_host, working_set
from inspector.core.errors import LoadError
from inspector.core.file_maps import map_of
from inspector.core.mapped_groups import MappedGroup, has_mapped
from inspector.core.packed_reads import read_mapped, read_packed
from inspector.core.working_set import WorkingSet

CPU = jax.devices("cpu")[0]
# names whose order in the file (safetensors sorts them) is not the tree's order
SHAPES = {"layers.10.w": (64, 33), "layers.9.w": (33, 64), "layers.9.b": (33,),
          "emb": (101, 7), "steps": (3,)}


@pytest.fixture(autouse=True)
def small_groups(monkeypatch):
    """Every float32 group is mapped (the app maps those of 16 MiB and more)."""
    monkeypatch.setattr(weighted_sum_host, "MIN_BYTES", 0)
    yield
    working_set.set_budget(None)


def write(path, seed: int, extra: dict | None = None) -> dict:
    rng = np.random.default_rng(seed)
    values = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    values["steps"] = np.arange(3, dtype=np.int32) + seed
    values.update(extra or {})
    save_file(values, str(path))
    return values


def pair(tmp_path, **extra):
    values = [write(tmp_path / f"m{i}.safetensors", i, extra) for i in range(2)]
    trees = [inspector.load(str(tmp_path / f"m{i}.safetensors")) for i in range(2)]
    return values, trees


def flat(tree) -> dict:
    return {jax.tree_util.keystr(p, simple=True, separator="."): np.asarray(x)
            for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def test_a_mapped_tree_holds_its_float32_leaves_in_the_files_map(tmp_path):
    (values, _), (tree, _) = pair(tmp_path)
    before = host_read.stats()["bytes"]
    packed = read_mapped(tree, CPU)
    group = packed.buffers["float32"]
    assert isinstance(group, MappedGroup) and isinstance(packed.buffers["int32"], jax.Array)
    f32 = sum(v.nbytes for v in values.values() if v.dtype == np.float32)
    assert host_read.stats()["bytes"] - before == f32 + 12  # each byte counted once
    leaves = flat(packed.unpack())
    assert leaves.keys() == values.keys()
    for name, want in values.items():
        np.testing.assert_array_equal(leaves[name], want)
        if want.dtype == np.float32:  # a view of the map, not a copy
            assert map_of(leaves[name]) is not None
    # the packed buffer, when something needs one, is read_packed's; the group then reads
    # its copy and lets the map go
    np.testing.assert_array_equal(np.asarray(group),
                                  np.asarray(read_packed(tree, CPU).buffers["float32"]))
    assert group.where[0] is group.host()
    assert map_of(group.where[0]) is not map_of(leaves["emb"])  # the file's map
    for name, want in values.items():
        np.testing.assert_array_equal(flat(packed.unpack())[name], want)


@pytest.mark.parametrize("host_loop", [True, False])
def test_a_sum_of_mapped_trees_equals_the_packed_sum_bit_for_bit(tmp_path, monkeypatch,
                                                                 host_loop):
    values, trees = pair(tmp_path)
    w = [0.3, -1.25]
    mapped = [read_mapped(t, CPU) for t in trees]  # mapped for the loop, then summed by it
    packed = [read_packed(t, CPU) for t in trees]  # or, the loop switched off, by XLA
    monkeypatch.setattr(weighted_sum_host, "HOST_LOOP", host_loop)
    mixed = [mapped[0], packed[1]]
    sums = [inspector.run(inspector.weighted_sum, ts, w, repeats=2).result
            for ts in (mapped, packed, mixed)]
    for got in sums[0], sums[2]:
        for g in sums[0].buffers:
            np.testing.assert_array_equal(np.asarray(got.buffers[g]).view(np.uint8),
                                          np.asarray(sums[1].buffers[g]).view(np.uint8))
    out = flat(sums[0].unpack())
    for name in SHAPES:
        want = sum(wi * v[name].astype(np.float64) for wi, v in zip(w, values, strict=True))
        np.testing.assert_allclose(out[name], want, rtol=1e-6, atol=1e-6)
    group = mapped[0].buffers["float32"]
    if host_loop:  # the loop read the files' maps: no packed copy was made
        assert group._host is None and not group._placed
    else:  # XLA's kernel took the group's packed copy, made once and kept
        first = group._placed[CPU]
        inspector.run(inspector.weighted_sum, mapped, w)
        assert group._placed[CPU] is first


def test_the_working_set_holds_mapped_then_settles_into_packed_copies(tmp_path):
    values, trees = pair(tmp_path)
    ws = WorkingSet()
    try:
        held = ws.hold({"a": trees[0], "b": trees[1]}, CPU, mapped=True)
        assert has_mapped(held["a"]) and has_mapped(held["b"])
        before = host_read.stats()["bytes"]
        thread = ws.settle(delay=0)
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert host_read.stats()["bytes"] == before  # copied from the maps, not read again
        for name, v in (("a", values[0]), ("b", values[1])):
            settled = ws.get(name)
            assert not has_mapped(settled)
            assert isinstance(settled.buffers["float32"], jax.Array)
            leaves = flat(settled.unpack())
            for key, want in v.items():
                np.testing.assert_array_equal(leaves[key], want)
                assert map_of(np.asarray(leaves[key])) is None
        # held (and mapped) before: later holds read nothing and find the packed copy
        again = ws.hold({"a": trees[0]}, CPU, mapped=True)
        assert again["a"] is ws.get("a") and host_read.stats()["bytes"] == before
        assert ws.settle(delay=0) is None  # nothing left mapped
        # the mapped tree a run still holds stays readable
        np.testing.assert_array_equal(flat(held["a"].unpack())["emb"], values[0]["emb"])
    finally:
        ws.close()


def test_a_copy_that_fails_drops_the_tree_and_the_next_hold_reads_it_again(tmp_path,
                                                                          monkeypatch):
    values, trees = pair(tmp_path)
    ws = WorkingSet()
    try:
        held = ws.hold({"a": trees[0]}, CPU, mapped=True)

        def fail(tree, device):
            raise MemoryError("no room for the copy")

        monkeypatch.setattr(working_set, "settled", fail)
        ws.settle(delay=0).join(timeout=60)
        assert ws.get("a") is None and ws.holdings() == []
        np.testing.assert_array_equal(flat(held["a"].unpack())["emb"], values[0]["emb"])
        again = ws.hold({"a": trees[0]}, CPU)  # not mapped: read as before
        assert not has_mapped(again["a"])
        np.testing.assert_array_equal(flat(again["a"].unpack())["layers.9.w"],
                                      values[0]["layers.9.w"])
    finally:
        ws.close()


def write_by_hand(path, tensors: list) -> None:
    """A safetensors file with its tensors in the order given (the reference writer sorts
    them by alignment, so it never puts a float32 tensor at an odd offset)."""
    header, at = {}, 0
    for name, x in tensors:
        dtype = {"float16": "F16", "float32": "F32"}[x.dtype.name]
        header[name] = {"dtype": dtype, "shape": list(x.shape), "data_offsets": [at, at + x.nbytes]}
        at += x.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(x.tobytes() for _, x in tensors))


def test_groups_that_cannot_be_mapped_are_read(tmp_path):
    # a float16 tensor of 3 elements first: the float32 tensors after it start 6 bytes on
    rng = np.random.default_rng(0)
    tensors = [("half", np.ones(3, np.float16)),
               ("w", rng.standard_normal((40, 30)).astype(np.float32)),
               ("b", rng.standard_normal(30).astype(np.float32))]
    write_by_hand(tmp_path / "odd.safetensors", tensors)
    tree = inspector.load(str(tmp_path / "odd.safetensors"))
    assert read_mapped(tree, CPU) is None
    ws = WorkingSet()
    try:
        held = ws.hold({"odd": tree}, CPU, mapped=True)["odd"]
        assert not has_mapped(held)
        for name, want in tensors:
            np.testing.assert_array_equal(flat(held.unpack())[name], want)
    finally:
        ws.close()
    assert read_mapped({"w": np.zeros(4, np.float32)}, CPU) is None  # nothing in a file


def test_a_file_that_shrank_is_named(tmp_path):
    _, (tree, _) = pair(tmp_path)
    path = tmp_path / "m0.safetensors"
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 100)
    with pytest.raises(LoadError, match="m0.safetensors.*runs past its end"):
        read_mapped(tree, CPU)


def test_the_background_copy_waits_for_the_runs_in_flight(tmp_path):
    values, trees = pair(tmp_path)
    ws = WorkingSet()
    try:
        ws.hold({"a": trees[0]}, CPU, mapped=True)
        with in_flight.executing():  # a run executing: the copy must not take its memory
            thread = ws.settle(delay=0)
            thread.join(timeout=1.0)
            assert thread.is_alive() and has_mapped(ws.get("a"))
        thread.join(timeout=60)  # the run ended: the copy goes on
        assert not thread.is_alive() and not has_mapped(ws.get("a"))
        np.testing.assert_array_equal(flat(ws.get("a").unpack())["emb"], values[0]["emb"])
    finally:
        ws.close()


def test_only_the_groups_the_loop_sums_are_mapped(tmp_path, monkeypatch):
    _, (tree, _) = pair(tmp_path)
    monkeypatch.setattr(weighted_sum_host, "HOST_LOOP", False)  # XLA sums: a map gains nothing
    assert read_mapped(tree, CPU) is None
    monkeypatch.setattr(weighted_sum_host, "HOST_LOOP", True)
    monkeypatch.setattr(weighted_sum_host, "MIN_BYTES", 1 << 24)  # these groups: too small
    assert read_mapped(tree, CPU) is None
