"""What a leaf is without reading it: shape, dtype name, bytes and device.

The ground floor of the core: `describe`, `diff`, `packed` and the ops all read leaves through
these, and this module imports no other part of the core but `devices`.
"""

from __future__ import annotations

import math

import jax
import numpy as np

from inspector.core import caches
from inspector.core.devices import device_name

_JAX_ARRAY = jax.Array
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


_OTHER_ORDER = ">" if np.little_endian else "<"


def unsupported_dtype(dtype) -> str | None:
    """Why JAX cannot compute on `dtype` (other-endian bytes, long doubles), or None.

    >>> unsupported_dtype(">f8"), unsupported_dtype("float32")
    ("stored big-endian: convert it (x.astype(x.dtype.newbyteorder('=')))", None)
    """
    dt = np.dtype(dtype)
    if dt.byteorder == _OTHER_ORDER:
        return "stored big-endian: convert it (x.astype(x.dtype.newbyteorder('=')))"
    if dt.kind in "fc" and dt.itemsize > (16 if dt.kind == "c" else 8):
        return f"{dt.name} (long double) has no JAX type: cast it (x.astype(np.float64)) first"
    return None


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
            dt = jax.dtypes.canonicalize_dtype(np.result_type(type(leaf)))
            return (), dtype_name(dt), dt.itemsize, None
        return None, None, 0, None
    shape = tuple(shape)
    device = None
    if isinstance(leaf, _JAX_ARRAY):
        devs = leaf.sharding.device_set
        device = device_name(next(iter(devs))) if len(devs) == 1 else f"{len(devs)} devices"
    return shape, dtype_name(dtype), math.prod(shape) * np.dtype(dtype).itemsize, device


caches.register_mapping("dtype names", _DTYPE_NAMES)
