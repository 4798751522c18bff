"""FP8 block-scaled dequantization on the CPU: a numba loop that writes its output with
non-temporal stores (docs/dequantize-speed.md).

XLA's CPU kernels store the ordinary way, so every cache line they write is read first
(write-allocate): dequantizing to bfloat16 moves 5 bytes through memory for the 3 it counts,
and the bandwidth reference (a `memcpy`, which streams) is out of reach. Here the output is
written by non-temporal stores, in blocks of `BLOCK` elements (ending on a cache line of the
output). Per piece (a run's part in a block), fastest first (`fp8_intrinsics.py`):

- e4m3fn to bfloat16 or float32 with a scale in `TABLE_SCALES`: `bf16_table_e4m3fn` /
  `f32_table_e4m3fn`, a line of results a step by a `vpermw` / `vpermi2d` table lookup; where
  the piece starts on a line of the output (`empty_out`, runs of multiples of 32), straight
  from the registers to memory;
- else the codes decoded by way of float16 (`vcvtph2ps`), or, for a NaN scale or one past
  2^120 (or without F16C), by integer ops; vectorised by LLVM.

Results that are not streamed straight go to a scratch array that stays in L1 (ordinary
stores), streamed out at the block's end by `cpu_loops.stream_copy`. The work is split between
the cores in threads (the loops release the GIL), as `health/host_scan.py` does.

The arithmetic is bit for bit NumPy's:
`(codes.view(float8).astype(float32) * scale).astype(out)` with ml_dtypes' float8 and
bfloat16 (round to nearest even, subnormals kept, overflow to inf, a NaN stays a NaN with its
sign: the quiet NaN for bfloat16, NumPy's payload rule for float16). Where both a code and its
scale are NaN, which NaN's payload survives may differ from NumPy's (float16 output only).

Imported only when used (numba takes ~0.45 s to import).
"""

from __future__ import annotations

import numpy as np

from inspector.core.cpu_loops import (
    THREADS,
    aligned_empty,
    loop,
    pool,
    prefetch,
    store_fence,
    stream_copy,
)
from inspector.core.quant.fp8_intrinsics import (
    HARD_HALF,
    TABLE_SCALES,
    TABLES,
    bf16_bits,
    bf16_bits_quiet,
    bf16_table_e4m3fn,
    bf16_table_e4m3fn_stream,
    e4m3fn_over_256,
    e4m3fn_value,
    e5m2_half,
    e5m2_value,
    f16_bits,
    f32_table_e4m3fn,
    f32_table_e4m3fn_stream,
)

BLOCK = 1024
"""Elements decoded into the L1 scratch before they are streamed out (2 KiB of bfloat16)."""
AHEAD = 4096
"""Codes (bytes) asked for ahead of the block in hand (`prefetch`, one per cache line)."""
LINE = 64
JOB = 1 << 20
"""Least elements a thread's job: smaller inputs run in the calling thread."""
TABLE_LOW, TABLE_HIGH = (np.float32(x) for x in TABLE_SCALES)

CODE_KINDS = {"e4m3fn": 0, "e5m2": 1}
OUT_KINDS = {"bfloat16": (0, np.uint16), "float16": (1, np.uint16), "float32": (2, np.float32)}


def _make(code_kind: int, out_kind: int):
    """The job loop for one code kind and one output kind (constants of the closure: numba
    compiles each pair once, and its disk cache keys them apart)."""

    def job(codes, starts, scale_index, scales, out, lo, hi, r, phase):
        """Writes `out[lo:hi]`; `r` is the run holding element `lo`; `out[i]` lies on a 64-byte
        boundary where `(i + phase) % line == 0` (`line`: elements a line; -1: never).
        Returns -1, or the first run found with a decreasing start or a scale index out of
        range. `phase` must be the output's own (`fp8_runs` computes it): a streaming store
        off a 64-byte boundary faults.

        A block's results go to `scratch` (`scratch[k]` is `out[first + k]`), streamed out at
        the block's end (`done`: the end of what is out). Where a piece (a run's part in the
        block) starts on a line, its whole lines go straight to the output
        (`bf16_table_e4m3fn_stream`): 19.7 against 42-49 ms through the scratch
        (docs/dequantize-speed.md)."""
        line = LINE // out.itemsize
        scratch = np.empty(BLOCK + 32, out.dtype)  # + 32: a table step past a piece's end
        n_scales = scales.size
        fetched = lo
        i = lo
        while i < hi:
            end = min(i + BLOCK, hi)
            if phase >= 0 and end < hi:
                end -= (end + phase) % line  # whole lines: streamed without memcpy
            done = i
            ahead = min(end + AHEAD, hi)
            for p in range(max(fetched, i + AHEAD), ahead, LINE):
                prefetch(codes, p)
            fetched = max(fetched, ahead)
            first = i
            while i < end:
                while starts[r + 1] <= i:
                    r += 1
                    if starts[r + 1] < starts[r]:
                        return r
                k = scale_index[r]
                if k < 0 or k >= n_scales:
                    return r
                s = scales[k]
                stop = min(starts[r + 1], end)
                if (TABLES and code_kind == 0 and out_kind != 1
                        and TABLE_LOW <= abs(s) <= TABLE_HIGH):
                    # a table step: a line of results (32 bfloat16, 16 float32)
                    steps = (stop - i) // line
                    if steps and phase >= 0 and (i + phase) % line == 0:
                        # whole cache lines of the output: streamed there, no scratch
                        if i > done:
                            stream_copy(out, done, scratch[done - first:], i - done)
                        if out_kind == 0:
                            bf16_table_e4m3fn_stream(codes, i, out, i, steps, s)
                        else:
                            f32_table_e4m3fn_stream(codes, i, out, i, steps, s)
                        done = i + line * steps
                    elif out_kind == 0:
                        bf16_table_e4m3fn(codes, i, scratch, i - first, steps, s)
                    else:
                        f32_table_e4m3fn(codes, i, scratch, i - first, steps, s)
                    i += line * steps
                    if i < stop and i + line <= codes.size:
                        # the piece's last codes: one more step, the results past the piece
                        # overwritten by the next piece's (or never streamed)
                        if out_kind == 0:
                            bf16_table_e4m3fn(codes, i, scratch, i - first, 1, s)
                        else:
                            f32_table_e4m3fn(codes, i, scratch, i - first, 1, s)
                        i = stop
                if i < stop:
                    s2 = s * np.float32(256) if code_kind == 0 else s
                    # the float16 decoders where (value / 256) x (256 s) is value x s, rounded
                    # once alike, and every NaN is a quiet one without payload (no NaN scale)
                    fast = HARD_HALF and not np.isnan(s) and (
                        np.isfinite(s2) or not np.isfinite(s))
                    cb = codes[i:stop]
                    sb = scratch[i - first:stop - first]
                    if fast:
                        for j in range(cb.size):
                            if code_kind == 0:
                                v = e4m3fn_over_256(cb[j]) * s2
                            else:
                                v = e5m2_half(cb[j]) * s2
                            if out_kind == 0:
                                sb[j] = bf16_bits_quiet(v)
                            elif out_kind == 1:
                                sb[j] = f16_bits(v)
                            else:
                                sb[j] = v
                    else:
                        for j in range(cb.size):
                            if code_kind == 0:
                                v = e4m3fn_value(cb[j]) * s
                            else:
                                v = e5m2_value(cb[j]) * s
                            if out_kind == 0:
                                sb[j] = bf16_bits(v)
                            elif out_kind == 1:
                                sb[j] = f16_bits(v)
                            else:
                                sb[j] = v
                i = stop
            if end > done:
                stream_copy(out, done, scratch[done - first:], end - done)
        store_fence()
        return -1

    return loop(job, fastmath=False)


_JOBS: dict[tuple[int, int], object] = {}


def job_loop(code_kind: str, out_kind: str):
    """The compiled job loop of a code kind and an output kind (`fp8_runs`' names)."""
    key = (CODE_KINDS[code_kind], OUT_KINDS[out_kind][0])
    if key not in _JOBS:
        _JOBS[key] = _make(*key)
    return _JOBS[key]


def empty_out(n: int, out_kind: str) -> np.ndarray:
    """An uninitialised output for `fp8_runs` of `n` elements whose first one lies on a 64-byte
    boundary: with runs whose lengths are multiples of 32 (a 128-wide block's row), every
    bfloat16 line is then streamed straight from the registers, without the L1 scratch
    (`bf16_table_e4m3fn_stream`). NumPy's own large arrays start 16 bytes past a page."""
    return aligned_empty(n, OUT_KINDS[out_kind][1])


def fp8_runs(codes: np.ndarray, starts: np.ndarray, scale_index: np.ndarray,
             scales: np.ndarray, out: np.ndarray, out_kind: str, code_kind: str,
             threads: int | None = None) -> None:
    """Dequantizes flat float8 `codes` (uint8 [N]) into flat `out` ([N]: uint16 bits of
    bfloat16 or float16, or float32): run r covers `[starts[r], starts[r + 1])` (int64 [R + 1],
    0 to N, non-decreasing; a decrease, or a scale index outside `scales` for a run that has
    elements, raises ValueError) and all its elements use `scales[scale_index[r]]`; value =
    decode(code) * scale in float32, rounded to `out_kind` ("bfloat16" | "float16" |
    "float32") as NumPy / ml_dtypes' `astype` rounds. `code_kind`: "e4m3fn" | "e5m2".
    `threads`: how many threads share the work (default: up to 2, one per core). Fastest
    into an output from `empty_out` (docs/dequantize-speed.md)."""
    if code_kind not in CODE_KINDS:
        raise ValueError(f"code_kind {code_kind!r}: expected one of {sorted(CODE_KINDS)}")
    if out_kind not in OUT_KINDS:
        raise ValueError(f"out_kind {out_kind!r}: expected one of {sorted(OUT_KINDS)}")
    n = codes.size
    want = OUT_KINDS[out_kind][1]
    _check(codes, np.uint8, "codes")
    _check(out, want, "out")
    _check(starts, np.int64, "starts")
    _check(scales, np.float32, "scales")
    if scale_index.dtype not in (np.int64, np.int32) or scale_index.ndim != 1:
        raise ValueError(f"scale_index: expected 1-D int64 or int32, got {scale_index.dtype} "
                         f"{scale_index.shape}")
    if out.size != n:
        raise ValueError(f"out holds {out.size} elements for {n} codes")
    if starts.size != scale_index.size + 1 or starts[0] != 0 or starts[-1] != n:
        raise ValueError(f"starts: expected {scale_index.size + 1} run starts from 0 to {n}, "
                         f"got {starts.size} from {starts[0]} to {starts[-1]}")
    if n == 0:
        return
    fn = job_loop(code_kind, out_kind)
    threads = THREADS if threads is None else max(1, threads)
    count = min(4 * threads, n // JOB) if threads > 1 else 1
    address = out.__array_interface__["data"][0]
    phase = (address % LINE) // out.itemsize if address % out.itemsize == 0 else -1
    line = LINE // out.itemsize
    # job bounds on the output's cache lines (where it has them), each job's first run
    bounds = np.linspace(0, n, max(count, 1) + 1).astype(np.int64)
    if phase >= 0:
        bounds = np.clip((bounds + phase) // line * line - phase, 0, n)
    bounds[0], bounds[-1] = 0, n
    first = np.clip(np.searchsorted(starts, bounds[:-1], side="right") - 1, 0,
                    scale_index.size - 1)
    args = [(codes, starts, scale_index, scales, out, int(a), int(b), int(r), phase)
            for a, b, r in zip(bounds[:-1], bounds[1:], first, strict=True) if b > a]
    if len(args) == 1:
        bad = [fn(*args[0])]
    else:
        bad = [job.result() for job in [pool().submit(fn, *a) for a in args]]
    for r in bad:
        if r >= 0:
            raise ValueError(f"run {r}: starts decrease ({starts[r]} then {starts[r + 1]}) or "
                             f"its scale index {scale_index[r]} is outside 0..{scales.size - 1}")


def _check(array: np.ndarray, dtype, name: str) -> None:
    if array.dtype != dtype or array.ndim != 1 or not array.flags.c_contiguous:
        raise ValueError(f"{name}: expected a contiguous 1-D {np.dtype(dtype)} array, got "
                         f"{array.dtype} {array.shape}")
