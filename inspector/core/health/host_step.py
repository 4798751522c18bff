"""The timeline's step figures of float32 leaves on the CPU, computed by NumPy in place.

On the CPU the device kernel (`step_kernel.py`) first needs each leaf copied into a device
buffer (a read of the file's pages and a write), then reads both leaves again; measured on a
pair of 64 MiB float32 leaves: 188 ms to copy one, 139 ms to reduce the pair, against 79 ms
for NumPy in place. Here the leaves are reduced where they lie (a checkpoint's memory map), a
cache-sized chunk at a time, chunk-major across steps, each figure of the chunk while it is in
cache; the chunks of a leaf are split between two threads (NumPy and BLAS release the GIL).

Products are BLAS dot products of rows of 1,024 elements (`vecdot`), the rows added in
float64: 1.3e-8 off float64 (measured on 64k elements; one BLAS dot product over 60k
elements was 0.1-2.4e-6 off, the tests' tolerance) at 5-6x the speed of a product and
NumPy's pairwise sum. Two products a pair (`|b|^2`, `|b - a|^2`; `|a|^2` is the step
before's): `<a, b>` comes from `(|a|^2 + |b|^2 - |b - a|^2) / 2`, whose rounding errors
largely cancel in the cosine. Same eight figures as the kernel (`step_kernel.N_FIGURES`, same
order); a pair with NaN/Inf gives non-finite sums, and the caller then runs the careful
kernel, as it does for the device kernel's figures.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from inspector.core.health.host_scan import POOL, THREADS

CHUNK = 1 << 16  # elements per step (256 KiB of float32 per operand)
ROW = 1024
JOBS = 4  # jobs a thread
_vecdot = getattr(np, "vecdot", None) or (lambda a, b: np.einsum("ij,ij->i", a, b))


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
    flat = [x.reshape(-1) for x in leaves]
    longest = max((x.size for x in flat), default=0)
    n_chunks = -(-longest // CHUNK)
    if POOL is None or n_chunks == 0:
        parts = [_steps(flat, paired, 0, n_chunks)]
        return lambda: _combined(parts, paired)
    # several jobs a thread: on a busy machine the thread that gets its core takes more; a
    # leaf of a few chunks is one job (the next key path's jobs run beside it)
    n_jobs = 1 if n_chunks < 2 * THREADS else min(n_chunks // 2, JOBS * THREADS)
    bounds = np.linspace(0, n_chunks, n_jobs + 1).astype(int)
    jobs = [POOL.submit(_steps, flat, paired, a, b)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return lambda: _combined([job.result() for job in jobs], paired)


def _combined(parts, paired) -> np.ndarray:
    out = parts[0][0] if len(parts) == 1 else sum(p[0] for p in parts)
    high = np.max([p[1] for p in parts], axis=0)
    low = np.min([p[2] for p in parts], axis=0)
    with np.errstate(invalid="ignore"):
        out[:, 1] = np.maximum(np.abs(high), np.abs(low))
    out[:, 7] = out[:, 0]
    alone = ~np.asarray(paired, bool)
    out[alone, 4] = out[alone, 5] = out[alone, 0]
    return out


def _steps(flat, paired, first: int, stop: int):
    """The sums, maxima and minima of chunks `[first, stop)` of every step (NaN/Inf make
    them non-finite, quietly: the caller reduces such pairs again)."""
    with np.errstate(all="ignore"):
        return _steps_quiet(flat, paired, first, stop)


def _steps_quiet(flat, paired, first: int, stop: int):
    # each leaf as rows of ROW elements (its tail apart); BLAS writes each row's product into
    # a per-leaf row vector, added in float64 once at the end (no sum call per chunk)
    n_rows = [x.size // ROW for x in flat]
    rows = [x[:k * ROW].reshape(k, ROW) for x, k in zip(flat, n_rows, strict=True)]
    bits = [x.view(np.uint32) for x in rows]
    sq = [np.zeros(k, np.float32) for k in n_rows]
    dsq = [np.zeros(k, np.float32) for k in n_rows]
    out = np.zeros((len(flat), 8))
    highs: list[list] = [[] for _ in flat]
    lows: list[list] = [[] for _ in flat]
    changed = [0] * len(flat)
    per = CHUNK // ROW
    d = np.empty((per, ROW), np.float32)
    mask = np.empty((per, ROW), bool)
    for r0 in range(first * per, stop * per, per):
        r1 = r0 + per
        for t, b in enumerate(rows):
            if r0 >= n_rows[t]:
                continue
            y = b[r0:r1]
            k = len(y)
            _vecdot(y, y, out=sq[t][r0:r1])
            highs[t].append(y.max())
            lows[t].append(y.min())
            if paired[t]:
                dd = np.subtract(y, rows[t - 1][r0:r1], out=d[:k])
                _vecdot(dd, dd, out=dsq[t][r0:r1])
                changed[t] += np.count_nonzero(
                    np.not_equal(bits[t - 1][r0:r1], bits[t][r0:r1], out=mask[:k]))
    high = np.array([np.max(h) if h else -np.inf for h in highs])  # NaN stays NaN
    low = np.array([np.min(v) if v else np.inf for v in lows])
    lo_row, hi_row = first * per, stop * per
    for t, b in enumerate(flat):
        f = out[t]
        f[0] = sq[t].sum(dtype=np.float64)
        if paired[t]:
            f[3] = dsq[t].sum(dtype=np.float64)
            f[4] = sq[t - 1].sum(dtype=np.float64)  # the step before's, over the same rows
            # <a, b> = (|a|^2 + |b|^2 - |b - a|^2) / 2: no third product over the data; its
            # error, like a direct product's, is ~1e-8 of |a| |b| (rows summed in float64)
            f[5] = 0.5 * (f[4] + f[0] - f[3])
            f[6] = changed[t]
        if lo_row <= n_rows[t] < hi_row and b.size > n_rows[t] * ROW:  # the tail
            y = b[n_rows[t] * ROW:].astype(np.float64)
            f[0] += y @ y
            high[t], low[t] = max(high[t], y.max()), min(low[t], y.min())
            if paired[t]:
                x = flat[t - 1][n_rows[t] * ROW:]
                f[3] += (y - x) @ (y - x)
                f[4] += x.astype(np.float64) @ x
                f[5] += x @ y
                f[6] += np.count_nonzero(x.view(np.uint32) != b[n_rows[t] * ROW:].view(np.uint32))
    return out, high, low
