"""Compile counters: how many XLA compilations the process and each thread have made.

Counted from JAX's own backend-compile events, so they include every compilation an op causes
(its kernels, and e.g. the zero-filled output buffer of a packed op), not only the inspector's
cached kernels (`kernel_cache`). `run` reads the calling thread's figures to time compilation
apart from execution.
"""

from __future__ import annotations

import threading

import jax.monitoring

__all__ = ["add_thread_compiles", "compile_count", "thread_compiles"]

# The event JAX records around every XLA backend compilation (jax/_src/dispatch.py,
# `BACKEND_COMPILE_EVENT`, fired by `pxla._cached_compilation` for jit, AOT and eager ops alike).
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

_COMPILES = {"n": 0}
_COUNT_LOCK = threading.Lock()
_THREAD = threading.local()  # this thread's compiles and their seconds, for `run`'s figures


def _on_event_duration(event: str, duration: float, **_) -> None:
    if event != BACKEND_COMPILE_EVENT:
        return
    with _COUNT_LOCK:
        _COMPILES["n"] += 1
    add_thread_compiles(1, duration)


jax.monitoring.register_event_duration_secs_listener(_on_event_duration)


def compile_count() -> int:
    """Returns how many XLA compilations this process has made since the inspector was imported.

    Counted from JAX's own backend-compile events, so it includes every compilation an op
    causes (its kernels, and e.g. the zero-filled output buffer of a packed op), not only the
    inspector's cached kernels; it also counts what other code in the process compiles. Take
    the difference around a call to see what that call compiled.
    """
    with _COUNT_LOCK:
        return _COMPILES["n"]


def thread_compiles() -> tuple[int, float]:
    """Returns `(compilations, their seconds)` made so far by the calling thread."""
    return getattr(_THREAD, "n", 0), getattr(_THREAD, "seconds", 0.0)


def add_thread_compiles(n: int, seconds: float) -> None:
    """Counts `n` compilations taking `seconds` for the calling thread (compilations it had
    made on worker threads count as its own)."""
    _THREAD.n = getattr(_THREAD, "n", 0) + n
    _THREAD.seconds = getattr(_THREAD, "seconds", 0.0) + seconds
