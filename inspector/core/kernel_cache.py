"""The kernel cache: each call's kernel compiled ahead of time once per static key, kept in
a least-recently-used cache, and compiled several at once when a plan needs many.

A kernel's key is the call's static key (leaf shape, dtype, static index pattern, ...), the
device and the shardings; new weights or index starts are new arguments, never new keys.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np

from inspector.core import caches, compile_cache
from inspector.core.calls import Call
from inspector.core.compile_count import add_thread_compiles, thread_compiles
from inspector.core.errors import InspectorError

__all__ = ["cached_kernels", "clear_cache", "compile_missing", "compiled_kernel",
           "set_cache_limit"]

_CACHE: OrderedDict[tuple, jax.stages.Compiled] = OrderedDict()
_LOCK = threading.Lock()
_LIMIT = {"kernels": int(os.environ.get("INSPECTOR_KERNEL_CACHE_SIZE", "512"))}
_WORKERS = max(1, min(8, os.cpu_count() or 1))


def clear_cache() -> None:
    """Forgets every compiled kernel (the next call of each op compiles again)."""
    with _LOCK:
        _CACHE.clear()


def set_cache_limit(kernels: int) -> int:
    """Sets how many compiled kernels the cache keeps (least recently used go first); returns
    the previous limit. The default is 512, or `$INSPECTOR_KERNEL_CACHE_SIZE`.

    Raises:
        InspectorError: `kernels` is less than 1.
    """
    if not isinstance(kernels, int) or kernels < 1:
        raise InspectorError(f"The kernel cache needs room for at least 1 kernel, got {kernels!r}.")
    with _LOCK:
        previous, _LIMIT["kernels"] = _LIMIT["kernels"], kernels
        _evict()
    return previous


def cached_kernels() -> int:
    """Returns how many compiled kernels the cache holds now."""
    return len(_CACHE)


def _evict() -> None:
    while len(_CACHE) > _LIMIT["kernels"]:
        _CACHE.popitem(last=False)


def _abstract(arg, target):
    sharding = (jax.sharding.SingleDeviceSharding(target) if isinstance(target, jax.Device)
                else target)
    dtype = jax.dtypes.canonicalize_dtype(arg.dtype)  # what device_put will make of it
    return jax.ShapeDtypeStruct(np.shape(arg), dtype, sharding=sharding)


def _cache_key(call: Call, device) -> tuple:
    return call.key, device, call.shardings, call.out_shardings


def _lower(call: Call, device) -> jax.stages.Lowered:
    # at the first compile, not at import (the cache settings are JAX's, process-wide); here,
    # as the kernels compiled side by side (`compile_missing`) never pass through `_compile`
    compile_cache.enable()  # kernels compiled by an earlier process come from disk
    abstract = [_abstract(a, call.target(i, device)) for i, a in enumerate(call.args)]
    jitted = jax.jit(call.make(), donate_argnums=call.donate, keep_unused=True,
                     **({} if call.out_shardings is None
                        else {"out_shardings": call.out_shardings}))
    return jitted.lower(*abstract)


def _compile(call: Call, device) -> jax.stages.Compiled:
    return _lower(call, device).compile()


def compiled_kernel(call: Call, device) -> tuple[jax.stages.Compiled, bool]:
    """Returns `(the kernel of call on device, whether it was compiled now)`."""
    key = _cache_key(call, device)
    with _LOCK:
        compiled = _CACHE.get(key)
        if compiled is not None:
            _CACHE.move_to_end(key)
            return compiled, False
        compiled = _CACHE[key] = _compile(call, device)
        _evict()
        return compiled, True


def compile_missing(calls: list[Call], device) -> int:
    """Compiles the kernels of `calls` not yet cached, several at once; returns how many.

    Each kernel is traced and lowered in the calling thread (so JAX's thread-local settings,
    e.g. `jax.enable_x64` or a dtype-promotion context, apply as they would to `jax.jit`),
    then XLA compiles them side by side, outside the GIL, one per core (up to 8): a plain
    tree's kernels, three per leaf shape. Their compilations count for the calling thread
    (`thread_compiles`), as if it had made them. Fewer than two missing: none compiled here
    (`compiled_kernel` compiles it)."""
    missing: dict[tuple, Call] = {}
    with _LOCK:
        for call in calls:
            key = _cache_key(call, device)
            if key not in _CACHE:
                missing.setdefault(key, call)
    if len(missing) < 2 or _WORKERS < 2:
        return 0

    def work(lowered):
        n, seconds = thread_compiles()
        compiled = lowered.compile()
        n_after, seconds_after = thread_compiles()
        return compiled, n_after - n, seconds_after - seconds

    lowered = [_lower(call, device) for call in missing.values()]
    with ThreadPoolExecutor(min(_WORKERS, len(missing)), "inspector-compile") as pool:
        results = list(pool.map(work, lowered))
    with _LOCK:
        for key, (compiled, _, _) in zip(missing, results, strict=True):
            _CACHE[key] = compiled
        _evict()
    add_thread_compiles(sum(n for _, n, _ in results), sum(s for _, _, s in results))
    return len(missing)


caches.register("compiled kernels", clear_cache, cached_kernels)
