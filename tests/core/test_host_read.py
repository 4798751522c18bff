"""File leaves read once, in place, into memory the CPU kernels use without a copy."""

from __future__ import annotations

import gc
import os

import jax
import numpy as np
import pytest

import inspector
from inspector.core import host_read
from inspector.core.errors import LoadError
from inspector.core.working_set import WorkingSet


def _tree(seed: int, n: int = 5, shape=(64, 48)) -> dict:
    rng = np.random.default_rng(seed)
    out = {f"layer{i}": {"w": rng.normal(size=shape).astype(np.float32),
                         "b": rng.normal(size=shape[-1:]).astype(np.float32)} for i in range(n)}
    out["step"] = np.array([seed], np.int32)
    return out


def _saved(tmp_path, seed: int, **kw):
    values = _tree(seed, **kw)
    path = tmp_path / f"t{seed}.safetensors"
    inspector.save(values, path)
    return values, inspector.load(path), path


def _nbytes(tree) -> int:
    return sum(x.nbytes for x in jax.tree_util.tree_leaves(tree))


def test_run_reads_each_byte_of_each_leaf_once_and_values_match(tmp_path):
    va, a, _ = _saved(tmp_path, 0)
    vb, b, _ = _saved(tmp_path, 1)
    before = host_read.stats()
    r = inspector.run(inspector.weighted_sum, [a, b], [0.25, 0.75], repeats=2)
    after = host_read.stats()
    assert after["bytes"] - before["bytes"] == _nbytes(a) + _nbytes(b)
    assert after["reads"] - before["reads"] == 2 * len(jax.tree_util.tree_leaves(a))
    for k in ("layer0", "layer4"):
        ref = 0.25 * va[k]["w"].astype(np.float64) + 0.75 * vb[k]["w"].astype(np.float64)
        np.testing.assert_allclose(np.asarray(r.result[k]["w"]), ref, rtol=1e-6, atol=1e-6)
    assert np.asarray(r.result["step"]).tolist() == [0.75]  # int32, float weights: float32


def test_pack_reads_straight_into_its_buffers(tmp_path):
    values, tree, _ = _saved(tmp_path, 2)
    before = host_read.stats()["bytes"]
    packed = inspector.pack(tree)
    assert host_read.stats()["bytes"] - before == _nbytes(tree)
    out = packed.unpack()
    np.testing.assert_array_equal(out["layer3"]["w"], values["layer3"]["w"])
    np.testing.assert_array_equal(out["step"], values["step"])
    assert all(b.ctypes.data % 64 == 0 for b in packed.buffers.values())


def test_cpu_placement_aliases_the_host_buffer(tmp_path):
    _, tree, _ = _saved(tmp_path, 3)
    leaves = jax.tree_util.tree_leaves(tree)
    host = host_read.read_leaves(leaves)
    cpu = jax.devices("cpu")[0]
    placed = [jax.device_put(h, cpu, may_alias=True) for h in host]
    assert all(p.unsafe_buffer_pointer() == h.ctypes.data for p, h in zip(placed, host,
                                                                             strict=True))


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_buffers_do_not_grow_over_20_runs(tmp_path):
    _, a, _ = _saved(tmp_path, 4, n=8, shape=(512, 256))  # 4 MiB a tree
    _, b, _ = _saved(tmp_path, 5, n=8, shape=(512, 256))
    size = _nbytes(a)

    def once():
        inspector.run(inspector.weighted_sum, [a, b], [0.5, 0.5], repeats=1, warmup=0)
        inspector.pack(a)
        ws = WorkingSet()
        ws.hold({"a": a})
        ws.close()

    for _ in range(3):
        once()
    start = _rss()
    for _ in range(20):
        once()
    assert _rss() - start < 3 * size  # a leak of one tree a run would be 20x


def test_a_failure_mid_read_leaves_the_working_set_and_the_trees_intact(tmp_path):
    va, a, _ = _saved(tmp_path, 6)
    _, b, path_b = _saved(tmp_path, 7)
    ws = WorkingSet()
    try:
        ws.hold({"a": a})
        size = os.path.getsize(path_b)
        with open(path_b, "r+b") as f:
            f.truncate(size - 100)  # the last tensor's bytes are gone
        with pytest.raises(LoadError, match="shrank"):
            ws.hold({"a": a, "b": b})
        assert [h.name for h in ws.holdings()] == ["a"]
        np.testing.assert_array_equal(ws.get("a").unpack()["layer1"]["w"], va["layer1"]["w"])
        np.testing.assert_array_equal(np.asarray(a["layer2"]["w"]), va["layer2"]["w"])
        with pytest.raises(LoadError):  # the lazy tree still names the damage, every time
            inspector.pack(b)
    finally:
        ws.close()


def test_an_interrupted_streamed_output_leaves_no_file(tmp_path):
    _, a, _ = _saved(tmp_path, 8)
    _, b, path_b = _saved(tmp_path, 9)
    with open(path_b, "r+b") as f:
        f.truncate(os.path.getsize(path_b) - 100)
    out = tmp_path / "out" / "merged.safetensors"
    out.parent.mkdir()
    with pytest.raises(LoadError):
        inspector.weighted_sum([a, b], [0.5, 0.5], out=out)
    assert list(out.parent.iterdir()) == []


def test_a_streamed_output_reuses_its_read_buffers(tmp_path, monkeypatch):
    va, a, _ = _saved(tmp_path, 10, n=20, shape=(300, 200))
    vb, b, _ = _saved(tmp_path, 11, n=20, shape=(300, 200))
    made = []
    real = host_read.host_buffer
    monkeypatch.setattr(host_read, "host_buffer", lambda n: made.append(n) or real(n))
    before = host_read.stats()["bytes"]
    out = inspector.weighted_sum([a, b], [0.5, 0.5], out=tmp_path / "m.safetensors")
    assert host_read.stats()["bytes"] - before == _nbytes(a) + _nbytes(b)  # each byte once
    assert len(made) <= 6  # 40 weight reads: reused buffers (chunked: maps and one gather)
    ref = 0.5 * va["layer7"]["w"].astype(np.float64) + 0.5 * vb["layer7"]["w"]
    np.testing.assert_allclose(np.asarray(out["layer7"]["w"]), ref, rtol=1e-6)


def test_a_tree_of_many_small_leaves_goes_through_the_batched_placement(tmp_path):
    rng = np.random.default_rng(12)
    va = {f"k{i}": rng.normal(size=(3,)).astype(np.float32) for i in range(300)}
    vb = {f"k{i}": rng.normal(size=(3,)).astype(np.float32) for i in range(300)}
    inspector.save(va, tmp_path / "a.safetensors")
    inspector.save(vb, tmp_path / "b.safetensors")
    a, b = (inspector.load(tmp_path / f"{n}.safetensors") for n in "ab")
    r = inspector.run(inspector.weighted_sum, [a, b], [0.5, 0.25], repeats=1)
    assert r.read_bytes == 2 * 300 * 3 * 4 and r.read_gbps > 0
    for k in ("k0", "k299"):
        ref = 0.5 * va[k].astype(np.float64) + 0.25 * vb[k]
        np.testing.assert_allclose(np.asarray(r.result[k]), ref, rtol=1e-6, atol=1e-7)


def test_run_aliases_hundreds_of_read_leaves_on_the_cpu(tmp_path):
    from inspector.core import runner

    _, a, _ = _saved(tmp_path, 13, n=150, shape=(16, 8))  # 301 leaves a tree: 602 reads
    _, b, _ = _saved(tmp_path, 14, n=150, shape=(16, 8))
    cpu = jax.devices("cpu")[0]
    plan = runner.as_op(inspector.weighted_sum).plan([a, b], [0.5, 0.5], device=cpu)
    lazy = {id(x): x for call in plan.calls for x in call.args
            if isinstance(x, inspector.LazyArray)}
    assert len(lazy) == 602  # above the 256 that went through copy kernels before
    values, _ = runner._start_reading(plan).result()
    runner._place_lazy_args(plan, values)
    placed = [x for call in plan.calls for x in call.args if isinstance(x, jax.Array)
              and x.ndim > 0 and x.size > 2]
    pointers = {v.ctypes.data for v in values.values()}
    assert len(placed) == 2 * 150 * 2  # each tree's weights and biases, none copied
    assert all(x.unsafe_buffer_pointer() in pointers for x in placed)


def test_a_read_failing_while_kernels_compile_is_raised_and_the_trees_stay_usable(tmp_path):
    va, a, _ = _saved(tmp_path, 15)
    _, b, path_b = _saved(tmp_path, 16)
    data = path_b.read_bytes()
    with open(path_b, "r+b") as f:
        f.truncate(len(data) - 100)
    with pytest.raises(LoadError, match="shrank"):
        inspector.run(inspector.weighted_sum, [a, b], [0.5, 0.5], repeats=1, warmup=0)
    np.testing.assert_array_equal(np.asarray(a["layer2"]["w"]), va["layer2"]["w"])
    path_b.write_bytes(data)  # repaired: the same lazy tree reads again
    r = inspector.run(inspector.weighted_sum, [a, b], [1.0, 0.0], repeats=1, warmup=0)
    np.testing.assert_array_equal(np.asarray(r.result["layer4"]["w"]), va["layer4"]["w"])


def test_a_kernel_without_populate_write_still_gets_a_faulted_buffer(monkeypatch):
    monkeypatch.setattr(host_read, "_MADVISE", lambda *args: -1)  # as on Linux < 5.14
    monkeypatch.setitem(host_read._POPULATE_WRITE, "ok", True)
    buffer = host_read.host_buffer(3 << 20)
    assert host_read._POPULATE_WRITE["ok"] is False  # MAP_POPULATE from now on
    buffer[:] = 7
    assert buffer.size == 3 << 20 and buffer.ctypes.data % 4096 == 0 and int(buffer[-1]) == 7


def test_a_large_old_file_replaced_is_freed_after_the_rename(tmp_path, monkeypatch):
    import threading

    from inspector.io import replacing

    monkeypatch.setattr(replacing, "HOLD_BYTES", 1024)
    _, a, _ = _saved(tmp_path, 17)
    _, b, _ = _saved(tmp_path, 18)
    out = tmp_path / "out" / "m.safetensors"
    out.parent.mkdir()
    out.write_bytes(b"old" * 1000)
    gc.collect()  # maps of earlier tests' runs (released by JAX at a collection) closed first
    fds = len(os.listdir("/proc/self/fd"))
    merged = inspector.weighted_sum([a, b], [1.0, 0.0], out=out)
    for t in threading.enumerate():
        if t.name == "inspector-free-old":
            t.join()
    assert len(os.listdir("/proc/self/fd")) == fds  # the old file's descriptor is closed
    assert sorted(p.name for p in out.parent.iterdir()) == ["m.safetensors"]
    np.testing.assert_array_equal(np.asarray(merged["layer0"]["w"]), np.asarray(a["layer0"]["w"]))

