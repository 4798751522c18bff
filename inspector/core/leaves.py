"""What a leaf is without reading it: shape, dtype name, bytes and device.

The ground floor of the core: `describe`, `diff`, `packed` and the ops all read leaves through
these, and this module imports no other part of the core but `devices`, and JAX only once a leaf
needs it (a JAX array, a Python scalar), so describing lazy checkpoint leaves stays JAX-free.
"""

from __future__ import annotations

import math
import sys

import numpy as np

_DTYPE_NAMES: dict = {}


def dtype_name(dtype) -> str:
    """`str(np.dtype(dtype))`, cached: NumPy's own `str` costs microseconds per call.

    >>> dtype_name(np.float32), dtype_name("bfloat16")
    ('float32', 'bfloat16')
    """
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(np.dtype(dtype))
    return name


def leaf_info(leaf) -> tuple[tuple[int, ...] | None, str | None, int, str | None]:
    """Returns `(shape, dtype, nbytes, device)` of a leaf without reading its data.

    Python scalars are described as JAX would hold them (`int` as int32, `float` as float32);
    non-array leaves (strings, objects) have no shape or dtype.

    >>> leaf_info(np.zeros((2, 3), np.float16)), leaf_info(1.5), leaf_info("x")
    (((2, 3), 'float16', 12, None), ((), 'float32', 4, None), (None, None, 0, None))
    """
    if type(leaf) is np.ndarray:
        return leaf.shape, dtype_name(leaf.dtype), leaf.nbytes, None
    shape = getattr(leaf, "shape", None)
    dtype = getattr(leaf, "dtype", None)
    if shape is None or dtype is None:
        if isinstance(leaf, bool | int | float | complex):
            import jax  # how JAX holds it depends on its x64 setting

            dt = jax.dtypes.canonicalize_dtype(np.result_type(type(leaf)))
            return (), dtype_name(dt), dt.itemsize, None
        return None, None, 0, None
    shape = tuple(shape)
    device = None
    jax = sys.modules.get("jax")  # not imported: no leaf is a JAX array
    if jax is not None and isinstance(leaf, jax.Array):
        from inspector.core.devices import device_name

        devs = leaf.sharding.device_set
        device = device_name(next(iter(devs))) if len(devs) == 1 else f"{len(devs)} devices"
    return shape, dtype_name(dtype), math.prod(shape) * np.dtype(dtype).itemsize, device
