"""The scan's row partials of a float32 (or 16-bit float) buffer on the CPU, computed where it
lies by one numba pass (`scan_loops.py`).

XLA's CPU backend reduces at 1-2 GB/s when a reduction has any elementwise producer fused into
it, and runs every figure as its own loop over the data (measured here on 1e8 float32: one
plain sum 48-64 ms; the ten figures as column reductions 1.2-2.2 s, one loop fusion per
figure); NumPy needs five passes (min, max, zeros, sum, sum of squares: 86-102 ms of CPU). So
on the CPU a float32 buffer (a `jax.Array` on the CPU is a NumPy view, no copy) is reduced by
`scan_loops.segment_pass`, which reads each element once for every figure; the buffer's
chunks are split between two threads (the loop releases the GIL).

Each chunk is cut where a leaf starts or ends, so each segment belongs to one leaf and a leaf
is a run of whole segments. Per segment, the ten partials of `kernels.py` (`n, shift, sum d,
sum d^2, min, max, zeros, nan, +inf, -inf`, `d = x - shift`):

- min, max: from the integer maxima of the bits and the least |x| bits (`decode_min_max`); a
  NaN or Inf shows in them or in the sums, and only a segment holding one (or whose float32 sums
  overflow) goes through the careful pass (`_careful`: float64, NaN/Inf counted, left out of
  the moments);
- sums and sums of squares in float32 in blocks of 256 elements, the blocks added in
  float64: error ~1e-7 relative;
- shift 0, unless the segment's mean is large against its spread (`sum x^2 > 4 M2`), where the
  unshifted `M2 = sum x^2 - (sum x)^2 / n` would lose digits: those segments are summed again
  about their own mean (rounded to float32) while in cache; a constant segment (`min == max`)
  needs no spread: shift = its value;
- zeros (+0.0 and -0.0) counted in the same pass.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from inspector.core.health.partials import (
    MAX,
    MIN,
    NAN,
    NEGINF,
    POSINF,
    SHIFT,
    SUM_D,
    SUM_DD,
    ZEROS,
    leaf_figures,
)
from inspector.core.health.partials import N as COUNT

CHUNK = 1 << 18
"""Elements per chunk: the unit of work a thread takes, and of widening a 16-bit buffer to
float32 (1 MiB of float32: stays in a core's L2 cache)."""
THREADS = max(1, min(2, os.cpu_count() or 1))
POOL = ThreadPoolExecutor(THREADS, thread_name_prefix="inspector-scan") if THREADS > 1 \
    else None


def segments(offsets: np.ndarray, sizes: np.ndarray, size: int):
    """Returns `(points, start, stop)`: the cut points of a buffer of `size` elements (every
    leaf's start and end, every multiple of `CHUNK`, 0 and `size`; segment i is
    `[points[i], points[i + 1])`) and each leaf's run of segments `[start, stop)`."""
    offsets = np.asarray(offsets, np.int64)
    ends = offsets + np.asarray(sizes, np.int64)
    points = np.unique(np.concatenate([offsets, ends, np.arange(0, size, CHUNK, dtype=np.int64),
                                       [size]]))
    return points, np.searchsorted(points, offsets), np.searchsorted(points, ends)


HOST_DTYPES = ("float32", "bfloat16", "float16")
"""Buffers reduced here (the 16-bit ones widened to float32 a chunk at a time: a bfloat16
buffer of 5e7 elements measured 495 ms through XLA on the CPU)."""


def host_rows(x: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Returns `(len(points) - 1, 10)` float64 partials of each segment of flat `x` (a dtype
    of `HOST_DTYPES`) between `points` (from `segments`), a view of a column-major array."""
    from inspector.core.health import scan_loops  # numba: imported when a CPU scan runs

    count = len(points) - 1
    rows = np.zeros((10, count)).T
    bits = np.empty((count, scan_loops.BITS), np.uint32)
    sums = np.empty((count, scan_loops.SUMS))
    n_chunks = -(-x.size // CHUNK)
    # the segments of each chunk: [first[c], first[c + 1])
    first = np.searchsorted(points, np.arange(n_chunks + 1, dtype=np.int64) * CHUNK)
    first[-1] = count
    args = (scan_loops.segment_pass, x, points, first, bits, sums)
    if POOL is None or n_chunks < 4:
        _chunks(*args, range(n_chunks))
    else:
        # several jobs a thread: on a busy machine a thread that gets its core takes more
        bounds = np.linspace(0, n_chunks, min(n_chunks, 4 * THREADS) + 1).astype(int)
        jobs = [POOL.submit(_chunks, *args, range(a, b))
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        for job in jobs:
            job.result()
    if count:
        _fill(x, points, bits, sums, rows)
    return rows


_LOCAL = threading.local()


def _widened() -> np.ndarray:
    """This thread's float32 chunk buffer, kept between scans (fresh pages fault in)."""
    work = getattr(_LOCAL, "work", None)
    if work is None or work.size != CHUNK:
        work = _LOCAL.work = np.empty(CHUNK, np.float32)
    return work


def _chunks(segment_pass, x, points, first, bits, sums, chunks) -> None:
    """The one pass over the segments of `chunks`: where they lie for float32 (one call for
    the whole run), chunk by chunk through a float32 copy for 16-bit floats."""
    if not len(chunks):
        return
    if x.dtype == np.float32:
        a, b = first[chunks[0]], first[chunks[-1] + 1]
        segment_pass(x.view(np.uint32), points[a:b + 1], bits[a:b], sums[a:b])
        return
    wide = _widened()
    for c in chunks:
        a, b = first[c], first[c + 1]
        lo, hi = points[a], points[b]
        y = wide[:hi - lo]
        np.copyto(y, x[lo:hi], casting="unsafe")  # float16/bfloat16 to float32: exact
        segment_pass(y.view(np.uint32), points[a:b + 1] - lo, bits[a:b], sums[a:b])


def decode_min_max(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per segment min and max of float32 values from `(uint32 max, least |x| bits, int32
    max)` of their bits (`|x|` bits: the sign bit cleared).

    As uint32 a negative float (sign bit set) is above every positive one and larger the
    larger its magnitude; as int32 a positive one is above every negative one and ordered. So
    the min is the uint32 max when the segment holds a negative, else (no negative) the least
    |x|; the max is the int32 max when that is not negative, else (all negative) the negative
    of least magnitude: the least |x| with the sign bit set. A NaN or Inf makes the min or the
    max NaN or Inf, as the float reductions do (only which non-finite value shows can
    differ)."""
    umax, amin, imax = bits[:, 0], bits[:, 1], bits[:, 2]
    negative = umax >= 0x80000000  # the segment holds a negative (or -0.0)
    positive = imax.view(np.int32) >= 0  # ... a positive (or +0.0)
    lo = np.where(negative, umax, amin)
    hi = np.where(positive, imax, amin | np.uint32(0x80000000))
    return lo.view(np.float32), hi.view(np.float32)


def _fill(x, points, bits, sums, rows) -> None:
    """The rows from the pass's bits and sums; segments with NaN or Inf (or float32 sums that
    overflow: |x| > 1.8e19) rescanned by `_careful`, all of them in one call."""
    n = np.diff(points)
    lo, hi = decode_min_max(bits)
    rows[:, COUNT], rows[:, MIN], rows[:, MAX] = n, lo, hi
    rows[:, SUM_D], rows[:, SUM_DD], rows[:, ZEROS], rows[:, SHIFT] = sums.T
    const = lo == hi  # no spread: the shift is the value
    rows[const, SHIFT] = lo[const]
    rows[const, SUM_D] = rows[const, SUM_DD] = 0.0
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(~(np.isfinite(lo) & np.isfinite(hi) & np.isfinite(sums[:, 0])
                               & np.isfinite(sums[:, 1])))
    if not len(bad):
        return
    pieces = [x[points[k]:points[k + 1]] for k in bad.tolist()]
    starts = np.concatenate([[0], np.cumsum(n[bad])[:-1]]).astype(np.intp)
    out = np.zeros((len(bad), 10))
    with np.errstate(over="ignore", invalid="ignore"):
        _careful(np.concatenate(pieces), starts, out)
    rows[bad] = out


def _careful(y: np.ndarray, starts: np.ndarray, out: np.ndarray) -> None:
    """The partials of segments holding NaN or Inf, in float64 over the finite elements."""
    n = np.diff(np.append(starts, y.size))
    w = y.astype(np.float64)
    finite = np.isfinite(w)
    count = np.add.reduceat(finite, starts, dtype=np.int64)
    z = np.where(finite, w, 0.0)
    s = np.add.reduceat(z, starts)
    c = np.divide(s, count, out=np.zeros_like(s), where=count > 0)
    d = np.where(finite, w - np.repeat(c, n), 0.0)
    out[:, COUNT] = count
    out[:, SHIFT] = c
    out[:, SUM_D] = np.add.reduceat(d, starts)
    out[:, SUM_DD] = np.add.reduceat(d * d, starts)
    out[:, MIN] = np.minimum.reduceat(np.where(finite, w, np.inf), starts)
    out[:, MAX] = np.maximum.reduceat(np.where(finite, w, -np.inf), starts)
    out[:, ZEROS] = np.add.reduceat(w == 0, starts, dtype=np.int64)
    out[:, NAN] = np.add.reduceat(np.isnan(w), starts, dtype=np.int64)
    out[:, POSINF] = np.add.reduceat(w == np.inf, starts, dtype=np.int64)
    out[:, NEGINF] = np.add.reduceat(w == -np.inf, starts, dtype=np.int64)


def host_figures(rows: np.ndarray, start: np.ndarray, stop: np.ndarray) -> dict[str, np.ndarray]:
    """`partials.leaf_figures` of leaves that are runs `[start, stop)` of segment `rows`: a leaf
    of one segment straight from its row, the others (leaves across chunks, empty leaves)
    through `leaf_figures` over their own rows only (100k small leaves: 2-3x faster)."""
    start, stop = np.asarray(start, np.int64), np.asarray(stop, np.int64)
    one = stop - start == 1
    # every leaf as if it were its first segment (then the others are replaced): (10, leaves),
    # gathered as columns of the column-major table
    r = rows.T[:, np.minimum(start, max(len(rows) - 1, 0))] if len(rows) else \
        np.zeros((10, len(start)))
    n = r[COUNT]
    safe = np.maximum(n, 1.0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        total = n * r[SHIFT] + r[SUM_D]
        m2 = np.maximum(r[SUM_DD] - r[SUM_D] ** 2 / safe, 0.0)
        mean = total / safe
        std = np.sqrt(m2 / safe)
        l2 = np.sqrt(m2 + total ** 2 / safe)
    lo, hi = r[MIN], r[MAX]  # rows of the gathered copy
    empty = n == 0  # no finite element (the others' figures are replaced below)
    if empty.any():
        total[empty] = m2[empty] = l2[empty] = 0.0
        mean[empty] = std[empty] = lo[empty] = hi[empty] = np.nan
    single = {"n_finite": n, "zeros": r[ZEROS], "nan": r[NAN], "posinf": r[POSINF],
              "neginf": r[NEGINF], "min": lo, "max": hi, "mean": mean, "std": std, "l2": l2,
              "max_abs": np.fmax(np.abs(lo), np.abs(hi)), "m2": m2, "sum": total}
    if one.all():
        return single
    other = np.flatnonzero(~one)
    lens = stop[other] - start[other]
    ends = np.cumsum(lens)
    # the rows of the other leaves, in order: start[i], start[i] + 1, ... for each
    take = np.arange(int(ends[-1]) if len(ends) else 0) + np.repeat(start[other] - ends + lens,
                                                                      lens)
    rest = leaf_figures(rows[take], ends - lens, ends, np.zeros((len(other), 0), np.int64))
    for k, v in single.items():
        v[other] = rest[k]
    return single
