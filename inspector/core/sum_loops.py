"""The CPU's weighted sum of packed float32 buffers: a numba loop writing with streaming
stores (`weighted_sum_host.py` runs it; docs/performance.md, "The weighted sum on the CPU").

XLA's CPU kernel stores the ordinary way: each cache line of the output is read before it is
written (write-allocate), so a sum of two 1.22 GB buffers moves 4.9 GB for the 3.7 GB it
counts. Here each block of `BLOCK` results is computed into a scratch array that stays in L1
and streamed out by `cpu_loops.stream_copy` (non-temporal stores, no read of the line). The
work is split into jobs on two threads (the loop releases the GIL).

The values are XLA's, bit for bit: the same expression, `((w0 x0 + w1 x1) + w2 x2) + ...` in
float32, with LLVM allowed to contract a multiply into the add that follows it (`contract`),
as XLA's CPU backend does (`fma(w0, x0, w1 x1)` for two trees; `tests/core/
test_weighted_sum_host.py` compares both for 1 to 5 trees).
"""

from __future__ import annotations

import numpy as np

from inspector.core.cpu_loops import LINE_BYTES, THREADS, loop, pool, store_fence, stream_copy

BLOCK = 2048
"""Results computed into the L1 scratch before they are streamed out (8 KiB of float32)."""
JOB = 1 << 20
"""Least elements a thread's job: smaller sums run in the calling thread."""


def _span(xs, delta, w, out, lo, hi):
    """Writes `out[lo:hi]` = the weighted sum of `xs` (a tuple of 1-D float32 arrays), each
    read `delta[t]` elements past the output's index (0 for packed buffers of one layout)."""
    k = len(xs)
    scratch = np.empty(BLOCK, np.float32)
    x0 = xs[0]
    w0 = w[0]
    d0 = delta[0]
    i = lo
    while i < hi:
        end = min(i + BLOCK, hi)
        m = end - i
        a = x0[i + d0:end + d0]
        if k == 1:
            for j in range(m):
                scratch[j] = w0 * a[j]
        elif k == 2:
            b = xs[1][i + delta[1]:end + delta[1]]
            w1 = w[1]
            for j in range(m):
                scratch[j] = w0 * a[j] + w1 * b[j]
        elif k == 3:
            b, c = xs[1][i + delta[1]:end + delta[1]], xs[2][i + delta[2]:end + delta[2]]
            w1, w2 = w[1], w[2]
            for j in range(m):
                scratch[j] = (w0 * a[j] + w1 * b[j]) + w2 * c[j]
        else:  # the first four in one pass, each further one added in L1
            b, c = xs[1][i + delta[1]:end + delta[1]], xs[2][i + delta[2]:end + delta[2]]
            d = xs[3][i + delta[3]:end + delta[3]]
            w1, w2, w3 = w[1], w[2], w[3]
            for j in range(m):
                scratch[j] = ((w0 * a[j] + w1 * b[j]) + w2 * c[j]) + w3 * d[j]
            for t in range(4, k):
                e = xs[t][i + delta[t]:end + delta[t]]
                wt = w[t]
                for j in range(m):
                    scratch[j] = scratch[j] + wt * e[j]
        stream_copy(out, i, scratch, m)
        i = end


_SPAN = loop(_span, fastmath={"contract"})


def _job(xs, w, out, lo, hi):
    """Writes `out[lo:hi]` = the weighted sum of `xs`, read at the output's indices."""
    _SPAN(xs, np.zeros(len(xs), np.int64), w, out, lo, hi)
    store_fence()


def _gather_job(xs, deltas, starts, ends, w, out, first, last):
    """Writes the output's pieces `first` to `last` (piece p: `out[starts[p]:ends[p]]`, each
    `xs[t]` read `deltas[p, t]` elements past the output's index)."""
    for p in range(first, last):
        _SPAN(xs, deltas[p], w, out, starts[p], ends[p])
    store_fence()


_JOB = loop(_job, fastmath={"contract"})
_GATHER_JOB = loop(_gather_job, fastmath={"contract"})


def weighted_sum_into(xs: list[np.ndarray], w: np.ndarray, out: np.ndarray,
                      threads: int | None = None) -> None:
    """`out[:] = sum_t w[t] * xs[t]` in float32 (1-D contiguous float32 arrays of one size;
    `w`: float32, one weight per array). Fastest into a 64-byte-aligned `out`
    (`cpu_loops.aligned_empty`)."""
    n = out.size
    if not xs or len(w) != len(xs):
        raise ValueError(f"{len(xs)} arrays and {len(w)} weights: give one weight per array")
    for x in (*xs, out):
        if x.dtype != np.float32 or x.ndim != 1 or not x.flags.c_contiguous or x.size != n:
            raise ValueError(f"expected 1-D contiguous float32 arrays of {n} elements, got "
                             f"{x.dtype} {x.shape}")
    if n == 0:
        return
    xs, w = tuple(xs), np.ascontiguousarray(w, np.float32)
    threads = THREADS if threads is None else max(1, threads)
    count = min(4 * threads, n // JOB) if threads > 1 else 1
    step = LINE_BYTES // 4  # jobs meet on cache lines of the output
    bounds = np.linspace(0, n, max(count, 1) + 1).astype(np.int64) // step * step
    bounds[0], bounds[-1] = 0, n
    _run(_JOB, (xs, w, out), [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:],
                                                                strict=True) if b > a])


def weighted_gather_sum_into(xs: list[np.ndarray], positions: np.ndarray, offsets: np.ndarray,
                             sizes: np.ndarray, w: np.ndarray, out: np.ndarray,
                             threads: int | None = None) -> None:
    """`out[offsets[j]:offsets[j] + sizes[j]] = sum_t w[t] * xs[t][positions[t, j]:...]` for
    each member j, in float32: a packed sum whose inputs lie elsewhere than at the output's
    indices (a checkpoint's tensors in its file's map, `mapped_groups.py`), same values as
    `weighted_sum_into` of the gathered inputs. `xs`: 1-D contiguous float32 arrays;
    `positions`: int64 (k, m); `offsets`, `sizes`: int64 (m,)."""
    positions = np.ascontiguousarray(positions, np.int64).reshape(len(xs), -1)
    offsets = np.ascontiguousarray(offsets, np.int64)
    sizes = np.ascontiguousarray(sizes, np.int64)
    if not xs or len(w) != len(xs):
        raise ValueError(f"{len(xs)} arrays and {len(w)} weights: give one weight per array")
    for x in (*xs, out):
        if x.dtype != np.float32 or x.ndim != 1 or not x.flags.c_contiguous:
            raise ValueError(f"expected 1-D contiguous float32 arrays, got {x.dtype} {x.shape}")
    ends = offsets + sizes
    if sizes.size and (sizes.min() < 0 or offsets.min() < 0 or ends.max() > out.size or
                       positions.min() < 0 or any(
                           (positions[t] + sizes).max() > x.size for t, x in enumerate(xs))):
        raise ValueError("a member runs outside its input or the output")
    keep = sizes > 0
    offsets, sizes, positions = offsets[keep], sizes[keep], positions[:, keep]
    if not sizes.size:
        return
    # each member cut into pieces of at most JOB elements, so the threads' shares even out
    counts = -(-sizes // JOB)
    member = np.repeat(np.arange(sizes.size), counts)
    index = np.arange(member.size) - np.repeat(np.cumsum(counts) - counts, counts)
    starts = offsets[member] + index * JOB
    stops = np.minimum(starts + JOB, offsets[member] + sizes[member])
    deltas = np.ascontiguousarray((positions[:, member] - offsets[member]).T)
    xs, w = tuple(xs), np.ascontiguousarray(w, np.float32)
    threads = THREADS if threads is None else max(1, threads)
    done = np.cumsum(stops - starts)
    count = min(4 * threads, int(done[-1]) // JOB) if threads > 1 else 1
    cuts = np.searchsorted(done, np.linspace(0, done[-1], max(count, 1) + 1)[1:-1])
    bounds = [0, *sorted({int(c) + 1 for c in cuts} - {0, member.size}), member.size]
    _run(_GATHER_JOB, (xs, deltas, starts, stops, w, out),
         [(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a])


def _run(job, args: tuple, jobs: list) -> None:
    """`job(*args, lo, hi)` for each `(lo, hi)` of `jobs`: in this thread when there is one,
    else on the loops' pool."""
    if len(jobs) == 1:
        job(*args, *jobs[0])
        return
    for f in [pool().submit(job, *args, a, b) for a, b in jobs]:
        f.result()
