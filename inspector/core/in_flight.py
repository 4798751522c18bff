"""Runs in flight, and background work that waits for them: the app's runner marks each
execution (`executing`), and the working set's background copies of mapped checkpoints
(`WorkingSet.settle`) wait, before each piece, until none runs (`wait_quiet`), as they would
take its memory bandwidth and cores (a weight change during the copies took up to 1.87 s
against 0.3-0.6 s: docs/app-first-run.md)."""

from __future__ import annotations

import contextlib
import threading

QUIET_WAIT = 5.0
"""The longest `wait_quiet` waits: runs back to back still let background work go on, a
step at a time."""
_RUNS = {"executing": 0}
_QUIET = threading.Condition()


@contextlib.contextmanager
def executing():
    """Marks a run's execution (any thread; they may overlap)."""
    with _QUIET:
        _RUNS["executing"] += 1
    try:
        yield
    finally:
        with _QUIET:
            _RUNS["executing"] -= 1
            _QUIET.notify_all()


def wait_quiet() -> None:
    """Returns once no run executes (or after `QUIET_WAIT` seconds)."""
    with _QUIET:
        _QUIET.wait_for(lambda: _RUNS["executing"] == 0, timeout=QUIET_WAIT)
