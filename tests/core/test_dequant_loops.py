"""The CPU's FP8 dequantize loop (`core/quant/dequant_loops.fp8_runs`): bit for bit NumPy's
`(codes.view(float8).astype(float32) * scale).astype(out)` (ml_dtypes' float8 and bfloat16)
for every code, scale and output kind, whichever path a run takes (the vpermw table, the
float16 decoders, the integer decoders), wherever the output starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

from inspector.core.quant import dequant_loops as dl

FP8 = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
OUT = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
BITS = {"bfloat16": np.uint16, "float16": np.uint16, "float32": np.uint32}

SCALES = np.array([1.0, -1.0, 0.5, 3.7e-3, -2.9e-4, 1e-30, 1e30, 0.0, -0.0, 1e37, 2.0 ** -120,
                   448.0, 6.1e4, 1.7e-6, np.inf], np.float32)
"""Within the table's range, and out of it (1e37, 2^-120, 1e-30, 0, inf). 1e30 overflows
float16 to inf, 1e37 float32 (and so bfloat16); 2^-120 gives subnormal float32 and bfloat16
results, 1.7e-6 subnormal float16 ones."""


def reference(codes, starts, scale_index, scales, out_kind, code_kind) -> np.ndarray:
    """The definition, in NumPy and ml_dtypes: the result's bits."""
    per = np.repeat(scales[scale_index], np.diff(starts))
    with np.errstate(all="ignore"):
        value = codes.view(FP8[code_kind]).astype(np.float32) * per
        return value.astype(OUT[out_kind]).view(BITS[out_kind])


def run(codes, starts, scale_index, scales, out_kind, code_kind, offset=0, aligned=False):
    """`fp8_runs` into an output that starts `offset` elements past a 64-byte line (`aligned`)
    or past NumPy's own start; returns the result's bits."""
    n = codes.size
    if aligned:
        out = dl.empty_out(n + offset, out_kind)[offset:]
    else:
        out = np.empty(n + offset, dl.OUT_KINDS[out_kind][1])[offset:]
    out[:] = 77  # nothing left over from an earlier call
    dl.fp8_runs(codes, starts, scale_index, scales, out, out_kind, code_kind)
    return out.view(BITS[out_kind])


def every_code(repeat: int = 1):
    """All 256 codes under each scale of `SCALES`: one run of 256 codes per scale."""
    codes = np.tile(np.arange(256, dtype=np.uint8), SCALES.size * repeat)
    runs = SCALES.size * repeat
    starts = np.arange(runs + 1, dtype=np.int64) * 256
    return codes, starts, np.arange(runs, dtype=np.int64) % SCALES.size, SCALES


@pytest.mark.parametrize("code_kind", sorted(FP8))
@pytest.mark.parametrize("out_kind", sorted(OUT))
def test_every_code_and_scale_equals_numpy_bit_for_bit(code_kind, out_kind):
    args = every_code()
    want = reference(*args, out_kind, code_kind)
    for offset, aligned in ((0, True), (1, False), (3, True), (0, False)):
        got = run(*args, out_kind, code_kind, offset, aligned)
        bad = np.flatnonzero(got != want)
        assert not bad.size, (offset, aligned, [(int(args[0][k]), float(SCALES[k // 256 % 15]),
                                                 hex(got[k]), hex(want[k])) for k in bad[:5]])
    # the cases the test means to cover are in it
    values = args[0][:256].view(FP8[code_kind]).astype(np.float32)
    assert np.isnan(values).any() and (values == 0).sum() == 2  # NaN, +0 and -0
    assert (np.abs(values[values != 0]) < ml_dtypes.finfo(FP8[code_kind]).smallest_normal).any()
    if code_kind == "e5m2":
        assert np.isinf(values).sum() == 2
    result = want.view(OUT[out_kind]).astype(np.float32)
    assert np.isinf(result[9 * 256:10 * 256]).any()  # 1e37 x 448 overflows float32
    if out_kind == "float16":
        assert np.isinf(result[6 * 256:7 * 256]).any()  # 1e30 overflows float16
    tiny = np.abs(result[np.isfinite(result) & (result != 0)])
    assert (tiny < ml_dtypes.finfo(OUT[out_kind]).smallest_normal).any()  # subnormal results


@pytest.mark.parametrize("out_kind", sorted(OUT))
def test_odd_runs_random_codes_and_offsets(out_kind):
    rng = np.random.default_rng(7)
    lengths = np.tile([1, 3, 127, 129, 128, 0, 32, 31, 33, 64, 1000, 2], 40)
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    codes = rng.integers(0, 256, int(starts[-1]), dtype=np.uint8)
    scales = (rng.standard_normal(97) * 10.0 ** rng.integers(-6, 6, 97)).astype(np.float32)
    index = rng.integers(0, scales.size, lengths.size).astype(np.int32)  # int32 index too
    for code_kind in FP8:
        want = reference(codes, starts, index, scales, out_kind, code_kind)
        for offset in (0, 1, 3, 17):
            for aligned in (True, False):
                got = run(codes, starts, index, scales, out_kind, code_kind, offset, aligned)
                assert np.array_equal(got, want), (code_kind, offset, aligned)


def test_a_large_input_split_across_threads_and_jobs():
    n = 3 * dl.JOB + 12345  # several jobs, a last one not a multiple of a line
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 256, n, dtype=np.uint8)
    starts = np.append(np.arange(0, n, 128, dtype=np.int64), n)
    scales = (rng.standard_normal(starts.size - 1) * 1e-2).astype(np.float32)
    index = np.arange(scales.size, dtype=np.int64)
    want = reference(codes, starts, index, scales, "bfloat16", "e4m3fn")
    for offset, aligned in ((0, True), (5, False)):
        assert np.array_equal(run(codes, starts, index, scales, "bfloat16", "e4m3fn", offset,
                                  aligned), want)


def test_a_nan_scale_gives_nan_everywhere_in_its_run():
    codes = np.arange(256, dtype=np.uint8)
    starts = np.array([0, 100, 256], np.int64)
    scales = np.array([np.nan, 2.0], np.float32)
    for code_kind in FP8:
        for out_kind in OUT:
            got = run(codes, starts, np.array([0, 1]), scales, out_kind, code_kind)
            value = got.view(OUT[out_kind]).astype(np.float32)
            want = reference(codes, starts, np.array([0, 1]), scales, out_kind, code_kind)
            assert np.isnan(value[:100]).all()
            assert np.array_equal(got[100:], want[100:])


def test_empty_input_and_wrong_arguments():
    empty = np.zeros(0, np.uint8)
    out = np.zeros(0, np.uint16)
    dl.fp8_runs(empty, np.array([0], np.int64), np.zeros(0, np.int64), np.ones(1, np.float32),
                out, "bfloat16", "e4m3fn")
    codes = np.zeros(10, np.uint8)
    scales = np.ones(2, np.float32)
    good = dict(codes=codes, starts=np.array([0, 4, 10]), scale_index=np.array([0, 1]),
                scales=scales, out=np.zeros(10, np.uint16), out_kind="bfloat16",
                code_kind="e4m3fn")
    dl.fp8_runs(**good)
    for change, message in (
            ({"code_kind": "e4m3"}, "code_kind"), ({"out_kind": "int8"}, "out_kind"),
            ({"out": np.zeros(10, np.float32)}, "out: expected"),
            ({"out": np.zeros(9, np.uint16)}, "out holds 9"),
            ({"starts": np.array([0, 4, 9])}, "starts: expected"),
            ({"scale_index": np.array([0, 2])}, "scale index 2 is outside 0..1"),
            ({"scale_index": np.array([-1, 0])}, "outside"),
            ({"starts": np.array([0, 8, 4, 10]), "scale_index": np.array([0, 1, 0])},
             "starts decrease"),
            ({"codes": codes.astype(np.int8)}, "codes: expected")):
        with pytest.raises(ValueError, match=message):
            dl.fp8_runs(**{**good, **change})


def test_the_loops_stream_their_stores_and_import_inspector_loads_no_numba():
    from inspector.core import cpu_loops

    if cpu_loops.STREAMING:
        # the job loop compiled afresh (a cached one has no assembly to inspect)
        import numba

        fn = numba.njit(nogil=True)(dl.job_loop("e4m3fn", "bfloat16").py_func)
        out = dl.empty_out(64, "bfloat16")
        fn(np.zeros(64, np.uint8), np.array([0, 64]), np.zeros(1, np.int64),
           np.ones(1, np.float32), out, 0, 64, 0, 0)
        asm = fn.inspect_asm(fn.signatures[0])
        assert "vmovnt" in asm and "sfence" in asm
    script = textwrap.dedent("""
        import sys
        import inspector
        assert "numba" not in sys.modules
        from inspector.core.quant import dequant_loops
        assert "numba" in sys.modules
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def test_stream_copy_copies_any_span_whatever_its_alignment():
    import numba

    from inspector.core.cpu_loops import store_fence, stream_copy

    @numba.njit
    def copy(dst, start, src, count):
        stream_copy(dst, start, src, count)
        store_fence()

    rng = np.random.default_rng(1)
    for dtype in (np.uint16, np.float32):
        src = rng.integers(1, 1000, 400).astype(dtype)
        for start in (0, 1, 7, 31, 32, 33):
            for count in (0, 1, 5, 31, 32, 33, 64, 100, 257, 400 - 33):
                dst = np.zeros(440, dtype)
                copy(dst, start, src, count)
                want = np.zeros(440, dtype)
                want[start:start + count] = src[:count]
                assert np.array_equal(dst, want), (dtype, start, count)


def test_read_only_inputs_as_a_jax_cpu_array_or_a_mapped_file_gives_them():
    rng = np.random.default_rng(5)
    codes = rng.integers(0, 256, 5000, dtype=np.uint8)
    starts = np.arange(0, 5001, 100, dtype=np.int64)
    index = np.arange(50, dtype=np.int64)
    scales = np.linspace(0.1, 2.0, 50).astype(np.float32)
    for array in (codes, starts, index, scales):
        array.setflags(write=False)
    want = reference(codes, starts, index, scales, "bfloat16", "e4m3fn")
    assert np.array_equal(run(codes, starts, index, scales, "bfloat16", "e4m3fn", 0, True), want)
