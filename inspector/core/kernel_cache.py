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

from inspector.core import caches, compile_cache, executable_cache
from inspector.core.calls import Call
from inspector.core.compile_count import add_thread_compiles, thread_compiles
from inspector.core.errors import InspectorError

__all__ = ["cached_kernels", "clear_cache", "compile_missing", "compiled_kernel",
           "kernel_counts", "load_stored", "set_cache_limit"]

_CACHE: OrderedDict[tuple, jax.stages.Compiled] = OrderedDict()
_LOCK = threading.Lock()
_LIMIT = {"kernels": int(os.environ.get("INSPECTOR_KERNEL_CACHE_SIZE", "512"))}
_WORKERS = max(1, min(8, os.cpu_count() or 1))
_COUNTS = {"lowered": 0, "loaded": 0}  # this process's, for tests and `Plan.compile`


def kernel_counts() -> dict[str, int]:
    """How many kernels this process has lowered to MLIR (traced, to compile them or to find
    them in JAX's cache) and loaded from the inspector's own files (`executable_cache`)."""
    return dict(_COUNTS)


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


def _abstracts(call: Call, device) -> list:
    return [_abstract(a, call.target(i, device)) for i, a in enumerate(call.args)]


def _from_disk(call: Call, device) -> tuple[list | None, str | None,
                                             jax.stages.Compiled | None]:
    """`(abstract args, the call's key text on disk, its stored kernel)`, each None where
    not found (all three where the call is not `storable`: nothing computed)."""
    # at the first compile, not at import (the cache settings are JAX's, process-wide); here,
    # as the kernels compiled side by side (`compile_missing`) never pass through `_compile`
    compile_cache.enable()  # kernels compiled by an earlier process come from disk
    if not executable_cache.storable(call, device):
        return None, None, None
    abstract = _abstracts(call, device)
    text = executable_cache.key_text(call, device, abstract)
    compiled = None if text is None else executable_cache.load(text, device)
    if compiled is not None:
        _COUNTS["loaded"] += 1
    return abstract, text, compiled


def _lower(call: Call, device, abstract: list | None = None) -> jax.stages.Lowered:
    compile_cache.enable()
    if abstract is None:
        abstract = _abstracts(call, device)
    jitted = jax.jit(call.make(), donate_argnums=call.donate, keep_unused=True,
                     **({} if call.out_shardings is None
                        else {"out_shardings": call.out_shardings}),
                     **({"compiler_options": dict(call.options)} if call.options else {}))
    _COUNTS["lowered"] += 1
    return jitted.lower(*abstract)


def _compile(call: Call, device) -> tuple[jax.stages.Compiled, bool]:
    """`(the kernel, whether it was compiled now)`: from the inspector's files if stored
    there, else lowered and compiled (through JAX's cache), then stored."""
    abstract, text, compiled = _from_disk(call, device)
    if compiled is not None:
        return compiled, False
    lowered = _lower(call, device, abstract)
    if text is None:
        return lowered.compile(), True
    return _compile_to_store(lowered, text), True


def _compile_to_store(lowered: jax.stages.Lowered, text: str) -> jax.stages.Compiled:
    """Compiles `lowered` afresh (not from JAX's cache: see `executable_cache`) and stores it."""
    hits = executable_cache.jax_hits()
    with executable_cache.fresh():
        compiled = lowered.compile()
    if executable_cache.jax_hits() == hits:
        executable_cache.store(text, compiled)
    return compiled


def compiled_kernel(call: Call, device) -> tuple[jax.stages.Compiled, bool]:
    """Returns `(the kernel of call on device, whether it was compiled now)` (a kernel
    loaded from the inspector's files was not)."""
    key = _cache_key(call, device)
    with _LOCK:
        compiled = _CACHE.get(key)
        if compiled is not None:
            _CACHE.move_to_end(key)
            return compiled, False
        if call.host:  # a Python function run on the host: nothing to compile
            compiled, new = call.make(), False
        else:
            compiled, new = _compile(call, device)
        _CACHE[key] = compiled
        _evict()
        return compiled, new


def _missing(calls: list[Call], device) -> dict[tuple, Call]:
    missing: dict[tuple, Call] = {}
    with _LOCK:
        for call in calls:
            key = _cache_key(call, device)
            if key not in _CACHE and not call.host:  # host calls: `compiled_kernel` makes them
                missing.setdefault(key, call)
    return missing


def _load_stored(missing: dict[tuple, Call], device) -> dict[tuple, tuple]:
    """Loads the stored kernels of `missing` into the cache; returns the others, each with
    its abstract arguments and key text (for `_lower` and `executable_cache.store`)."""
    found, lowering = {}, {}
    for key, call in missing.items():
        abstract, text, compiled = _from_disk(call, device)
        if compiled is None:
            lowering[key] = (abstract, text)
        else:
            found[key] = compiled
    if found:
        with _LOCK:
            _CACHE.update(found)
            _evict()
    return lowering


def load_stored(calls: list[Call], device) -> int:
    """Loads the kernels of `calls` that an earlier process stored (`executable_cache`) and
    this one has not yet; returns how many. Nothing is traced, lowered or compiled: cheap
    enough (a few ms per kernel) to run before a plan's reads start, which it would otherwise
    contend with (loading maps executable memory while the reads fault pages in)."""
    if executable_cache.folder() is None:
        return 0
    missing = _missing(calls, device)
    return len(missing) - len(_load_stored(missing, device))


def compile_missing(calls: list[Call], device) -> int:
    """Compiles the kernels of `calls` not yet cached, several at once; returns how many.

    Each kernel is traced and lowered in the calling thread (so JAX's thread-local settings,
    e.g. `jax.enable_x64` or a dtype-promotion context, apply as they would to `jax.jit`),
    then XLA compiles them side by side, outside the GIL, one per core (up to 8): a plain
    tree's kernels, three per leaf shape. Their compilations count for the calling thread
    (`thread_compiles`), as if it had made them. Fewer than two missing: none compiled here
    (`compiled_kernel` compiles it). Kernels stored by an earlier process
    (`executable_cache`) are loaded first, neither lowered nor counted."""
    missing = _missing(calls, device)
    lowering = _load_stored(missing, device)
    missing = {key: missing[key] for key in lowering}
    if len(missing) < 2 or _WORKERS < 2:
        return 0

    def work(job):
        lowered, text = job
        n, seconds = thread_compiles()
        compiled = lowered.compile() if text is None else _compile_to_store(lowered, text)
        n_after, seconds_after = thread_compiles()
        return compiled, n_after - n, seconds_after - seconds

    jobs = [(_lower(call, device, lowering[key][0]), lowering[key][1])
            for key, call in missing.items()]
    with ThreadPoolExecutor(min(_WORKERS, len(missing)), "inspector-compile") as pool:
        results = list(pool.map(work, jobs))
    with _LOCK:
        for key, (compiled, _, _) in zip(missing, results, strict=True):
            _CACHE[key] = compiled
        _evict()
    add_thread_compiles(sum(n for _, n, _ in results), sum(s for _, _, s in results))
    return len(missing)


caches.register("compiled kernels", clear_cache, cached_kernels)
