"""`locate`: the `Location` of a local path or a URL, the one door every reader goes through."""

from __future__ import annotations

import os
import re
from typing import Any

from inspector.io.location import DEFAULT_TIMEOUT, LocalFile, Location, ProgressCallback
from inspector.io.remote.location import RemoteFile

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def is_url(path: Any) -> bool:
    """Returns whether `path` is a URL (`scheme://...`) rather than a local path.

    >>> is_url("s3://bucket/m.safetensors"), is_url("./m.safetensors"), is_url("file:///m")
    (True, False, False)
    """
    return isinstance(path, str) and bool(_URL.match(path)) and not path.startswith("file://")



def locate(
    path: str | os.PathLike | Location,
    storage_options: dict | None = None,
    timeout: float | None = None,
    progress: ProgressCallback | None = None,
) -> Location:
    """Returns the `Location` of a local path or a URL (`http(s)://`, `s3://`, `gs://`, `hf://`).

    Args:
        path: a local path, a URL, or a `Location` (returned as it is).
        storage_options: options for the URL's fsspec filesystem (ignored for local paths).
        timeout: seconds a remote read may wait for an answer (default `DEFAULT_TIMEOUT`).
        progress: called as remote reads advance (see `ReadProgress`).

    Raises:
        LoadError: the URL's filesystem is not installed, or its options are invalid.
        TypeError: `path` is not a path, a URL or a `Location` (a tree, say).

    >>> locate("m.safetensors")
    LocalFile('m.safetensors')
    """
    if isinstance(path, Location):
        return path
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"expected a checkpoint's path or URL (str or os.PathLike), got a "
                        f"{type(path).__name__}: pass the file or folder to read (a tree "
                        "already in memory is used as it is, not loaded)")
    if isinstance(path, str) and path.startswith("file://"):
        path = path[len("file://") :]
    if not is_url(path):
        return LocalFile(path)
    return RemoteFile.open_url(
        path, storage_options or {}, DEFAULT_TIMEOUT if timeout is None else timeout, progress
    )
