"""JAX's persistent compilation cache, on by default: a new process serves its first-run
kernels from disk instead of compiling them again (0.1-0.3 s per kernel here, more for many).

The cache lives in `$INSPECTOR_COMPILATION_CACHE` if set to a folder, else under the user's
cache folder (`$XDG_CACHE_HOME` or `~/.cache`) as `pytree-inspector/jax`. Set
`INSPECTOR_COMPILATION_CACHE=0` (or `off`) to leave JAX's settings alone; a cache folder the
program already gave JAX (`jax_compilation_cache_dir`) is kept as it is. JAX's thresholds are
lowered so the inspector's small kernels are stored too (JAX by default keeps only compiles
that took over a second).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import jax

_DONE = {"folder": None, "checked": False}
_LOCK = threading.Lock()
OFF = {"0", "off", "false", "no", ""}


def folder() -> Path | None:
    """The folder the inspector puts JAX's compilation cache in, or None when turned off."""
    setting = os.environ.get("INSPECTOR_COMPILATION_CACHE")
    if setting is not None:
        return None if setting.strip().lower() in OFF else Path(setting).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytree-inspector" / "jax"


def enable() -> Path | None:
    """Points JAX's persistent compilation cache at `folder()` once per process (before the
    first compile); returns the folder in use, or None. Cheap after the first call."""
    if _DONE["checked"]:
        return _DONE["folder"]
    with _LOCK:
        if _DONE["checked"]:
            return _DONE["folder"]
        _DONE["checked"] = True
        given = jax.config.jax_compilation_cache_dir
        if given:
            _DONE["folder"] = Path(given)
            return _DONE["folder"]
        where = folder()
        if where is None:
            return None
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None  # a read-only home: compile as before
        jax.config.update("jax_compilation_cache_dir", os.fspath(where))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        _DONE["folder"] = where
        return where
