"""Element types by name: the NumPy and ml_dtypes types a checkpoint may hold."""

from __future__ import annotations

import numpy as np

# ml_dtypes types that NumPy cannot describe by itself: np.save and h5py write them as raw
# bytes ("V2", or a bogus "<f1"), so the readers restore them from a name stored beside the data.
ML_DTYPE_NAMES = (
    "bfloat16",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "int2",
    "int4",
    "uint2",
    "uint4",
)

# Kinds of NumPy dtype a leaf may have: bool, ints, floats, complex. Object, string and
# structured dtypes are refused: they are not tensors and object arrays need pickle.
_NUMERIC_KINDS = "biufc"


def dtype_from_name(name: str) -> np.dtype:
    """Returns the array dtype called `name`, ml_dtypes types included.

    Args:
        name: a NumPy name (`"float32"`, `"int8"`, `"bool"`, `"<f4"`) or an ml_dtypes name
            (`"bfloat16"`, `"float8_e4m3fn"`).

    Returns:
        The dtype, in native byte order for the ml_dtypes types.

    Raises:
        ValueError: `name` is unknown, or names a non-numeric dtype (object, string, record).

    >>> dtype_from_name("bfloat16").itemsize, dtype_from_name("<f4")
    (2, dtype('float32'))
    """
    if name in ML_DTYPE_NAMES:
        import ml_dtypes

        found = getattr(ml_dtypes, name, None)
        if found is None:
            raise ValueError(f"dtype {name!r} needs a newer ml_dtypes than the installed one")
        return np.dtype(found)
    try:
        dtype = np.dtype(name)
    except TypeError as exc:
        raise ValueError(f"unknown dtype {name!r}") from exc
    if dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(f"dtype {name!r} is not a numeric array type")
    return dtype


def ml_dtype_name(dtype: np.dtype) -> str | None:
    """Returns the ml_dtypes name of `dtype` (`"bfloat16"`), or None for NumPy's own dtypes.

    >>> ml_dtype_name(dtype_from_name("bfloat16")), ml_dtype_name(np.dtype("float32"))
    ('bfloat16', None)
    """
    dtype = np.dtype(dtype)
    return dtype.name if dtype.type.__module__ == "ml_dtypes" else None
