"""`compile_count()` counts XLA's own compilations; the kernel cache is bounded (LRU)."""

import numpy as np
import pytest

import inspector
from inspector import run, weighted_sum
from inspector.core.out_buffers import FILL_BYTES


def packed(size: int, value: float):
    return inspector.pack({"x": np.full(size, value, np.float32)})


def test_compile_count_counts_every_compilation_an_op_causes_not_only_cache_entries(compiles):
    n = FILL_BYTES // 4 + 1237  # a size no other test uses, its output filled where it lives
    trees = [packed(n, 1.0), packed(n, 2.0)]
    kernels_before, count_before = inspector.cached_kernels(), inspector.compile_count()
    with compiles() as c:
        r = run(weighted_sum, trees, [1.0, 0.5], repeats=1)
    counted = inspector.compile_count() - count_before
    # The kernel, and what `jnp.zeros` compiles for the output buffer of a new size (a
    # broadcast, and once per process a dtype conversion): more than the one cache entry.
    assert inspector.cached_kernels() - kernels_before == 1
    assert counted == c.count == r.n_compiled >= 2
    assert r.compile_seconds > 0
    np.testing.assert_array_equal(np.asarray(r.result.unpack()["x"]), np.full(n, 2.0))
    with compiles() as c:
        again = run(weighted_sum, trees, [3.0, 1.0], repeats=1)
    assert c.count == again.n_compiled == 0 and again.compile_seconds == 0.0


def test_compile_count_includes_compiles_made_outside_the_kernel_cache(compiles):
    import jax.numpy as jnp

    before = inspector.compile_count()
    with compiles() as c:
        jnp.arange(1239.0).sum().block_until_ready()  # not an inspector kernel at all
    assert c.count >= 1 and inspector.compile_count() - before == c.count


def test_the_kernel_cache_forgets_the_least_recently_used_kernel(compiles):
    previous = inspector.set_cache_limit(3)
    try:
        inspector.clear_cache()
        sizes = [1301, 1302, 1303]
        trees = {n: [packed(n, 1.0), packed(n, 2.0)] for n in [*sizes, 1304]}
        for n in sizes:
            run(weighted_sum, trees[n], [1, 1], repeats=1)
        assert inspector.cached_kernels() == 3
        run(weighted_sum, trees[1301], [2, 1], repeats=1)  # 1301 is now the most recent
        with compiles() as c:
            run(weighted_sum, trees[1304], [1, 1], repeats=1)  # evicts 1302
        # its kernel only: a small output's zeros are a copy of NumPy's (nothing compiled)
        assert inspector.cached_kernels() == 3 and c.count == 1
        with compiles() as c:
            r = run(weighted_sum, trees[1301], [1, 3], repeats=1)
        assert c.count == 0 and r.result.unpack()["x"].tolist() == [7.0] * 1301
        with compiles() as c:
            r = run(weighted_sum, trees[1302], [1, 3], repeats=1)
        assert c.count == 1 and r.n_compiled == 1  # the kernel again
        assert r.result.unpack()["x"].tolist() == [7.0] * 1302
        assert inspector.set_cache_limit(1) == 3 and inspector.cached_kernels() == 1
    finally:
        inspector.set_cache_limit(previous)


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_a_cache_limit_below_one_kernel_is_refused(bad):
    with pytest.raises(inspector.InspectorError, match="at least 1 kernel"):
        inspector.set_cache_limit(bad)
