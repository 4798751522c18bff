"""Where a checkpoint's bytes come from: a local path or a URL, behind one small interface.

Every format reader reads through a `Location`: its size, exact byte ranges (several at once
where several are needed), a seekable file object for libraries that want one (`zipfile`),
and array readers for raw data at a known offset. `LocalFile` memory-maps; `inspector.io.remote`
implements the same interface over fsspec (http(s)://, s3://, gs://, hf://, ...), so the
format code is the same for both; `inspector.io.locate` picks one for a path or URL.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from inspector.io.regions import mapped_reader

DEFAULT_TIMEOUT = 30.0
"""Seconds a remote read may go without an answer before it fails with `LoadError`."""

@dataclass(frozen=True)
class ReadProgress:
    """How far one remote read has got: `done` of `total` bytes after `seconds`."""

    source: str
    done: int
    total: int
    seconds: float

    @property
    def rate(self) -> float:
        """Bytes per second so far."""
        return self.done / self.seconds if self.seconds > 0 else 0.0


ProgressCallback = Callable[[ReadProgress], None]


class Location:
    """A file or folder to read from; `str()` is its name for messages (no credentials)."""

    name: str
    local_path: Path | None = None  # set for local files: libraries that need a path use it

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def exists(self) -> bool:
        raise NotImplementedError

    def is_dir(self) -> bool:
        raise NotImplementedError

    def size(self) -> int:
        raise NotImplementedError

    def child(self, relative: str) -> Location:
        """The location `relative` below this folder (or beside this file, for `sibling`)."""
        raise NotImplementedError

    def sibling(self, name: str) -> Location:
        """The location `name` in the same folder as this file."""
        raise NotImplementedError

    def read(self, start: int, end: int) -> bytes:
        """Returns bytes `[start, end)`; fewer only where the file ends first."""
        raise NotImplementedError

    def read_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Returns the bytes of each `[start, end)` range (remote: fetched concurrently)."""
        return [self.read(start, end) for start, end in ranges]

    def read_all(self) -> bytes:
        return self.read(0, self.size())

    def open(self) -> BinaryIO:
        """A seekable binary file object (for `zipfile`); close it after use."""
        raise NotImplementedError

    def prefetch(self, f: BinaryIO, ranges: Sequence[tuple[int, int]]) -> None:
        """Hints that `f` (from `open`) will read these ranges soon: remote fetches them at once."""

    def array_reader(
        self, offset: int, dtype: np.dtype, shape: tuple[int, ...], order: str = "C"
    ) -> Callable[[], np.ndarray]:
        """A reader of the `shape`-shaped `dtype` array whose bytes start at `offset`."""
        raise NotImplementedError

    def tensorstore_kvstore(self) -> dict:
        """The tensorstore kvstore spec of this folder (orbax arrays are read by tensorstore)."""
        raise NotImplementedError


class LocalFile(Location):
    """A file or folder on this machine; arrays are memory-mapped."""

    def __init__(self, path: str | os.PathLike):
        self.local_path = Path(path)
        self.name = os.fspath(path)

    def exists(self) -> bool:
        return self.local_path.exists()

    def is_dir(self) -> bool:
        return self.local_path.is_dir()

    def size(self) -> int:
        return self.local_path.stat().st_size

    def child(self, relative: str) -> LocalFile:
        return LocalFile(self.local_path / relative)

    def sibling(self, name: str) -> LocalFile:
        return LocalFile(self.local_path.parent / name)

    def read(self, start: int, end: int) -> bytes:
        with open(self.local_path, "rb") as f:
            f.seek(start)
            return f.read(max(0, end - start))

    def read_all(self) -> bytes:
        return self.local_path.read_bytes()

    def open(self) -> BinaryIO:
        return open(self.local_path, "rb")

    def array_reader(self, offset, dtype, shape, order="C"):
        return mapped_reader(self.name, offset, dtype, shape, order)  # a str: no fspath each

    def tensorstore_kvstore(self) -> dict:
        return {"driver": "file", "path": f"{self.local_path.absolute()}/"}
