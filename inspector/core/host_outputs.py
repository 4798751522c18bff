"""The outputs of host calls (`Call.host`: a numba loop on the CPU instead of an XLA kernel):
NumPy memory handed to JAX without a copy, and found again when such an output comes back
donated, so the next execution writes into the same memory (`quant/dequantize_host.py`,
`weighted_sum_host.py`).

A host call honours donation as an XLA kernel does: the buffer it is given is deleted, and
when that buffer is one of these outputs (the last execution's, carried: `Call.carry`) the
new values go into its memory, so timed repeats fault no fresh pages and the old result
cannot be read with the new values in it.
"""

from __future__ import annotations

import weakref

import jax
import numpy as np

_OWN: dict[int, tuple[weakref.ref, np.ndarray]] = {}
"""`id` of each output made here (while it lives) -> (a weak reference to it, the NumPy memory
under it). JAX arrays are not hashable, so not weak keys."""


def take_memory(out: jax.Array, size: int) -> np.ndarray | None:
    """The memory under `out` when it is one of these outputs of `size` elements, else None;
    `out` is deleted either way (donated: as after an XLA kernel, the old result is gone)."""
    ref, memory = _OWN.get(id(out), (None, None))
    out.delete()
    if ref is None or ref() is not out or memory.size != size:
        return None
    return memory


def hand_out(memory: np.ndarray, dtype, device) -> jax.Array:
    """`memory` (viewed as `dtype`) as a JAX array on the CPU `device`, without a copy."""
    result = jax.device_put(memory.view(np.dtype(dtype)), device, may_alias=True)
    _OWN[id(result)] = (weakref.ref(result), memory)
    weakref.finalize(result, _OWN.pop, id(result), None)
    return result


def placeholder(dtype, device) -> jax.Array:
    """The first argument of a host call with no earlier output to write into: an empty
    buffer, nothing to fill (the call makes its output)."""
    return jax.device_put(np.zeros(0, dtype), device)
