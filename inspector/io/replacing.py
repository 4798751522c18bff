"""Writing a file so that a failed save never leaves a half-written file at its path."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Yields a binary file beside `path`; renames it over `path` on success, removes it on error.

    Args:
        path: the file to (re)write.

    Yields:
        The temporary file, open for writing.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "a.bin"
    >>> with replacing(target) as f:
    ...     _ = f.write(b"ok")
    >>> target.read_bytes(), sorted(p.name for p in target.parent.iterdir())
    (b'ok', ['a.bin'])
    """
    path = Path(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temp, "wb") as f:
            yield f
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
