"""The scan's row partials of a float32 (or 16-bit float) buffer on the CPU, computed by NumPy
where it lies.

XLA's CPU backend reduces at 1-2 GB/s when a reduction has any elementwise producer fused into
it, and runs every figure as its own loop over the data (measured here on 1e8 float32: one
plain sum 48-64 ms; the ten figures as column reductions of a `(blocks, rows, lanes)` view or
as trees of vectorised elementwise halvings 1.2-2.2 s, one loop fusion per figure). NumPy's
reductions are SIMD loops and BLAS's matrix-vector products run at cache speed, so on the CPU
a float32 buffer (a `jax.Array` on the CPU is a NumPy view, no copy) is reduced here instead:
a cache-sized chunk at a time, every figure of the chunk while it is in cache, chunks split
between two threads (NumPy and BLAS release the GIL).

Each chunk is cut where a leaf starts or ends, so each segment belongs to one leaf and a leaf
is a run of whole segments (no masked pieces). A segment of at least 1/16 of a chunk is
reduced on its own (`_one`: five passes while it is in cache, float min and max, `x == 0`
counted where it spans 0, BLAS row sums and row sums of squares); the runs of smaller segments
between them together (`_many`: `reduceat`s). Per segment, the ten partials of `kernels.py`
(`n, shift, sum d, sum d^2, min, max, zeros, nan, +inf, -inf`, `d = x - shift`):

- min, max: in a run, `np.minimum/maximum.reduceat` of the bits as integers (`_min_max`); a
  NaN or Inf shows in them, and only a segment or run holding one (or whose float32 sums
  overflow) goes through the careful pass (`_careful`: float64, NaN/Inf counted, left out of
  the moments);
- sums and sums of squares in float32, pairwise (`np.add.reduceat`) in a run, or as BLAS
  products of rows of 1,024 elements (`X @ 1`, `vecdot(X, X)`), the rows added in float64:
  error ~1e-7 relative;
- shift 0, unless the segment's mean is large against its spread (`sum x^2 > 4 M2`), where the
  unshifted `M2 = sum x^2 - (sum x)^2 / n` would lose digits: those segments are summed again
  about their own mean (rounded to float32); a constant segment (`min == max`) needs neither;
- zeros: a constant segment's from its value; in a run, counted only when two integer
  reductions find a +0.0 or -0.0 (`_has_zero`), spread over the segments.

The five passes are the floor here: no NumPy or BLAS routine computes two of these figures in
one pass (`benchmarks/bench_scan_passes.py` prints each pass's cost; docs/health-speed.md).
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

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
"""Elements per chunk (1 MiB of float32: stays in a core's L2 cache while every figure of it
is computed; measured 1.9x faster than chunks of 256 KiB, 3.6x than 64 KiB: fewer calls)."""
ROW = 1024  # row length of the BLAS products of a chunk that is one segment
THREADS = max(1, min(2, os.cpu_count() or 1))
POOL = ThreadPoolExecutor(THREADS, thread_name_prefix="inspector-scan") if THREADS > 1 \
    else None
_ONES = np.ones(ROW, np.float32)
_vecdot = getattr(np, "vecdot", None) or (lambda a, b, out: np.einsum("ij,ij->i", a, b, out=out))
_FIRST = np.zeros(1, np.intp)  # the starts of a run of one segment
_INT32_MIN = np.iinfo(np.int32).min


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
    rows = np.zeros((10, len(points) - 1)).T
    n_chunks = -(-x.size // CHUNK)
    # the segments of each chunk: [first[c], first[c + 1])
    first = np.searchsorted(points, np.arange(n_chunks + 1, dtype=np.int64) * CHUNK)
    first[-1] = len(points) - 1
    if POOL is None or n_chunks < 4:
        _chunks(x, points, first, rows, range(n_chunks))
    else:
        # several jobs a thread: on a busy machine a thread that gets its core takes more
        bounds = np.linspace(0, n_chunks, min(n_chunks, 4 * THREADS) + 1).astype(int)
        jobs = [POOL.submit(_chunks, x, points, first, rows, range(a, b))
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        for job in jobs:
            job.result()
    return rows


class _Scratch(NamedTuple):
    """One thread's buffers: a chunk of float32 values, of flags, and of row partials."""

    values: np.ndarray
    flags: np.ndarray
    part: np.ndarray


_LOCAL = threading.local()


def _scratch() -> _Scratch:
    """This thread's buffers, kept between scans: fresh ones fault their pages in on first use
    (1.25 MiB per job, ~2,000 page faults per scan of 100k leaves)."""
    work = getattr(_LOCAL, "work", None)
    if work is None or work.values.size != CHUNK:
        work = _LOCAL.work = _Scratch(np.empty(CHUNK, np.float32), np.empty(CHUNK, bool),
                                      np.empty((2, CHUNK // ROW + 1), np.float32))
    return work


def _chunks(x, points, first, rows, chunks) -> None:
    work = _scratch()
    wide = np.empty(CHUNK, np.float32) if x.dtype != np.float32 else None
    big = max(ROW, CHUNK // 16)  # a segment this long pays for its own BLAS calls
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for c in chunks:
            a, b = first[c], first[c + 1]
            lo, hi = points[a], points[b]
            y = x[lo:hi]
            if wide is not None:  # float16/bfloat16: the chunk widened (exactly) to float32
                y = wide[:hi - lo]
                np.copyto(y, x[lo:hi], casting="unsafe")
            if b - a == 1:
                _one(y, rows[a], work)
                continue
            starts = points[a:b + 1] - lo
            large = np.flatnonzero(np.diff(starts) >= big).tolist()
            # each large segment on its own, the runs of small ones between them together
            k = 0
            for j in [*large, b - a]:
                if j > k:
                    _many(y[starts[k]:starts[j]], starts[k:j] - starts[k], rows[a + k:a + j], work)
                if j < b - a:
                    _one(y[starts[j]:starts[j + 1]], rows[a + j], work)
                k = j + 1


def _one(y: np.ndarray, out: np.ndarray, work: _Scratch) -> None:
    """The partials of one segment (a chunk's worth or a large part of one): five passes
    while it is in cache (min, max, zeros, BLAS row sums and row sums of squares)."""
    n = y.size
    lo, hi = np.minimum.reduce(y), np.maximum.reduce(y)
    out[COUNT], out[MIN], out[MAX] = n, lo, hi
    if not (math.isfinite(lo) and math.isfinite(hi)):
        _careful(y, _FIRST, out[None])
        return
    if lo == hi:  # constant: no spread
        out[SHIFT], out[ZEROS] = lo, n if lo == 0 else 0
        return
    if lo <= 0 <= hi:
        out[ZEROS] = np.count_nonzero(np.equal(y, 0, out=work.flags[:n]))
    s, ss = _sums(y, work.part)
    if not (math.isfinite(s) and math.isfinite(ss)):  # float32 overflow (|x| > 1.8e19)
        _careful(y, _FIRST, out[None])
        return
    if ss > 4 * (ss - s * s / n):  # mean large against the spread: sum about the mean
        c = np.float32(s / n)
        out[SHIFT] = c
        s, ss = _sums(np.subtract(y, c, out=work.values[:n]), work.part)
    out[SUM_D], out[SUM_DD] = s, ss


def _sums(y: np.ndarray, part: np.ndarray) -> tuple[float, float]:
    """`(sum y, sum y^2)`: BLAS products of rows of `ROW` elements (and the tail) in float32
    into `part` (a `(2, CHUNK // ROW + 1)` scratch), added in float64 by one reduction."""
    whole = y.size - y.size % ROW
    r = whole // ROW
    rows = y[:whole].reshape(r, ROW)
    np.matmul(rows, _ONES, out=part[0, :r])
    _vecdot(rows, rows, out=part[1, :r])
    if whole < y.size:
        tail = y[whole:]
        part[0, r], part[1, r] = np.add.reduce(tail), np.dot(tail, tail)
        r += 1
    s, ss = np.add.reduce(part[:, :r], axis=1, dtype=np.float64).tolist()
    return s, ss


def _many(y: np.ndarray, starts: np.ndarray, out: np.ndarray, work: _Scratch) -> None:
    """The partials of a run of small segments (`starts`, relative to `y`)."""
    n = np.diff(np.append(starts, y.size))
    lo, hi = _min_max(y, starts)
    out[:, COUNT], out[:, MIN], out[:, MAX] = n, lo, hi
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        _careful(y, starts, out)
        return
    spread = lo != hi
    out[~spread, SHIFT] = lo[~spread]
    out[~spread, ZEROS] = np.where(lo[~spread] == 0, n[~spread], 0)  # constant segments
    if (spread & (lo <= 0) & (hi >= 0)).any() and _has_zero(y):
        where = np.flatnonzero(np.equal(y, 0, out=work.flags[:y.size]))
        zeros = np.bincount(np.searchsorted(starts, where, "right") - 1, minlength=len(starts))
        out[spread, ZEROS] = zeros[spread]
    if not spread.any():
        return
    s = np.add.reduceat(y, starts).astype(np.float64)
    sq = np.multiply(y, y, out=work.values[:y.size])
    ss = np.add.reduceat(sq, starts).astype(np.float64)
    if not (np.isfinite(s).all() and np.isfinite(ss).all()):  # float32 overflow
        _careful(y, starts, out)
        return
    far = spread & (ss > 4 * (ss - s * s / n))
    if far.any():  # these segments again, about their own mean
        c = np.where(far, s / n, 0).astype(np.float32)
        d = np.subtract(y, np.repeat(c, n), out=work.values[:y.size])
        s = np.where(far, np.add.reduceat(d, starts), s)
        ss = np.where(far, np.add.reduceat(np.multiply(d, d, out=d), starts), ss)
        out[:, SHIFT] = np.where(far, c, out[:, SHIFT])
    out[spread, SUM_D] = s[spread]
    out[spread, SUM_DD] = ss[spread]


def _has_zero(y: np.ndarray) -> bool:
    """Whether float32 `y` holds a +0.0 or -0.0: the least of its bits as uint32 is 0, or as
    int32 is INT32_MIN (-0.0 is 0x80000000). Two plain integer reductions that write nothing
    (about the time of counting `y == 0`); the flags are written only where a zero is."""
    return np.minimum.reduce(y.view(np.uint32)) == 0 or \
        np.minimum.reduce(y.view(np.int32)) == _INT32_MIN


def _min_max(y: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per segment min and max of float32 `y`, from integer reductions of its bits (NumPy's
    float `minimum.reduceat` costs ~50 ns a segment more: 100k leaves of 16-1,024 elements,
    the float min and max 24 ms against 17 ms for three integer passes).

    As uint32 a negative float (sign bit set) is above every positive one and larger the
    larger its magnitude; as int32 a positive one is above every negative one and ordered. So
    the min is the uint32 max when the segment holds a negative, else the uint32 min; the max
    is the int32 max when that is not negative, else (all negative) the uint32 min: a third
    pass, only for a chunk with a segment of one sign. A NaN or Inf makes the min or the max
    NaN or Inf, as the float reductions do (only which non-finite value shows can differ)."""
    u = y.view(np.uint32)
    umax = np.maximum.reduceat(u, starts)
    imax = np.maximum.reduceat(y.view(np.int32), starts)
    negative = umax >= 0x80000000  # the segment holds a negative (or -0.0)
    positive = imax >= 0  # ... a positive (or +0.0)
    lo, hi = umax, imax.view(np.uint32)
    if not (negative.all() and positive.all()):
        umin = np.minimum.reduceat(u, starts)
        lo, hi = np.where(negative, lo, umin), np.where(positive, hi, umin)
    return lo.view(np.float32), hi.view(np.float32)


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
