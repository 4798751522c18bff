"""What the launcher opened stays warm: its trees stay in the working set while the server runs.

The trees named on the launcher's command line are one object shared by every session. A
session's working set reads such a tree once and lets go of it when the session ends; with
no other holder, the next session's first run read the files again (4-6 s for two 1.2 GB
checkpoints). Here one process-wide working set, the launcher's own, also holds each of them
from the moment a session first reads it (`pin`: no second read, the same buffers), so later
sessions start resident. It holds them within the shared budget like any working set: the
budget may still evict them, least recently used first, and the next run reads them again.
Trees opened or uploaded inside a session are not pinned: they go with their session.

Two more things keep the next run from paying again what the last one paid:
- `keep_warm` compiles, in a background thread, the weighted sum of the launcher's checkpoints
  that share one layout (what a session's form opens on: all of them, equal weights), so the
  first Run finds its kernel compiled (a fresh process otherwise lowers it to MLIR and reads
  it from the persistent cache, or compiles it: 0.3-1 s on this machine);
- a session that closes gives its last result's buffers, when the launcher's trees gave it,
  to the next session (`give_spare` / `take_spare`): that session's first run writes its
  output into them instead of zero-filling fresh memory (0.5-0.7 s for 1.2 GB here). One
  result is kept at most; a newer one replaces it; `release` (or `inspector.clear_caches()`)
  frees it.
"""

from __future__ import annotations

import threading

from inspector.core import caches
from inspector.core.working_set import WorkingSet

_LOCK = threading.Lock()
# id(tree) -> (name, tree); the launcher's working set; a closed session's result buffers
_STATE: dict = {"trees": {}, "working": None, "spare": []}


def keep_warm(loaded, precompile: bool = True) -> threading.Thread | None:
    """Marks the launcher's `LoadedTree`s: held by the launcher once a session reads them.
    With `precompile`, compiles the weighted sum of those sharing one layout in a thread
    (returned; None for fewer than two trees)."""
    with _LOCK:
        for t in loaded:
            _STATE["trees"][id(t.tree)] = (t.name, t.tree)
    if not precompile or len(loaded) < 2:
        return None
    thread = threading.Thread(target=_precompile, args=([t.tree for t in loaded],),
                              daemon=True, name="inspector-precompile")
    thread.start()
    return thread


def launched(tree) -> bool:
    """Whether `tree` is one of the launcher's trees."""
    return id(tree) in _STATE["trees"]


def _shared_layouts(trees) -> dict:
    """{layout: how many of `trees` have it} for layouts two or more lazy trees share."""
    import jax

    from inspector.core.lazy import LazyArray
    from inspector.core.packed import plan_layout

    counts: dict = {}
    for tree in trees:
        if not any(isinstance(x, LazyArray) for x in jax.tree.leaves(tree)):
            continue
        try:
            layout, _ = plan_layout(tree)
        except Exception:  # not packable (opaque leaves): nothing to warm
            continue
        counts[layout] = counts.get(layout, 0) + 1
    return {layout: k for layout, k in counts.items() if k >= 2}


def _precompile(trees: list) -> None:
    from inspector.core.weighted_sum import precompile_packed

    try:  # a warm-up only: a run compiles (and reports) whatever this did not
        for layout, k in _shared_layouts(trees).items():  # here: 106k tensors take a while
            precompile_packed(layout, k)
    except Exception:
        pass


def give_spare(buffers: list) -> None:
    """Keeps a closed session's result `buffers` (JAX arrays) for the next session's output;
    frees the spare they replace."""
    with _LOCK:
        old, _STATE["spare"] = _STATE["spare"], list(buffers)
    _delete(old)


def take_spare() -> list:
    """The spare result buffers (empty when there are none), handed over: the caller owns them."""
    with _LOCK:
        spare, _STATE["spare"] = _STATE["spare"], []
    return [b for b in spare if not b.is_deleted()]


def _delete(buffers: list) -> None:
    for b in buffers:
        if not b.is_deleted():
            b.delete()


def _release_spare() -> None:
    _delete(take_spare())


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
    _release_spare()
    if working is not None:
        working.close()


caches.register("launcher spare output", _release_spare, lambda: len(_STATE["spare"]))
