"""Streamed outputs written into a few reused buffers (issue 26), values unchanged."""

import gc

import numpy as np
import pytest

import inspector
from inspector.core.lazy_result import lazy_result
from inspector.core.output_slots import OutputSlot, SlotPool
from inspector.core.weighted_sum import plan_weighted_sum


def _files(tmp_path, n=6, shape=(64, 256), seed=0):
    rng = np.random.default_rng(seed)
    trees = [{f"w{i}": rng.normal(size=shape).astype(np.float32) for i in range(n)}
             for _ in range(2)]
    paths = [inspector.save(t, tmp_path / f"in{k}.safetensors") for k, t in enumerate(trees)]
    return trees, [inspector.load(p) for p in paths]


def test_a_stream_writes_its_outputs_into_the_same_memory_and_the_values_hold(tmp_path):
    trees, lazy = _files(tmp_path)
    plan = plan_weighted_sum(lazy, [0.25, 0.75], stream=True)
    assert all(isinstance(c.args[0], OutputSlot) for c in plan.calls)
    out = lazy_result(plan)
    addresses = set()
    for i in range(6):
        leaf = out[f"w{i}"]
        # where the output lies: the device buffer (on a GPU, `np.asarray` is a host copy)
        addresses.add(leaf.unsafe_buffer_pointer() if hasattr(leaf, "unsafe_buffer_pointer")
                      else np.asarray(leaf).ctypes.data)
        got = np.asarray(leaf)
        want = 0.25 * trees[0][f"w{i}"].astype(np.float64) + 0.75 * trees[1][f"w{i}"]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        del got, leaf
    assert len(addresses) == 1  # each output landed where the previous one was


def test_an_output_still_held_is_never_overwritten(tmp_path):
    trees, lazy = _files(tmp_path, n=3, seed=1)
    out = lazy_result(plan_weighted_sum(lazy, [1.0, -1.0], stream=True))
    kept = [np.asarray(out[f"w{i}"]) for i in range(3)]  # a reader that keeps every leaf
    for i, got in enumerate(kept):
        np.testing.assert_array_equal(got, trees[0][f"w{i}"] - trees[1][f"w{i}"])
    assert len({k.ctypes.data for k in kept}) == 3


def test_the_pool_keeps_a_few_buffers_and_makes_none_once_warm():
    import jax

    pool = SlotPool(jax.devices("cpu")[0])
    slot = OutputSlot((1024,), np.float32)
    for _ in range(20):
        view = pool.lend(pool.take(slot) + 1)
        del view
        gc.collect(0)
    assert pool.made == 1


def test_streamed_file_equals_numpy_over_repeated_runs(tmp_path):
    trees, lazy = _files(tmp_path, n=4, seed=2)
    target = tmp_path / "sum.safetensors"
    for _ in range(3):
        out = inspector.weighted_sum(lazy, [0.5, 0.5], out=target)
        for k in trees[0]:
            want = 0.5 * trees[0][k].astype(np.float64) + 0.5 * trees[1][k]
            np.testing.assert_allclose(np.asarray(out[k]), want, rtol=1e-6, atol=1e-6)


def test_an_output_slot_outside_a_stream_reads_as_zeros():
    slot = OutputSlot((2, 3), "float32")
    assert np.asarray(slot).tolist() == [[0.0] * 3] * 2 and slot.nbytes == 24


@pytest.mark.parametrize("bad", ["w2"])
def test_a_failure_mid_stream_leaves_no_file_and_the_inputs_intact(tmp_path, bad):
    trees, lazy = _files(tmp_path, n=4, seed=3)
    broken = dict(lazy[1])

    def fail():
        raise OSError("read failed")

    broken[bad] = inspector.LazyArray((64, 256), "float32", fail, source="x:" + bad)
    target = tmp_path / "sum.safetensors"
    with pytest.raises(OSError, match="read failed"):
        inspector.weighted_sum([lazy[0], broken], [0.5, 0.5], out=target)
    assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in0.safetensors", "in1.safetensors"]
    np.testing.assert_array_equal(np.asarray(lazy[0]["w3"]), trees[0]["w3"])  # still loaded


def test_a_streamed_ties_merge_reuses_its_buffers_and_equals_the_in_memory_merge(tmp_path):
    from inspector.core.merge import plan_merge

    trees, lazy = _files(tmp_path, n=4, seed=4)
    base = {k: v * 0.5 for k, v in trees[0].items()}
    kw = dict(weights=[1.0, 0.5], density=0.4)
    plan = plan_merge("ties", lazy, base=base, stream=True, **kw)
    assert all(isinstance(c.args[0], OutputSlot) for c in plan.calls)
    out = inspector.merge("ties", lazy, base=base, out=tmp_path / "ties.safetensors", **kw)
    memory = inspector.merge("ties", trees, base=base, **kw)
    for k in trees[0]:
        np.testing.assert_array_equal(np.asarray(out[k]), np.asarray(memory[k]))


def test_twenty_streamed_runs_leave_no_device_buffers_behind(tmp_path):
    import jax

    _, lazy = _files(tmp_path, n=3, seed=5)
    target = tmp_path / "sum.safetensors"
    counts = []
    for _ in range(20):
        inspector.weighted_sum(lazy, [0.5, 0.5], out=target)
        gc.collect()
        counts.append(len(jax.live_arrays()))
    assert counts[-1] <= counts[1]  # no growth once warm (output buffers, weights)
