"""NumPy scalars and arrays inside a pickle, decoded from their bytes without calling NumPy's
pickle functions.

Checkpoints hold them often (a metric saved as `np.float64`, a histogram as an array). NumPy
pickles a scalar as `numpy.core.multiarray.scalar(numpy.dtype(...), raw bytes)` and an array as
`_reconstruct(ndarray, ...)` restored with the state `(version, shape, dtype, is_fortran, raw
bytes)`. `pickle_objects` records those calls like any other; `numpy_value` reads the records
back, for numeric dtypes only, checking every byte count. Anything else stays an `Opaque`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from inspector.io.dtypes import dtype_from_name

_MULTIARRAY = ("numpy.core.multiarray", "numpy._core.multiarray")


def numpy_value(obj) -> Any:
    """Returns the NumPy scalar or array the recorded call `obj` describes, or None.

    Args:
        obj: a `pickle_objects.Foreign` record.

    Returns:
        A NumPy scalar or a (native byte order) array; None when `obj` is not one, or its dtype
        is not numeric (strings and object arrays stay `Opaque`), or its byte count is wrong.
    """
    module, _, name = obj.dotted.rpartition(".")
    if module not in _MULTIARRAY or obj.kwargs:
        return None
    if name == "scalar" and len(obj.args) == 2 and obj.state is None:
        dtype, raw = _dtype(obj.args[0]), obj.args[1]
        if dtype is None or not isinstance(raw, bytes) or len(raw) != dtype.itemsize:
            return None
        return np.frombuffer(raw, dtype).astype(dtype.newbyteorder("="))[0]
    if name == "_reconstruct" and isinstance(obj.state, tuple) and len(obj.state) == 5:
        _, shape, dtype_record, fortran, raw = obj.state
        dtype = _dtype(dtype_record)
        if (dtype is None or not isinstance(raw, bytes) or not isinstance(shape, tuple)
                or not all(isinstance(n, int) and n >= 0 for n in shape)
                or len(raw) != math.prod(shape) * dtype.itemsize):  # fmt: skip
            return None
        flat = np.frombuffer(raw, dtype)
        return flat.reshape(shape, order="F" if fortran else "C").astype(dtype.newbyteorder("="))
    return None


def _dtype(record) -> np.dtype | None:
    # numpy.dtype("f8", False, True), then BUILD (3, "<", None, None, None, -1, -1, 0)
    if getattr(record, "dotted", None) != "numpy.dtype" or not record.args:
        return None
    if not isinstance(record.args[0], str):
        return None
    try:
        dtype = dtype_from_name(record.args[0])  # numeric only
    except ValueError:
        return None
    state = record.state
    if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">"):
        dtype = dtype.newbyteorder(state[1])
    return dtype
