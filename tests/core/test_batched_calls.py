"""Plain (unpacked) trees of many leaves: per-leaf calls of one shape run in batches, and large
leaves write into donated buffers; the values must match NumPy either way."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inspector
from inspector.core.out_buffers import DONATE_BYTES, donating
from inspector.core.stacking import plan_stack
from inspector.core.transfer import put
from inspector.core.weighted_sum import plan_weighted_sum


def many(seed: int, n: int = 41) -> dict:
    """`n` leaves of one shape and `n` of another: a batch of 32 of each and one of the rest."""
    rng = np.random.default_rng(seed)
    return {f"l{i:02d}": {"w": rng.standard_normal((3, 5)).astype(np.float32),
                          "b": rng.integers(-9, 9, (7,)).astype(np.int32)} for i in range(n)}


def test_batched_calls_give_every_leaf_its_own_result():
    trees = [many(s) for s in range(3)]
    r = inspector.run(inspector.weighted_sum, trees, [0.5, -2.0, 1.0], repeats=2)
    # per shape 41 = 32 + 9: a batch of 32 each, and the 9 + 9 left share one batch
    assert r.n_kernels == 3
    for key in trees[0]:
        for leaf in ("w", "b"):
            ref = sum(w * np.asarray(t[key][leaf], np.float64)
                      for w, t in zip([0.5, -2.0, 1.0], trees, strict=True))
            np.testing.assert_allclose(np.asarray(r.result[key][leaf], np.float64), ref,
                                       rtol=1e-6, atol=1e-6)


def test_batched_stack_unstack_and_index_round_trip():
    trees = [many(s) for s in range(3)]
    stacked = inspector.stack(trees)
    for key in trees[0]:
        np.testing.assert_array_equal(np.asarray(stacked[key]["w"]),
                                      np.stack([np.asarray(t[key]["w"]) for t in trees]))
    back = inspector.unstack(stacked)  # each batched call returns a tuple of 3 slices
    assert len(back) == 3
    for t, u in zip(trees, back, strict=True):
        for key in t:
            np.testing.assert_array_equal(np.asarray(u[key]["b"]), t[key]["b"])
    picked = inspector.index(stacked, 1)
    np.testing.assert_array_equal(np.asarray(picked["l40"]["w"]), trees[1]["l40"]["w"])


@pytest.mark.parametrize("repeats", [1, 3])
def test_large_plain_leaves_write_into_donated_buffers(repeats):
    n = DONATE_BYTES // 4  # float32 elements of one large leaf
    rng = np.random.default_rng(0)
    trees = [{"big": rng.standard_normal(n).astype(np.float32),
              "small": rng.standard_normal(8).astype(np.float32)} for _ in range(2)]
    plan = plan_weighted_sum(trees, [1.0, 1.0])
    assert [c.donate for c in plan.calls] == [(0,), ()]  # big donates, small does not
    r = inspector.run(inspector.weighted_sum, trees, [2.0, -1.0], repeats=repeats)
    np.testing.assert_allclose(np.asarray(r.result["big"]),
                               2.0 * trees[0]["big"] - trees[1]["big"], rtol=1e-6, atol=1e-6)
    assert [c.donate for c in plan_stack(trees).calls] == [(0,), ()]
    stacked = inspector.run(inspector.stack, trees, repeats=repeats).result
    np.testing.assert_array_equal(np.asarray(stacked["big"]), np.stack([t["big"] for t in trees]))
    halves = inspector.run(inspector.unstack, stacked, repeats=repeats).result
    np.testing.assert_array_equal(np.asarray(halves[1]["big"]), trees[1]["big"])


def test_a_plain_result_reuses_the_previous_results_buffer():
    n = DONATE_BYTES // 4
    trees = [{"big": jax.device_put(np.full(n, float(s + 1), np.float32))} for s in range(2)]
    old = inspector.weighted_sum(trees, [1.0, 1.0])
    with donating(jax.tree.leaves(old)):
        new = inspector.weighted_sum(trees, [1.0, 2.0])
    assert jax.tree.leaves(old)[0].is_deleted()  # its memory now holds the new result
    assert float(new["big"][0]) == float(new["big"][-1]) == 5.0


def test_many_numpy_leaves_reach_the_device_with_their_values_copied():
    # 256 NumPy arrays or more bound for one device go 32 (then 4) at a time through a
    # compiled copy; the rest (here 3 of each kind) through device_put. float64 becomes
    # float32 as device_put makes it (x64 is off); bfloat16 and int8 stay.
    rng = np.random.default_rng(0)
    kinds = [((3,), np.float32), ((2, 5), np.float64), ((7,), jnp.bfloat16), ((4, 1), np.int8)]
    arrays = [rng.standard_normal(shape).astype(dtype) for _ in range(71) for shape, dtype in kinds]
    device = jax.devices()[0]
    out = put([(a, device) for a in arrays])
    for a, b in zip(arrays, out, strict=True):
        assert isinstance(b, jax.Array) and b.devices() == {device}
        assert b.dtype == jax.dtypes.canonicalize_dtype(a.dtype) and b.shape == a.shape
        np.testing.assert_array_equal(np.asarray(b, np.float64), np.asarray(a, b.dtype))
    before = np.asarray(out[0]).copy()
    arrays[0][...] = 99  # the caller's array changes; the device's copy does not
    np.testing.assert_array_equal(np.asarray(out[0]), before)


def test_a_plain_weighted_sum_of_many_float64_numpy_leaves():
    trees = [{f"l{i}": np.full((2, 3), float(i + s), np.float64) for i in range(300)}
             for s in range(2)]
    r = inspector.run(inspector.weighted_sum, trees, [1.0, -0.5], repeats=2)
    for i in (0, 131, 299):
        leaf = r.result[f"l{i}"]
        assert leaf.dtype == np.float32
        np.testing.assert_allclose(np.asarray(leaf), np.full((2, 3), i - 0.5 * (i + 1)))


def test_kernels_compiled_side_by_side_keep_the_callers_x64_context():
    # Uncached kernels compile in worker threads; JAX's x64 switch is the caller's
    # thread-local context, so the kernels are traced in the caller (float64 stays float64).
    inspector.clear_cache()
    trees = [{"a": np.full((3,), 1 + 1e-12 * s, np.float64),
              "b": np.full((2, 2), 2 + 1e-12 * s, np.float64)} for s in range(2)]
    with jax.enable_x64(True):
        out = inspector.weighted_sum(trees, [1.0, -1.0])
        assert out["a"].dtype == out["b"].dtype == np.float64
        np.testing.assert_allclose(np.asarray(out["a"]), -1e-12, rtol=1e-3)
        np.testing.assert_allclose(np.asarray(out["b"]), -1e-12, rtol=1e-3)


def test_large_leaves_of_one_shape_run_batched_each_into_its_own_buffer():
    """33 leaves of one shape, each as large as donated outputs get: a batch of 32 and a single,
    each member donating and carrying its own output buffer through the timed repeats; every
    result keeps its values."""
    n = DONATE_BYTES // 4
    rng = np.random.default_rng(3)
    trees = [{f"big{i}": rng.standard_normal(n).astype(np.float32) for i in range(33)}
             for _ in range(3)]
    weights = [0.5, -1.0, 2.0]
    r = inspector.run(inspector.weighted_sum, trees, weights, repeats=4)
    assert r.n_kernels == 2  # 32 + 1
    results = [r.result[f"big{i}"] for i in range(33)]
    assert len({x.unsafe_buffer_pointer() for x in results}) == 33  # no two share a buffer
    for i, x in enumerate(results):
        ref = sum(w * t[f"big{i}"].astype(np.float64) for w, t in zip(weights, trees, strict=True))
        np.testing.assert_allclose(np.asarray(x, np.float64), ref, rtol=1e-6, atol=1e-6)
    stacked = inspector.run(inspector.stack, trees, repeats=3)
    assert stacked.n_kernels == 2
    back = inspector.run(inspector.unstack, stacked.result, repeats=3)
    for t, u in zip(trees, back.result, strict=True):
        for key in t:
            np.testing.assert_array_equal(np.asarray(u[key]), t[key])


def test_calls_of_different_shapes_left_over_share_one_kernel():
    """Leaves of five shapes (two donating their outputs, three small; an int leaf among
    them): too few of each for a batch of their own, they run in one kernel, each into its own
    buffer, through timed repeats; stack, unstack and index too."""
    n = DONATE_BYTES // 4
    rng = np.random.default_rng(5)

    def tree():
        return {"big": rng.standard_normal(n).astype(np.float32),
                "big2": rng.standard_normal((2, n // 2)).astype(np.float32),
                "w": rng.standard_normal((3, 5)).astype(np.float32),
                "b": rng.integers(-9, 9, (7,)).astype(np.int32),
                "s": np.float32(rng.standard_normal())}

    trees = [tree() for _ in range(3)]
    weights = [0.5, -1.0, 2.0]
    # leaves in key order: b, big, big2, s, w
    assert [c.donate for c in plan_weighted_sum(trees, weights).calls] == [(), (0,), (0,), (),
                                                                           ()]
    r = inspector.run(inspector.weighted_sum, trees, weights, repeats=3)
    assert r.n_kernels == 1
    assert len({x.unsafe_buffer_pointer() for x in jax.tree.leaves(r.result)}) == 5
    for key in trees[0]:
        ref = sum(w * np.asarray(t[key], np.float64) for w, t in zip(weights, trees, strict=True))
        np.testing.assert_allclose(np.asarray(r.result[key], np.float64), ref, rtol=1e-5,
                                   atol=1e-5)
    stacked = inspector.run(inspector.stack, trees, repeats=3)
    assert stacked.n_kernels == 1
    back = inspector.run(inspector.unstack, stacked.result, repeats=3)
    assert back.n_kernels == 1
    picked = inspector.run(inspector.index, stacked.result, 2, repeats=3)
    assert picked.n_kernels == 1
    for t, u in zip(trees, back.result, strict=True):
        for key in t:
            np.testing.assert_array_equal(np.asarray(u[key]), t[key])
            np.testing.assert_array_equal(np.asarray(picked.result[key]), trees[2][key])
