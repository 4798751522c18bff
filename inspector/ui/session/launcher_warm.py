"""What the launcher opened stays warm: its trees stay in the working set while the server runs.

The trees named on the launcher's command line are one object shared by every session. A
session's working set reads such a tree once and lets go of it when the session ends; with
no other holder, the next session's first run read the files again (4-6 s for two 1.2 GB
checkpoints). Here one process-wide working set, the launcher's own, also holds each of them
from the moment a session first reads it (`pin`: no second read, the same buffers), so later
sessions start resident. It holds them within the shared budget like any working set: the
budget may still evict them, least recently used first, and the next run reads them again.
Trees opened or uploaded inside a session are not pinned: they go with their session.
"""

from __future__ import annotations

import threading

from inspector.core.working_set import WorkingSet

_LOCK = threading.Lock()
_STATE: dict = {"trees": {}, "working": None}  # id(tree) -> (name, tree); the launcher's set


def keep_warm(loaded) -> None:
    """Marks the launcher's `LoadedTree`s: held by the launcher once a session reads them."""
    with _LOCK:
        for t in loaded:
            _STATE["trees"][id(t.tree)] = (t.name, t.tree)


def pin(held: dict, trees: dict, device) -> None:
    """After a session's working set `held` `{name: packed}` read `trees` `{name: tree}` onto
    `device`: the launcher's trees among them are held by the launcher too (already read,
    so this reads nothing)."""
    with _LOCK:
        mine = {_STATE["trees"][id(tree)][0]: tree for name, tree in trees.items()
                if id(tree) in _STATE["trees"] and name in held}
        if not mine:
            return
        if _STATE["working"] is None:
            _STATE["working"] = WorkingSet()
        working = _STATE["working"]
    working.hold(mine, device)


def held_names() -> list[str]:
    """The launcher's trees it holds now (most recently used first)."""
    working = _STATE["working"]
    return [] if working is None else [h.name for h in working.holdings()]


def release() -> None:
    """Lets go of everything the launcher holds (the server stopping; tests)."""
    with _LOCK:
        working, _STATE["working"] = _STATE["working"], None
        _STATE["trees"].clear()
    if working is not None:
        working.close()
