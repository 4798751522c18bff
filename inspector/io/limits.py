"""What one `load` may do beyond reading the file in place: inflate bytes, follow references.

A served inspector reads files strangers upload, so every reader asks two questions before it
promises a leaf:

- **Inflation.** Compressed members (npz, PyTorch zips), chunked or unallocated HDF5 datasets
  and orbax's zarr chunks turn few stored bytes into many. Each load gets a budget, by default
  `INFLATE_RATIO` times the bytes stored (at least `INFLATE_FLOOR`), and the declared inflated
  size of everything it would inflate is charged against it *before* anything is inflated
  (zip members never inflate past their declared size, so declared sizes bound the work).
- **References.** Files a checkpoint names (the shards of a safetensors index, the files inside
  an orbax folder) must resolve, links followed, inside the folder the load is confined to:
  `root` when given (the served app's root), else the checkpoint's own folder for names that
  climb out of it lexically (`..`, absolute paths).

`formats.load` sets the limits for the duration of one load (`applied`); readers read them with
`current()`, so a reader called on its own gets the defaults.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from inspector.io.file_error import file_error

INFLATE_RATIO = 32
"""Default budget: inflate at most this many times the bytes the file stores."""

INFLATE_FLOOR = 256 * 2**20
"""Default budget for small files: this many bytes, whatever the ratio gives."""


@dataclass(frozen=True)
class LoadLimits:
    """The limits of one load.

    Attributes:
        root: every file the checkpoint refers to must resolve (links followed) inside this
            folder; None confines only names that climb out lexically.
        max_inflate: bytes the load may inflate in total; None for the default
            (`INFLATE_RATIO` x stored bytes, at least `INFLATE_FLOOR`).
    """

    root: Path | None = None
    max_inflate: int | None = None


_DEFAULT = LoadLimits()
_CURRENT: contextvars.ContextVar[LoadLimits | None] = contextvars.ContextVar(
    "inspector_load_limits", default=None
)


def current() -> LoadLimits:
    """Returns the limits of the load in progress (the defaults outside `applied`)."""
    return _CURRENT.get() or _DEFAULT


@contextlib.contextmanager
def applied(limits: LoadLimits) -> Iterator[LoadLimits]:
    """Makes `limits` the current ones inside the block (one load)."""
    token = _CURRENT.set(limits)
    try:
        yield limits
    finally:
        _CURRENT.reset(token)


class InflateBudget:
    """Bytes one load may still inflate; `charge` refuses what would exceed it.

    >>> budget = InflateBudget("m.npz", stored=1000, limit=4096)
    >>> budget.charge(4000, "member 'w.npy'")
    >>> budget.charge(200, "member 'b.npy'")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    inspector.core.errors.LoadError: Cannot load m.npz: it would inflate 4200 bytes ...
    """

    def __init__(self, path: str | os.PathLike, stored: int, limit: int | None = None):
        self.path, self.stored = path, stored
        if limit is None:
            limit = current().max_inflate
        if limit is None:
            limit = max(INFLATE_RATIO * stored, INFLATE_FLOOR)
        self.limit, self.spent = limit, 0

    def charge(self, nbytes: int, what: str) -> None:
        """Adds `nbytes` that `what` would inflate; raises LoadError past the budget."""
        self.spent += nbytes
        if self.spent > self.limit:
            raise file_error(
                self.path,
                f"it would inflate {self.spent} bytes from {self.stored} stored (the last "
                f"{nbytes} for {what}), above the limit of {self.limit} bytes for one load",
                "It may be a decompression bomb. If you trust the file, raise the limit: "
                "inspector.load(path, max_inflate=BYTES).",
            )


def confined(reference: str | os.PathLike, folder: Path, path, what: str) -> Path:
    """Returns `folder / reference` resolved, after checking it stays where it may.

    Args:
        reference: a file name the checkpoint holds (a shard, a file inside orbax's folder).
        folder: the folder the name is relative to.
        path: the checkpoint, named in errors.
        what: what the reference is, for the message (`"shard 'x.safetensors'"`).

    Raises:
        LoadError: the name is absolute or climbs out of `folder` with `..`, or (with a
            `root` in the current limits) it resolves, links followed, outside the root.
    """
    reference = Path(reference)
    if reference.is_absolute() or ".." in reference.parts:
        raise file_error(path, f"{what} is outside the checkpoint's folder", "Fix the reference.")
    target = folder / reference
    root = current().root
    if root is not None:
        resolved = target.resolve()
        if not resolved.is_relative_to(Path(root).resolve()):
            raise file_error(
                path,
                f"{what} is a link to a file outside the folder this app may open",
                "Copy the file itself next to the checkpoint, inside that folder.",
            )
        return resolved
    return target
