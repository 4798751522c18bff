"""The one shape of every message about an unreadable file: the file, the problem, the fix."""

from __future__ import annotations

import os

from inspector.core.errors import LoadError


def file_error(
    path: str | os.PathLike,
    problem: str,
    fix: str | None = None,
    details: str | None = None,
) -> LoadError:
    """Returns a `LoadError` saying which file could not be loaded, why, and what to do.

    Args:
        path: the file or directory (a path, or a `Location`: a URL shows without credentials).
        problem: what is wrong, as a phrase (`"the header is not valid JSON"`).
        fix: what the user can do about it, if anything.
        details: lines listing every offender (see `inspector.core.errors.bullet_list`).

    Returns:
        The error, for the caller to raise.

    >>> print(file_error("m.safetensors", "the file is empty", "Re-save it."))
    Cannot load m.safetensors: the file is empty.
    Re-save it.
    """
    name = os.fspath(path) if isinstance(path, str | os.PathLike) else str(path)  # a Location
    message = f"Cannot load {name}: {problem.rstrip('.')}."
    if details:
        message += f"\n{details}"
    if fix:
        message += f"\n{fix}"
    return LoadError(message)
