"""The inspector's exceptions. Every message names the key paths involved and the fix."""

from __future__ import annotations


class InspectorError(ValueError):
    """Base of every error the inspector raises on bad input."""


class StructureMismatchError(InspectorError):
    """Trees that must match (same structure, shapes, dtypes) do not."""


class IndexParseError(InspectorError):
    """An index written as text (`"1:3, ..., 0"`) could not be parsed."""


class IndexOutOfRangeError(InspectorError, IndexError):
    """An index falls outside a leaf's shape (JAX would clamp it silently)."""


class UnsupportedLeafError(InspectorError, TypeError):
    """A leaf is not an array an operation can use (a string, an object, ...)."""


class ShardingError(InspectorError):
    """A mesh or a sharding spec does not fit the devices or the tree's leaves."""


class LoadError(InspectorError):
    """A file or directory could not be read as a checkpoint: the file is at fault."""


class MissingDependencyError(InspectorError, ImportError):
    """An optional library a format or feature needs is not installed; the message names the
    package and the pip command that installs it."""


class ReaderBugError(RuntimeError):
    """A reader failed in a way no file should make it fail: a bug in the inspector.

    Not an `InspectorError` (the input is not at fault); raised `from` the original exception,
    so its traceback is kept for the report."""


def bullet_list(lines, limit: int = 50) -> str:
    """Formats offenders one per line, `  - ...`, eliding past `limit` with a count."""
    lines = list(lines)
    shown = [f"  - {line}" for line in lines[:limit]]
    if len(lines) > limit:
        shown.append(f"  ... and {len(lines) - limit} more")
    return "\n".join(shown)


class TreeDepthError(InspectorError):
    """A tree nests deeper than the inspector walks, or contains itself (a cycle)."""
