"""Writing a file so that a failed save never leaves a half-written file at its path."""

from __future__ import annotations

import contextlib
import os
import threading
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
    old = None
    try:
        with open(temp, "wb") as f:
            yield f
        old = _hold(path)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
        if old is not None:
            _release(old)


HOLD_BYTES = 64 << 20
"""An old file this large, replaced, is freed in the background: the rename that drops its
last name frees its pages in the kernel first (0.25 s for 307 MB in the page cache here)."""


def _hold(path: Path) -> int | None:
    """A descriptor of the file `path` names now, when large: it keeps the old file's pages
    alive through the rename, and the last `close` (in a thread) frees them. If the process
    dies first, the kernel closes it: nothing is left behind."""
    try:
        if os.stat(path).st_size < HOLD_BYTES:
            return None
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None


def _release(fd: int) -> None:
    threading.Thread(target=os.close, args=(fd,), name="inspector-free-old").start()
