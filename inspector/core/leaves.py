"""What a leaf is without reading it: shape, dtype name, bytes and device.

The ground floor of the core: `describe`, `diff`, `packed` and the ops all read leaves through
these, and this module imports no other part of the core but `devices`, and JAX only once a leaf
needs it (a JAX array, a Python scalar), so describing lazy checkpoint leaves stays JAX-free.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np

from inspector.core import caches

_DTYPE_NAMES: dict = {}


def dtype_name(dtype) -> str:
    """`str(np.dtype(dtype))`, cached: NumPy's own `str` costs microseconds per call.

    >>> dtype_name(np.float32), dtype_name("bfloat16")
    ('float32', 'bfloat16')
    """
    # keyed by identity first: hashing a NumPy dtype costs microseconds, and a checkpoint's
    # 100k leaves share a handful of dtype objects (the entry holds the object: no id reuse)
    found = _DTYPE_NAMES.get(id(dtype))
    if found is not None and found[0] is dtype:
        return found[1]
    if len(_DTYPE_NAMES) > 4096:
        _DTYPE_NAMES.clear()
    name = str(np.dtype(dtype))
    _DTYPE_NAMES[id(dtype)] = (dtype, name)
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
            dt = _scalar_dtype(type(leaf))
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


_NARROW = {"int64": np.dtype("int32"), "uint64": np.dtype("uint32"),
           "float64": np.dtype("float32"), "complex128": np.dtype("complex64")}


def _scalar_dtype(kind: type) -> np.dtype:
    """The dtype JAX gives a Python scalar of this type: 64-bit kinds narrowed to 32 bits
    unless x64 is on. Before JAX is imported that setting can only come from the
    `JAX_ENABLE_X64` variable, so JAX need not be imported to tell.

    >>> _scalar_dtype(int), _scalar_dtype(bool)
    (dtype('int32'), dtype('bool'))
    """
    jax = sys.modules.get("jax")
    if jax is not None:
        return jax.dtypes.canonicalize_dtype(np.result_type(kind))
    dt = np.result_type(kind)
    x64 = os.environ.get("JAX_ENABLE_X64", "").strip().lower() in ("1", "true", "t", "yes",
                                                                    "y", "on")
    return dt if x64 else _NARROW.get(dt.name, dt)


caches.register_mapping("dtype names", _DTYPE_NAMES)
