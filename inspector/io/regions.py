"""Readers for an array stored as raw bytes at a known offset of a file, memory-mapped."""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np

from inspector.io.file_error import file_error


def mapped_reader(
    path: str | os.PathLike,
    offset: int,
    dtype: np.dtype,
    shape: tuple[int, ...],
    order: str = "C",
) -> Callable[[], np.ndarray]:
    """Returns a reader for the `shape`-shaped `dtype` array whose bytes start at `offset`.

    The reader maps the file when called and returns a read-only array backed by the mapping,
    so reading a leaf costs no copy, and pages are loaded only when touched. Data stored in the
    other byte order is converted to the native one (that read copies).

    Args:
        path: the file.
        offset: where the array's first byte is, from the start of the file.
        dtype: the element type as stored (its byte order included).
        shape: the array's shape.
        order: "C" (row-major) or "F" (column-major, as NumPy's `fortran_order`).

    Returns:
        A function of no arguments returning the array.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
    ...     _ = f.write(b"xx" + np.arange(6, dtype="<i2").tobytes())
    >>> mapped_reader(f.name, 2, np.dtype("<i2"), (2, 3))().tolist()
    [[0, 1, 2], [3, 4, 5]]
    >>> os.remove(f.name)
    """
    return _Mapped(os.fspath(path), offset, np.dtype(dtype), tuple(shape), order)


class _Mapped:
    """`mapped_reader`'s reader: a small object, not a closure (a checkpoint of 100k tensors
    makes 100k of them). `region` is `(path, offset)` when the bytes are one native row-major
    run (`LazyArray.region`: read in place with preadv), else None."""

    __slots__ = ("path", "offset", "dtype", "shape", "order", "region")

    def __init__(self, path: str, offset: int, dtype: np.dtype, shape: tuple, order: str):
        self.path, self.offset, self.dtype, self.shape, self.order = (
            path, offset, dtype, shape, order)
        native = dtype.byteorder in "=|" or dtype.isnative
        self.region = (path, offset) if (
            native and (order == "C" or len(shape) <= 1) and math.prod(shape) > 0) else None

    def __call__(self) -> np.ndarray:
        path, offset, dtype, shape, order = (
            self.path, self.offset, self.dtype, self.shape, self.order)
        native = dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype
        if math.prod(shape) == 0:
            return np.empty(shape, native, order=order)  # mmap cannot map zero bytes
        try:
            mapped = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)
        except (OSError, ValueError) as exc:
            raise file_error(
                path,
                f"the {dtype}{list(shape)} array at byte {offset} could not be read ({exc})",
                "The file changed or shrank after it was opened; load it again.",
            ) from exc
        array = np.asarray(mapped)
        return array if dtype == native else array.astype(native)
