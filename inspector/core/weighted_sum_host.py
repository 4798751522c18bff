"""The CPU's call for the float32 group of a packed weighted sum: `sum_loops.
weighted_sum_into` (a numba loop writing with streaming stores) instead of an XLA kernel.

XLA's CPU kernel reads every output line before writing it (write-allocate) and, given no
earlier result to write into, needs a zero-filled buffer to donate: the app's first run on
two 1.22 GB checkpoints filled 1.22 GB (0.39-0.52 s on a quiet machine) before summing. The
loop writes into memory of its own (`host_read.host_buffer`: faulted in by one call, about
as long as that fill) or, donated, into the last result's (`host_outputs.py`), with the
values of XLA's kernel bit for bit, 10-20% sooner than XLA's kernel there (it reads no
output line before writing it).
"""

from __future__ import annotations

import math

import jax
import numpy as np

from inspector.core import host_outputs, host_read, mapped_groups
from inspector.core.calls import Call

HOST_LOOP = True
"""Whether the CPU sums packed float32 buffers by the loop (tests switch it off to compare)."""


MIN_BYTES = 1 << 24
"""Smaller groups take the XLA kernel: their output stays in the caches (no write-allocate
traffic to save), and XLA runs the groups of several dtypes in one call. The working set
maps the groups the loop takes (`packed_reads.read_mapped`)."""


def usable(dtype, acc, out, shape, device) -> bool:
    """Whether the loop takes a group: float32 leaves summed in float32, on a CPU device,
    `MIN_BYTES` or more."""
    f32 = np.dtype(np.float32)
    return (HOST_LOOP and isinstance(device, jax.Device) and device.platform == "cpu"
            and np.dtype(dtype) == f32 and np.dtype(acc) == f32 and np.dtype(out) == f32
            and math.prod(shape) * 4 >= MIN_BYTES)


def host_call(k: int, shape: tuple, device, args: list) -> Call:
    """The host call summing `k` packed float32 buffers of `shape`: `args` = [the buffer it
    may write into (an empty one when no earlier result is given), the weights, the k
    buffers (arrays, or `MappedGroup`s read where they lie in their files)]."""
    key = ("weighted_sum_host", k, tuple(shape))
    return Call(key, lambda: _kernel(k, tuple(shape), device), args, donate=(0,), carry=True,
                host=True)


def warm(k: int) -> None:
    """Compiles the loop for `k` buffers (or loads it from numba's disk cache: ~0.1 s against
    ~1 s), on 16 elements: a server warming the sum its launcher's checkpoints are opened
    for, so its first run does not pay it."""
    from inspector.core import sum_loops

    sum_loops.weighted_sum_into([np.zeros(16, np.float32)] * k, np.zeros(k, np.float32),
                                np.zeros(16, np.float32))
    x = np.zeros(16, np.float32)
    x.flags.writeable = False  # as a file's map is
    sum_loops.weighted_gather_sum_into([x] * k, np.zeros((k, 1), np.int64), np.zeros(1, np.int64),
                                       np.full(1, 16, np.int64), np.zeros(k, np.float32),
                                       np.zeros(16, np.float32))


def _kernel(k: int, shape: tuple, device):
    from inspector.core import sum_loops  # numba: imported when the CPU sums packed buffers

    n = math.prod(shape)

    def kernel(out, w, *xs):
        memory = host_outputs.take_memory(out, n)
        if memory is None:  # faulted in by one call: 1.0-1.1 s when the streaming stores
            # fault each page in against 0.53-0.60 s (two 1.22 GB trees, fresh processes)
            memory = host_read.host_buffer(4 * n).view(np.float32).reshape(shape)
        w = np.asarray(w, np.float32)
        if any(isinstance(x, mapped_groups.MappedGroup) for x in xs):  # read in their files
            sources, positions, offsets, sizes = mapped_groups.gather_args(xs)
            sum_loops.weighted_gather_sum_into(sources, positions, offsets, sizes, w,
                                               memory.reshape(-1))
        else:
            sum_loops.weighted_sum_into([np.asarray(x).reshape(-1) for x in xs], w,
                                        memory.reshape(-1))
        return host_outputs.hand_out(memory, np.float32, device)

    # what XLA's cost analysis says of its kernel (`Plan.cost`): k multiplies and k - 1 adds
    # an element, k buffers read and one written
    kernel.cost_analysis = lambda: {"flops": float((2 * k - 1) * n),
                                    "bytes accessed": float((k + 1) * 4 * n)}
    return kernel
