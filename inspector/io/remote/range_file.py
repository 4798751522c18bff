"""A read-only file object over a remote file, for libraries that want one (`zipfile`, h5py)."""

from __future__ import annotations

import io
from collections.abc import Sequence

BLOCK_BYTES = 64 * 1024
"""What a file object fetches on a cache miss."""


class RangeFile(io.RawIOBase):
    """A read-only, seekable file object over a `RemoteFile`, for libraries that want one.

    A read that misses the cache fetches one 64 KiB block around it (clipped to the file),
    never more, so `zipfile` finds its central directory in one request; `prefetch` fetches
    several ranges at once (npz member headers, torch storages' local headers).
    """

    def __init__(self, location):  # a RemoteFile: its cache, `read` and `read_many`
        super().__init__()
        self._location, self._size, self._pos = location, location.size(), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        start, end = self._pos, min(self._pos + len(view), self._size)
        if end <= start:
            return 0
        data = self._location.cached(start, end)
        if data is None:
            window = max(BLOCK_BYTES, end - start)
            lo = max(0, min(start, self._size - window))
            block = self._location.read(lo, lo + window)
            self._location.remember(lo, block)
            data = block[start - lo : end - lo]
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def prefetch(self, ranges: Sequence[tuple[int, int]]) -> None:
        ranges = [(s, min(e, self._size)) for s, e in ranges if s < min(e, self._size)]
        missing = [(s, e) for s, e in ranges if self._location.cached(s, e) is None]
        for (s, _), data in zip(missing, self._location.read_many(missing), strict=True):
            self._location.remember(s, data)
