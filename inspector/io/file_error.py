"""The one shape of every message about an unreadable file: the file, the problem, the fix."""

from __future__ import annotations

import os

from inspector.core.errors import LoadError, MissingDependencyError, ReaderBugError


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


def missing_library(
    path: str | os.PathLike, package: str, needed_for: str, install: str | None = None
) -> MissingDependencyError:
    """Returns a `MissingDependencyError`: reading `path` needs `package`, not installed.

    Args:
        path: the file or directory being read (a path or a `Location`).
        package: the pip name of the missing library.
        needed_for: what needs it, as a phrase (`"reading orbax checkpoints"`).
        install: the pip command; by default `pip install <package>`.

    >>> print(missing_library("ckpt", "tensorstore", "reading orbax checkpoints"))
    Cannot load ckpt: reading orbax checkpoints needs tensorstore, which is not installed.
    Install it with: pip install tensorstore
    """
    name = os.fspath(path) if isinstance(path, str | os.PathLike) else str(path)
    return MissingDependencyError(
        f"Cannot load {name}: {needed_for} needs {package}, which is not installed.\n"
        f"Install it with: {install or f'pip install {package}'}"
    )


def reader_bug(path: str | os.PathLike, fmt: str, exc: BaseException) -> ReaderBugError:
    """Returns a `ReaderBugError` for an exception no file should cause in the `fmt` reader.

    Raise it `from exc`, so the original traceback is kept.

    >>> print(reader_bug("m.npz", "npz", IndexError("list index out of range")))
    Cannot load m.npz: the inspector's npz reader failed with IndexError: list index out of range.
    This is a bug in the inspector, not a fault of the file: please report it, with this traceback.
    """
    name = os.fspath(path) if isinstance(path, str | os.PathLike) else str(path)
    return ReaderBugError(
        f"Cannot load {name}: the inspector's {fmt} reader failed with "
        f"{type(exc).__name__}: {str(exc).rstrip('.')}.\nThis is a bug in the inspector, not a "
        "fault of the file: please report it, with this traceback."
    )
