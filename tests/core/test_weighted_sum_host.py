"""The CPU's weighted sum of large packed float32 buffers: the numba loop with streaming
stores (`sum_loops.py`, `weighted_sum_host.py`).

Its values are XLA's kernel's bit for bit (the same float32 expression, a multiply contracted
into the add after it as XLA's CPU backend does), and both are checked against NumPy float64.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import inspector
from inspector.core import out_buffers, sum_loops, weighted_sum_host
from inspector.core.cpu_loops import aligned_empty
from inspector.core.runner import PlannedRun

CPU = jax.devices("cpu")[0]


def xla_sum(w, xs):
    def f(w, *xs):
        total = w[0] * xs[0]
        for i in range(1, len(xs)):
            total = total + w[i] * xs[i]
        return total

    placed = [jax.device_put(x, CPU) for x in (np.asarray(w, np.float32), *xs)]
    return np.asarray(jax.jit(f)(*placed))


def f64_sum(w, xs):
    return sum(np.float64(wi) * x.astype(np.float64) for wi, x in zip(w, xs, strict=True))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("n", [0, 1, 15, 2048, 2049, 3 * (1 << 20) + 17])
def test_the_loop_gives_xlas_bits_for_any_size_alignment_and_threads(k, n):
    rng = np.random.default_rng(k * 7 + n)
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(k)]
    if n > 40:
        xs[0][[3, 17, 40]] = [np.nan, np.inf, -0.0]
    w = rng.uniform(-2, 2, k).astype(np.float32)
    want = xla_sum(w, xs)
    for out, threads in [(aligned_empty(n, np.float32), None),  # 64-byte aligned
                         (np.empty(n + 3, np.float32)[3:], None),  # 12 bytes off a line
                         (aligned_empty(n, np.float32), 1)]:
        out[:] = 7.0  # overwritten, not added to
        sum_loops.weighted_sum_into(xs, w, out, threads=threads)
        np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    if n:
        finite = np.isfinite(want)
        np.testing.assert_allclose(want[finite], f64_sum(w, xs)[finite], rtol=1e-5,
                                   atol=1e-5 * k)


def test_the_loop_refuses_what_it_cannot_sum():
    x = np.zeros(8, np.float32)
    with pytest.raises(ValueError, match="one weight per array"):
        sum_loops.weighted_sum_into([x, x], np.ones(1, np.float32), np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="float32 arrays of 8 elements"):
        sum_loops.weighted_sum_into([x, x.astype(np.float64)], np.ones(2, np.float32),
                                    np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="float32 arrays of 9 elements, got float32 \\(8,\\)"):
        sum_loops.weighted_sum_into([x], np.ones(1, np.float32), np.zeros(9, np.float32))


@pytest.fixture
def small_groups(monkeypatch):
    """The loop for groups of 256 KiB and more (4 MiB in use: kept small here)."""
    monkeypatch.setattr(weighted_sum_host, "MIN_BYTES", 1 << 18)


def model(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((300, 700)).astype(np.float32),
            "b": rng.standard_normal(700).astype(np.float32),
            "steps": np.arange(5, dtype=np.int32) * seed,
            "half": rng.standard_normal(64).astype(np.float16)}


def test_a_packed_sum_takes_the_loop_for_its_large_float32_group(small_groups, monkeypatch):
    trees = [inspector.pack(model(s)) for s in (1, 2, 3)]
    w = [0.5, -0.25, 1.5]
    planned = PlannedRun(inspector.weighted_sum, trees, w, device=CPU)
    hosts = {c.args[2].dtype.name: c.host for c in planned.plan.calls}
    assert hosts == {"float32": True, "int32": False, "float16": False}
    result, _ = planned.execute()
    got = result.unpack()
    n = 300 * 700 + 700  # the float32 group: "w" and "b"
    assert planned.plan.cost()["bytes accessed"] >= 4 * 4 * n  # 3 read + 1 written, + XLA's
    monkeypatch.setattr(weighted_sum_host, "HOST_LOOP", False)  # XLA's kernel, same trees
    xla = inspector.weighted_sum(trees, w, device=CPU).unpack()
    for key in ("w", "b", "steps", "half"):
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(xla[key]))
    plain = [model(s) for s in (1, 2, 3)]
    np.testing.assert_allclose(got["w"], f64_sum(w, [t["w"] for t in plain]), rtol=1e-5,
                               atol=1e-5)


def test_no_fill_then_each_execution_writes_into_the_last_ones_memory(small_groups):
    """The first execution fills no buffer (the loop writes fresh memory once); a timed
    repeat writes into the last result's memory and deletes it; a weight change given the
    last result (`donating`, as the app does) writes into its memory too; after `detach`
    the next execution takes fresh memory and the last result stays readable."""
    trees = [inspector.pack(model(s)) for s in (4, 5)]
    fills = out_buffers._zeros.cache_info().currsize
    planned = PlannedRun(inspector.weighted_sum, trees, [0.5, 0.5], device=CPU)

    def f32(result):
        return result.buffers["float32"]

    first, _ = planned.execute()
    assert out_buffers._zeros.cache_info().currsize == fills  # no fill compiled
    address = f32(first).unsafe_buffer_pointer()
    assert address % 64 == 0
    second, _ = planned.execute()
    assert f32(first).is_deleted() and f32(second).unsafe_buffer_pointer() == address
    with out_buffers.donating(second.buffers.values()):
        third = inspector.weighted_sum(trees, [2.0, -1.0], device=CPU)
    assert f32(second).is_deleted() and f32(third).unsafe_buffer_pointer() == address
    a, b = (model(s)["w"].astype(np.float64) for s in (4, 5))
    np.testing.assert_allclose(third.unpack()["w"], 2 * a - b, rtol=1e-5, atol=1e-5)
    planned.detach()
    fourth, _ = planned.execute()
    assert not f32(third).is_deleted()
    assert f32(fourth).unsafe_buffer_pointer() != address
    np.testing.assert_allclose(fourth.unpack()["w"], (a + b) / 2, rtol=1e-6, atol=1e-6)


def scattered(sizes: list[int], k: int, seed: int):
    """k sources holding members of `sizes` in shuffled order at odd places, with their
    positions, and the members packed in order (what the gather must read)."""
    rng = np.random.default_rng(seed)
    sources, positions, packed = [], [], []
    for _ in range(k):
        order = rng.permutation(len(sizes))
        pos = np.zeros(len(sizes), np.int64)
        at = 5
        for j in order:
            pos[j] = at
            at += sizes[j] + 3  # a gap between members
        source = rng.standard_normal(at + 11).astype(np.float32)
        source.flags.writeable = False  # as a file's map is
        sources.append(source)
        positions.append(pos)
        packed.append(np.concatenate([source[p:p + s] for p, s in zip(pos, sizes, strict=True)]))
    return sources, np.stack(positions), packed


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_gathering_loop_gives_the_packed_loops_bits(k, threads):
    sizes = [7, 0, (1 << 20) * 2 + 5, 1, 40_000, 3]
    sources, positions, packed = scattered(sizes, k, seed=k)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    w = np.random.default_rng(k).uniform(-2, 2, k).astype(np.float32)
    n = sum(sizes)
    want = np.empty(n, np.float32)
    sum_loops.weighted_sum_into(packed, w, want)
    out = np.full(n + 1, 7.0, np.float32)[1:]  # 4 bytes off a line; overwritten
    sum_loops.weighted_gather_sum_into(sources, positions, offsets, np.array(sizes), w, out,
                                       threads=threads)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(out, f64_sum(w, packed), rtol=1e-5, atol=1e-5 * k)


def test_the_gathering_loop_refuses_members_outside_its_arrays():
    x = np.zeros(10, np.float32)
    one = np.ones(1, np.float32)
    for positions, offsets, sizes, out in [
            ([[8]], [0], [3], np.zeros(3, np.float32)),  # past the input's end
            ([[0]], [2], [3], np.zeros(4, np.float32)),  # past the output's end
            ([[-1]], [0], [1], np.zeros(1, np.float32))]:
        with pytest.raises(ValueError, match="outside its input or the output"):
            sum_loops.weighted_gather_sum_into([x], np.array(positions), np.array(offsets),
                                               np.array(sizes), one, out)
