"""Finds where a pickle ends and checks its declared lengths, running nothing.

`scan` walks the opcodes with `pickletools` (which decodes, never executes) to find where the
pickle ends and to check that every length it declares fits in the bytes present, so a damaged
or forged length fails fast instead of allocating.
"""

from __future__ import annotations

import os
import pickletools
from typing import BinaryIO

from inspector.io.file_error import file_error


def scan(f: BinaryIO, path: str | os.PathLike, limit: int) -> bytes:
    """Returns the bytes of the one pickle starting at `f`'s position, leaving `f` after it.

    Runs nothing: `pickletools.genops` only decodes opcodes. Every length an opcode declares
    must fit in the `limit` bytes that remain.

    Args:
        f: a binary file positioned at a pickle.
        path: the checkpoint, named in errors.
        limit: how many bytes from the position the pickle may span.

    Returns:
        The pickle, up to and including its STOP opcode.

    Raises:
        LoadError: the pickle is malformed or truncated.
    """
    start = f.tell()
    bounded = _Bounded(f, start + limit)
    try:
        for _ in pickletools.genops(bounded):
            pass
    except (ValueError, EOFError, _Truncated) as exc:
        raise file_error(
            path,
            f"a pickle starting at byte {start} is damaged or truncated ({exc})",
            "The file is damaged; save it again.",
        ) from exc
    end = f.tell()
    f.seek(start)
    return f.read(end - start)


class _Truncated(Exception):
    pass


class _Bounded:
    """A read-only view of a file that refuses reads past `end` instead of allocating them."""

    def __init__(self, f: BinaryIO, end: int):
        self.f, self.end = f, end

    def read(self, n: int = -1) -> bytes:
        remaining = self.end - self.f.tell()
        if n is None or n < 0:
            n = remaining
        if n > remaining:
            raise _Truncated(f"{n} bytes are declared but only {max(remaining, 0)} remain")
        return self.f.read(n)

    def readline(self) -> bytes:
        return self.f.readline(max(self.end - self.f.tell(), 0))

    def tell(self) -> int:
        return self.f.tell()
