"""Formulations of the CPU's FP8 block dequantize kernel, timed alternately in one process
against the bandwidth reference (`bandwidth.py`): the kernel `inspector.dequantize` uses and
the ones tried beside it (docs/dequantize-speed.md).

    PYTHONPATH=. python benchmarks/bench_fp8_formulations.py [--quick] [--rounds N]
                                                             [--vector-width 512] [NAME ...]

Each formulation is one jitted kernel over the benchmark's weights (23 float8_e4m3fn
2048 x 2048 weights with 16 x 16 float32 scales, 1e8 parameters; 1 weight with --quick),
writing bf16 into donated buffers, like the op's batched call. GB/s counts 1 byte read per
code, 4 per scale and 2 written per value; CPU time is the process's (both XLA threads).
`--vector-width 512` compiles with XLA's `xla_cpu_prefer_vector_width=512` (AVX-512; the
default is 256); a name written `NAME@512` compiles that one alone so. Names (default: all
but `chunks`, which is slow):

- `now`: `kernels.fp8_bits` decode, block scale broadcast by a reshape, `kernels.bf16_bits`
- `xla-cast`: the same with XLA's own float32 -> bfloat16 conversion (the kernel before)
- `astype`: XLA's own float8 -> float32 conversion (its generic path on the CPU)
- `f16`: codes decoded through float16 bits and the hardware float16 -> float32 conversion
- `chunks`: `now` in a `fori_loop` over 128-row chunks, each written by dynamic_update_slice
- `widen`: the codes' bytes only widened to bf16: no decode, no scale (the floor)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bandwidth import report_alternated  # noqa: E402

from inspector.core.quant import kernels  # noqa: E402

SIDE, BLOCK = 2048, 128
F8 = ml_dtypes.float8_e4m3fn


def _scaled(x, s):
    n = SIDE // BLOCK
    return (x.reshape(n, BLOCK, n, BLOCK) * s.reshape(n, 1, n, 1)).reshape(SIDE, SIDE)


def now(c, s):
    return kernels.bf16_bits(_scaled(kernels.fp8_bits(c, F8), s))


def xla_cast(c, s):
    return _scaled(kernels.fp8_bits(c, F8), s).astype(jnp.bfloat16)


def astype(c, s):
    return _scaled(c.astype(jnp.float32), s).astype(jnp.bfloat16)


def f16(c, s):
    """e4m3fn bits placed in float16's fields (exponent bias 15, not 7: times 2^8 after)."""
    b = jax.lax.bitcast_convert_type(c, jnp.uint8).astype(jnp.uint16)
    h = ((b & 0x80) << 8) | ((b & 0x7F) << 7)
    x = jax.lax.bitcast_convert_type(h, jnp.float16).astype(jnp.float32) * np.float32(256)
    x = jnp.where((b & 0x7F) == 0x7F, jnp.float32(np.nan), x)
    return kernels.bf16_bits(_scaled(x, s))


def chunks(c, s, rows: int = 128):
    def body(i, out):
        part = jax.lax.dynamic_slice_in_dim(c, i * rows, rows, 0)
        scale = jax.lax.dynamic_slice_in_dim(s, i * rows // BLOCK, 1, 0)
        x = kernels.fp8_bits(part, F8).reshape(rows, SIDE // BLOCK, BLOCK)
        y = kernels.bf16_bits((x * scale.reshape(1, -1, 1)).reshape(rows, SIDE))
        return jax.lax.dynamic_update_slice_in_dim(out, y, i * rows, 0)

    return jax.lax.fori_loop(0, SIDE // rows, body, jnp.zeros((SIDE, SIDE), jnp.bfloat16))


def widen(c, s):
    del s
    return jax.lax.bitcast_convert_type(c, jnp.uint8).astype(jnp.bfloat16)


FORMULATIONS = {"now": now, "xla-cast": xla_cast, "astype": astype, "f16": f16,
                "chunks": chunks, "widen": widen}


def kernel(fn, codes, scales, options: dict):
    """A timer of `fn` over all weights in one donated call: returns GB/s."""
    step = jax.jit(lambda outs, cs, ss: [fn(c, s) for c, s in zip(cs, ss, strict=True)],
                   donate_argnums=0, keep_unused=True)
    outs = [jnp.zeros((SIDE, SIDE), jnp.bfloat16) for _ in codes]
    compiled = step.lower(outs, codes, scales).compile(options or None)
    moved = len(codes) * (SIDE * SIDE * 3 + scales[0].size * 4)

    def run() -> float:
        nonlocal outs
        start = time.perf_counter()
        outs = compiled(outs, codes, scales)
        jax.block_until_ready(outs)
        return moved / (time.perf_counter() - start) / 1e9

    run()
    return run


def check(names, codes, scales) -> None:
    """Every formulation but `widen` gives `now`'s bits (NaN as NaN) on the first weight."""
    want = np.asarray(jax.jit(now)(codes[0], scales[0])).astype(np.float32)
    for name in names:
        if name != "widen":
            got = np.asarray(jax.jit(FORMULATIONS[name])(codes[0], scales[0]))
            np.testing.assert_array_equal(got.astype(np.float32), want, err_msg=name)


def main() -> None:
    args = sys.argv[1:]
    quick = "--quick" in args
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else (2 if quick
                                                                               else 5)
    options = ({"xla_cpu_prefer_vector_width": int(args[args.index("--vector-width") + 1])}
               if "--vector-width" in args else {})
    names = [a for a in args if a.partition("@")[0] in FORMULATIONS] or [
        n for n in FORMULATIONS if n != "chunks"]
    rng = np.random.default_rng(0)
    n = 1 if quick else int(1e8) // (SIDE * SIDE)
    codes = [jax.device_put(rng.standard_normal((SIDE, SIDE)).astype(F8)) for _ in range(n)]
    scales = [jax.device_put(rng.uniform(1e-3, 1e-2, (16, 16)).astype(np.float32))
              for _ in range(n)]
    check({name.partition("@")[0] for name in names}, codes, scales)
    runs = {}
    for name in names:  # NAME@512: this one with xla_cpu_prefer_vector_width=512
        base, _, width = name.partition("@")
        runs[name] = kernel(FORMULATIONS[base], codes, scales,
                            {"xla_cpu_prefer_vector_width": int(width)} if width else options)
    report_alternated(runs, rounds, lambda ref_name, best: (
        f"{n} fp8 weights of {SIDE}x{SIDE} -> bf16 on {jax.devices()[0].device_kind}, "
        f"{rounds} alternated rounds of 3, options {options or 'default'}, load average "
        f"{os.getloadavg()[0]:.1f}; reference {ref_name} {best:.1f} GB/s"))


if __name__ == "__main__":
    main()
