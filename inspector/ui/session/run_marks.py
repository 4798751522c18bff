"""Timing marks of a run as the served app handles it, for profiling (off by default).

With `INSPECTOR_RUN_MARKS=/some/file` in the server's environment, each step of a run (the
Run event's arrival, the work's start in its thread, the read, planning, execution, the
result's index, the page's update) appends one line `<unix time>\t<session>\t<label>` to that
file; `benchmarks/bench_app.py --marks` sets it and prints the steps between the browser's
click and the status it saw. Unset, `mark` is one dictionary lookup.
"""

from __future__ import annotations

import os
import threading
import time

_LOCK = threading.Lock()


def enabled() -> bool:
    return bool(os.environ.get("INSPECTOR_RUN_MARKS"))


def mark(label: str, session=None) -> None:
    """Appends `label` with the time now (and `session`'s id) to the marks file, if one is set."""
    path = os.environ.get("INSPECTOR_RUN_MARKS")
    if not path:
        return
    line = f"{time.time():.6f}\t{id(session) if session is not None else 0}\t{label}\n"
    with _LOCK, open(path, "a") as f:
        f.write(line)
