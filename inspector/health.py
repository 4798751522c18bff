"""`inspector.timeline`: the core's timeline (`inspector.core.health.timeline`) with
checkpoint paths opened by `inspector.load`, the one layer that sees both core and io."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from inspector.core.health.timeline import Timeline
from inspector.core.health.timeline import timeline as _timeline
from inspector.io import load

__all__ = ["Timeline", "timeline"]


def timeline(sources, labels: Sequence | None = None, device=None,
             progress: Callable[[int, int], None] | None = None) -> Timeline:
    """Returns the `Timeline` of a run: per leaf and step `l2`, `max_abs`, NaN/Inf count and,
    against the step before, relative change, cosine and bitwise changes.

    Args:
        sources: the checkpoints in step order (trees, packed trees or paths), or a folder of
            them (orbax `CheckpointManager` step folders, or files whose names carry a number:
            ordered by it). Each checkpoint is read once, leaf by leaf.
        labels: one per checkpoint (default: the step numbers in the names, else 0, 1, ...).
        device: where the reductions run.
        progress: `progress(done, total)`: leaf reads so far, of all.

    Raises:
        LoadError: a checkpoint cannot be read (the file is named), or the folder has none.
        ValueError: labels and checkpoints differ in number.

    >>> import numpy as np
    >>> t = timeline([{"w": np.ones(2, np.float32)}, {"w": np.ones(2, np.float32)}])
    >>> t.frozen(), t.labels
    (["['w']"], [0, 1])
    """
    return _timeline(sources, labels, device=device, progress=progress, load=load)
