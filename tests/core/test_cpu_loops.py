"""The numba building blocks of the CPU passes (`core/cpu_loops.py`): the bit casts against
NumPy's views, the cache fallback, and the scan's pass staying vectorised on x86."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from inspector.core import cpu_loops


def test_bit_casts_match_numpy_views():
    @cpu_loops.loop
    def casts(u, f, i):
        for j in range(u.size):
            f[j] = cpu_loops.as_float(u[j])
            i[j] = cpu_loops.as_int32(u[j])

    x = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 3e38, 1e-45], np.float32)
    u = x.view(np.uint32)
    f, i = np.empty_like(x), np.empty(x.size, np.int32)
    casts(u, f, i)
    assert f.view(np.uint32).tolist() == u.tolist()  # every bit, NaN and -0.0 included
    assert i.tolist() == x.view(np.int32).tolist()


def test_a_loop_without_a_cache_location_is_compiled_uncached():
    """A function numba cannot cache (here: no source file) still compiles and runs."""
    namespace = {}
    exec("def total(x):\n    s = 0.0\n    for v in x:\n        s += v\n    return s\n",
         namespace)
    total = cpu_loops.loop(namespace["total"])
    assert total(np.arange(10, dtype=np.float32)) == 45.0


def test_a_loop_with_prefetches_up_to_the_last_element_sums_right():
    """Prefetches change no value: the sum of a loop asking for every element ahead, clipped
    to the last one (as the passes clip theirs to the buffer's end), against float64."""

    @cpu_loops.loop
    def fetched_sum(x):
        s = np.float32(0)
        for j in range(x.size):
            cpu_loops.prefetch(x, min(j + 64, x.size - 1))
            s += x[j]
        return s

    x = np.arange(1000, dtype=np.float32)
    assert fetched_sum(x) == np.float32(x.astype(np.float64).sum())


def _avx2() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " avx2" in f.read()
    except OSError:
        return False


@pytest.mark.skipif(platform.machine() != "x86_64" or not _avx2(), reason="x86 with AVX2")
def test_the_scan_pass_is_vectorised():
    """The pass's loop in 256- or 512-bit registers, with no gathers (docs/health-speed.md:
    the scalar or gathering forms were 2-4x slower)."""
    import numba

    from inspector.core.health import scan_loops

    fresh = numba.njit(**cpu_loops.OPTIONS)(scan_loops.segment_pass.py_func)  # cached code
    u = np.zeros(16, np.uint32)  # has no assembly to inspect
    fresh(u, np.array([0, 16], np.int64), np.empty((1, 3), np.uint32), np.empty((1, 4)))
    asm = "\n".join(fresh.inspect_asm().values())
    assert "gather" not in asm
    for op in ("vpmaxud", "vpminud", "vpmaxsd", "vaddps"):
        assert any(op in line and ("ymm" in line or "zmm" in line)
                   for line in asm.splitlines()), op
