"""One registry of the inspector's process-wide caches, so `clear_caches()` empties them all.

Each module that keeps a cache registers it here when it is imported: a name, how to empty it
and how many entries it holds. Emptying a cache never changes a result, only what the next
call has to redo (compile a kernel, plan an index, read a checkpoint onto its device again).
JAX's own caches are JAX's: `jax.clear_caches()` empties those.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Cache:
    """One registered cache: `clear()` empties it, `size()` counts its entries."""

    name: str
    clear: Callable[[], None]
    size: Callable[[], int]


_CACHES: dict[str, Cache] = {}
_LOCK = threading.Lock()


def register(name: str, clear: Callable[[], None], size: Callable[[], int]) -> None:
    """Registers (or replaces, on a module's reload) the cache called `name`."""
    with _LOCK:
        _CACHES[name] = Cache(name, clear, size)


def register_mapping(name: str, mapping, lock=None) -> None:
    """Registers a dict-like cache (`clear()` and `len()`), emptied under `lock` if given."""

    def clear() -> None:
        if lock is None:
            mapping.clear()
            return
        with lock:
            mapping.clear()

    register(name, clear, lambda: len(mapping))


def register_function(name: str, function) -> None:
    """Registers a `functools.cache` / `lru_cache` function's cache."""
    register(name, function.cache_clear, lambda: function.cache_info().currsize)


def sizes() -> dict[str, int]:
    """Returns how many entries each registered cache holds now, by name."""
    with _LOCK:
        caches = list(_CACHES.values())
    return {cache.name: cache.size() for cache in caches}


def clear_caches() -> dict[str, int]:
    """Empties every cache of the inspector's modules imported so far: compiled kernels,
    index plans, output fills, held working-set trees, tree indexes, ... Returns how many
    entries each held before, by name.

    >>> import inspector, numpy as np
    >>> _ = inspector.weighted_sum([{"w": np.ones(2)}, {"w": np.ones(2)}], [1, 2])
    >>> before = inspector.clear_caches()
    >>> before["compiled kernels"] > 0, sum(sizes().values())
    (True, 0)
    """
    with _LOCK:
        caches = list(_CACHES.values())
    before = {}
    for cache in caches:
        before[cache.name] = cache.size()
        cache.clear()
    return before
