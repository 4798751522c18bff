"""The CPU's call for a packed float8 buffer: `dequant_loops.fp8_runs` (a numba loop writing
with streaming stores) instead of an XLA kernel (docs/dequantize-speed.md).

XLA's CPU kernels store the ordinary way, so each cache line they write is read first: the
flat XLA kernel reached 0.31-0.46 of the copy reference here, the loop 0.49-0.89 (median 0.69)
into an output it chose. So on the CPU the flat dequantize's call (`dequantize_packed.
flat_call`) is a host call (`Call.host`): a Python function run as it is, not lowered by XLA.

Its output is NumPy memory of its own (`dequant_loops.empty_out`: 64-byte aligned), handed to
JAX without a copy and found again when it comes back donated (`host_outputs.py`).
"""

from __future__ import annotations

import itertools
import weakref

import jax
import numpy as np

from inspector.core import host_outputs
from inspector.core.calls import Call
from inspector.core.quant.flat_runs import FlatRuns

CODE_KINDS = {"float8_e4m3fn": "e4m3fn", "float8_e5m2": "e5m2"}
"""The float8 dtypes the loop decodes (others take the XLA kernel)."""
OUT_BITS = {"bfloat16": np.uint16, "float16": np.uint16, "float32": np.float32}

_SERIAL = itertools.count()
_RUNS_KEY: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # FlatRuns -> its number


def usable(codes, scales, dtype: str, device) -> bool:
    """Whether the loop takes this buffer: on a CPU device, float8 e4m3fn / e5m2 codes,
    float32 scales, a bfloat16 / float16 / float32 output."""
    return (device.platform == "cpu" and np.dtype(codes.dtype).name in CODE_KINDS
            and np.dtype(scales.dtype) == np.float32 and dtype in OUT_BITS)


def host_call(runs: FlatRuns, codes, scales, dtype: str, device) -> Call:
    """The host call that dequantizes `codes` by `runs` with `scales` into `dtype`. Its first
    argument is the buffer it may write into (an empty one at first: the loop's output is
    made by the first execution, then carried)."""
    serial = _RUNS_KEY.get(runs)
    if serial is None:  # the runs are closed over: their number keeps kernels apart
        serial = _RUNS_KEY[runs] = next(_SERIAL)
    code_kind = CODE_KINDS[np.dtype(codes.dtype).name]
    key = ("dequantize-flat-host", serial, int(codes.size), code_kind, dtype)
    empty = host_outputs.placeholder(OUT_BITS[dtype], device)
    return Call(key, lambda: _kernel(runs, code_kind, dtype, device), [empty, codes, scales],
                donate=(0,), carry=True, host=True)


def _kernel(runs: FlatRuns, code_kind: str, dtype: str, device):
    from inspector.core.quant import dequant_loops  # numba: imported when the CPU dequantizes

    bits = OUT_BITS[dtype]
    n = runs.size

    def kernel(out, codes, scales):
        memory = host_outputs.take_memory(out, n)
        if memory is None:
            memory = dequant_loops.empty_out(n, dtype)
        dequant_loops.fp8_runs(np.asarray(codes).reshape(-1).view(np.uint8), runs.starts,
                               runs.scale_index, np.asarray(scales).reshape(-1),
                               memory.view(bits), dtype, code_kind)
        return host_outputs.hand_out(memory, jax.numpy.dtype(dtype), device)

    return kernel
