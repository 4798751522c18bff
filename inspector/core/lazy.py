"""Leaves whose shape and dtype are known before their data is read."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np


class LazyArray:
    """An array leaf read on first use: `shape`, `dtype` and `nbytes` cost nothing.

    Checkpoint readers (`inspector.io`) return trees of these, so a 10 GB file opens in
    milliseconds. `np.asarray(leaf)` (or `leaf.read()`) reads the data; the result is cached
    only when `cache=True`, so streaming operations hold one leaf at a time. `sharding` is how
    the array was laid out over devices when it was saved (`SavedSharding`), if the file says.
    `quant` says, in words, how a quantized leaf is stored when its file holds it quantized
    (a GGUF `Q4_K` tensor read as float32); `describe` shows it as `Row.quant`.
    `layout` is set with `shape` and `dtype` (treat those as read-only): one shared `LayoutToken`
    per (shape, dtype), so a walk compares leaves' layouts by identity (`quant_groups`).
    `_file` is the file part of `source` (`file_of`), one string per file, where the reader
    that made the leaf set it (`io.safetensors_tree`), else None.

    >>> leaf = LazyArray((2, 3), "float32", lambda: np.zeros((2, 3), np.float32), source="x")
    >>> leaf.shape, leaf.dtype, leaf.nbytes
    ((2, 3), dtype('float32'), 24)
    >>> float(np.asarray(leaf).sum())
    0.0
    """

    __slots__ = ("shape", "dtype", "_reader", "source", "_cache", "_value", "sharding", "quant",
                 "region", "layout", "_file")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype,
        reader: Callable[[], np.ndarray],
        source: str = "",
        cache: bool = False,
        sharding=None,
        quant: str | None = None,
    ):
        self.shape = tuple(map(int, shape))
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self._reader = reader
        self.source = source
        self._cache = cache
        self._value = None
        self.sharding = sharding
        self.quant = quant
        # (path, offset) when the data is one native row-major run of a local file (its reader
        # says so): `inspector.core.host_read` reads it in place, with no memory map
        self.region = getattr(reader, "region", None)
        key = (self.shape, self.dtype)  # `layout_of`, inline (every leaf is made here)
        layout = _LAYOUTS.get(key)
        self.layout = layout_of(*key) if layout is None else layout
        self._file = None  # not found here: `source.rfind` alone would cost 0.15 us a leaf

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def remote(self) -> bool:
        """Whether reading it fetches over the network (its source is a URL)."""
        return "://" in self.source

    def read(self) -> np.ndarray:
        """Returns the data as a NumPy array of `shape` and `dtype` (read now)."""
        if self._value is not None:
            return self._value
        value = np.asarray(self._reader() if self._reader is not None else self._mapped())
        if value.shape != self.shape or value.dtype != self.dtype:
            from inspector.core.errors import LoadError

            raise LoadError(
                f"{self.source}: expected {self.dtype}{list(self.shape)}, "
                f"read {value.dtype}{list(value.shape)}. The file is inconsistent with its header."
            )
        if self._cache:
            self._value = value
        return value

    def _mapped(self) -> np.ndarray:
        """A leaf with a `region` and no reader (a safetensors file's tensors, made by
        `io.safetensors_tree` without a reader object each): its bytes, memory-mapped."""
        path, offset = self.region
        try:
            return np.asarray(np.memmap(path, self.dtype, "r", offset, self.shape))
        except (OSError, ValueError) as exc:
            from inspector.core.errors import LoadError

            raise LoadError(
                f"{self.source}: the {self.dtype}{list(self.shape)} array at byte {offset} of "
                f"{path} could not be read ({exc}). The file changed or shrank after it was "
                "opened; load it again.") from exc

    def __array__(self, dtype=None, copy=None):
        value = self.read()
        if dtype is not None:
            value = value.astype(dtype, copy=bool(copy))
        elif copy:
            value = value.copy()  # readers may hand back a read-only memory map
        return value

    def __repr__(self) -> str:
        return f"LazyArray({self.dtype}{list(self.shape)}, source={self.source!r})"


class LayoutToken:
    """A (shape, dtype) pair, one object per pair (`layout_of`): hashed and compared by
    identity, so a signature of leaves' layouts costs no hash of shapes or dtypes."""

    __slots__ = ("shape", "dtype")

    def __repr__(self) -> str:
        return f"LayoutToken({self.dtype}{list(self.shape)})"


_LAYOUTS: dict = {}
_FILES: dict = {}
_INTERNED = 1 << 16  # entries kept at most (tokens are compared only by identity: a table
# emptied makes new tokens for old pairs, never wrong ones)


def layout_of(shape: tuple, dtype: np.dtype) -> LayoutToken:
    """The one `LayoutToken` of `shape` (a tuple of ints) and `dtype` (an `np.dtype`)."""
    key = (shape, dtype)
    token = _LAYOUTS.get(key)
    if token is None:
        if len(_LAYOUTS) >= _INTERNED:
            _LAYOUTS.clear()
        token = _LAYOUTS[key] = LayoutToken()
        token.shape, token.dtype = shape, dtype
    return token


def stored_as(leaf) -> str | None:
    """The type a file holds `leaf` quantized as (`'Q4_K'`: the start of `LazyArray.quant`),
    or None for any other leaf.

    >>> stored_as(LazyArray((2,), np.float32, lambda: None, quant="Q8_0 · 8.5 bits/value"))
    'Q8_0'
    """
    if type(leaf) is not LazyArray or not leaf.quant:
        return None
    return leaf.quant.split(" · ", 1)[0]


def file_of(source: str) -> str:
    """The file part of a leaf's `source` (`path:tensor` -> `path`; all of it without a
    ":"), one string object per file."""
    cut = source.rfind(":")
    name = source[:cut] if cut > 0 else source
    token = _FILES.get(name)
    if token is None:
        if len(_FILES) >= _INTERNED:
            _FILES.clear()
        token = _FILES[name] = name
    return token


def read_ahead(values: Iterable, ahead: int = 8) -> Iterator:
    """Yields `values` in order, each `LazyArray` read (a NumPy array), others as they are.

    Remote leaves are fetched up to `ahead` at a time in threads while earlier ones are used,
    so a tree at a URL costs about one round trip per `ahead` leaves, not one per leaf, and at
    most `ahead` leaves are held at once. Local leaves (memory maps) are read in order.

    >>> leaves = [LazyArray((1,), "int32", lambda: np.ones(1, np.int32)), 7]
    >>> [np.asarray(v).tolist() for v in read_ahead(leaves)]
    [[1], 7]
    """
    values = list(values)
    remote = [i for i, v in enumerate(values) if isinstance(v, LazyArray) and v.remote]
    if len(remote) < 2:
        yield from (v.read() if isinstance(v, LazyArray) else v for v in values)
        return
    with ThreadPoolExecutor(max_workers=ahead, thread_name_prefix="inspector-read") as pool:
        futures, submitted = {}, 0
        for i, value in enumerate(values):
            while submitted < len(remote) and len(futures) < ahead:
                j = remote[submitted]
                futures[j] = pool.submit(values[j].read)
                submitted += 1
            if i in futures:
                yield futures.pop(i).result()
            else:
                yield value.read() if isinstance(value, LazyArray) else value
