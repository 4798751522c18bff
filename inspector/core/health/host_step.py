"""The timeline's step figures of float32 leaves on the CPU, computed in place by one numba
pass a chunk (`step_loops.py`).

On the CPU the device kernel (`step_kernel.py`) first needs each leaf copied into a device
buffer (a read of the file's pages and a write), then reads both leaves again; measured on a
pair of 64 MiB float32 leaves: 188 ms to copy one, 139 ms to reduce the pair, against 79 ms
for seven NumPy passes in place; the one pass here takes 0.5-0.6 ns of CPU an element, as a
float32 sum of the leaf does (docs/timeline-speed.md). The leaves are reduced where they lie
(a checkpoint's memory map), a cache-sized chunk at a time, chunk-major across steps: chunk
k of step t is read from memory once, and read again as the next step's `a` while still in
cache. The chunks of a leaf are split between two threads (the loops release the GIL).

One pass a pair computes `sum b^2`, `sum (b - a)^2`, the elements whose bits differ and
`max |b|` (float32 sums inside blocks of 1,024 elements, added in float64: ~1e-7 relative
error against float64); `sum a^2` is the step before's `sum b^2` over the same elements, and
`<a, b> = (|a|^2 + |b|^2 - |b - a|^2) / 2`, whose rounding errors largely cancel in the
cosine: 1 - cos of a step with a 1e-3 relative change (~5e-7) came out 6e-9 relative off
float64 on 19,132 standard normal elements, 5e-8 with a mean of 1e4 (a direct product's
errors do not cancel: 1.3% off with BLAS; the tests assert 1% and 1e-4). Same eight figures
as the kernel (`step_kernel.N_FIGURES`, same order); a pair with NaN/Inf gives non-finite
sums (or a non-finite maximum), and the caller then runs the careful kernel, as it does for
the device kernel's figures.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from inspector.core.health.host_scan import POOL, THREADS

CHUNK = 1 << 16  # elements per step (256 KiB of float32 per operand)
JOBS = 4  # jobs a thread


def host_steps(leaves: list[np.ndarray], paired: list[bool]) -> np.ndarray:
    """Returns `(len(leaves), 8)` step figures of one key path's float32 leaves at successive
    steps (`paired[t]`: leaf t is compared with leaf t - 1, same shape), computed chunk-major:
    chunk k of every step in turn, so the step before's chunk is still in cache when the next
    step reads its own, and each leaf is read from memory once (a leaf-major pass reads every
    leaf twice: as `b` and again as the next step's `a`)."""
    return submit_steps(leaves, paired)()


def submit_steps(leaves: list[np.ndarray], paired: list[bool]) -> Callable[[], np.ndarray]:
    """`host_steps` started on the worker threads: returns a function that waits for the
    figures and returns them, so the caller can read the next key path's leaves meanwhile."""
    from inspector.core.health import step_loops  # numba: only when the CPU reduces

    bits = []
    for x in leaves:
        u = x.reshape(-1).view(np.uint32)
        u.flags.writeable = False  # one array type for the loops (files' maps are read-only)
        bits.append(u)
    longest = max((u.size for u in bits), default=0)
    n_chunks = -(-longest // CHUNK)
    if POOL is None or n_chunks == 0:
        parts = [_steps(step_loops, bits, paired, 0, n_chunks)]
        return lambda: _combined(parts, paired)
    # several jobs a thread: on a busy machine the thread that gets its core takes more; a
    # leaf of a few chunks is one job (the next key path's jobs run beside it)
    n_jobs = 1 if n_chunks < 2 * THREADS else min(n_chunks // 2, JOBS * THREADS)
    bounds = np.linspace(0, n_chunks, n_jobs + 1).astype(int)
    jobs = [POOL.submit(_steps, step_loops, bits, paired, a, b)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return lambda: _combined([job.result() for job in jobs], paired)


def _steps(loops, bits, paired, first: int, stop: int):
    """The sums and the maxima's bits of chunks `[first, stop)` of every step, chunk-major
    (NaN/Inf make them non-finite: the caller reduces such pairs again)."""
    sums = np.zeros((len(bits), loops.N_SUMS))
    tops = np.zeros(len(bits), np.uint32)
    sizes = [u.size for u in bits]
    for lo in range(first * CHUNK, stop * CHUNK, CHUNK):
        for t, u in enumerate(bits):
            if lo >= sizes[t]:
                continue
            hi = min(lo + CHUNK, sizes[t])
            loops.pair_sums(bits[t - 1] if paired[t] else u, u, lo, hi, sums, tops, t)
    return sums, tops


def _combined(parts, paired) -> np.ndarray:
    sums = parts[0][0] if len(parts) == 1 else sum(p[0] for p in parts)
    tops = np.max([p[1] for p in parts], axis=0)
    out = np.zeros((len(sums), 8))
    out[:, 0] = out[:, 7] = sums[:, 0]
    out[:, 1] = tops.view(np.float32)  # the bits of max |b|: NaN/Inf when b has them
    pair = np.asarray(paired, bool)
    before = np.flatnonzero(pair) - 1
    out[pair, 3], out[pair, 4], out[pair, 6] = sums[pair, 1], sums[before, 0], sums[pair, 2]
    with np.errstate(invalid="ignore"):  # Inf - Inf: NaN, as the sums' NaN
        # <a, b> = (|a|^2 + |b|^2 - |b - a|^2) / 2: no product of a and b in the pass; its
        # error, like a direct product's, is ~1e-7 of |a| |b|
        out[pair, 5] = 0.5 * (out[pair, 4] + out[pair, 0] - out[pair, 3])
    out[~pair, 4] = out[~pair, 5] = out[~pair, 0]
    return out
