"""The CPU's numba loops (the scan's pass, the timeline's pair pass) loaded ahead of their
first use: importing numba takes ~0.45 s here, loading a loop from numba's disk cache
~0.1-0.2 s, compiling it (the first time on a machine) ~1 s. The app calls
`prepare_in_background` when it builds its Health or Timeline view, so a first click does not
wait for them; the library's first `scan` or `timeline` pays for them itself."""

from __future__ import annotations

import threading

import numpy as np

_LOCK = threading.Lock()
_STARTED: list[threading.Thread] = []


def prepare_in_background() -> threading.Thread:
    """Starts (once per process) and returns the daemon thread that loads the loops. A
    failure is left for the scan or timeline that needs the loop to raise."""
    with _LOCK:
        if not _STARTED:
            _STARTED.append(threading.Thread(target=_warm, daemon=True,
                                             name="inspector-loops-prepare"))
            _STARTED[0].start()
        return _STARTED[0]


def _warm() -> None:
    from inspector.core.health import host_scan, host_step

    x = np.zeros(64, np.float32)
    read_only = x.copy()
    read_only.flags.writeable = False  # a checkpoint's map, a jax.Array's host view
    try:
        for y in (x, read_only):  # each is its own type to numba
            host_scan.host_rows(y, np.array([0, y.size], np.int64))
        host_step.host_steps([x, read_only], [False, True])
    except Exception:  # noqa: BLE001 -- the scan or timeline that needs the loop raises it
        pass
