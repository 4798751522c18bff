"""Plans: the compiled kernel calls an operation makes, compiled once per static signature.

An op (`weighted_sum`, `index`, ...) validates its inputs in Python, then returns a `Plan`: a
list of `Call`s, each naming a kernel by a static key (leaf shape, dtype, static index pattern,
device) plus the traced arguments (arrays, weights, index starts). Kernels are compiled ahead of
time and cached by key, so:

- a 10,000-leaf tree compiles one kernel per distinct leaf shape (or per dtype when packed),
  never one fusion per leaf;
- new weights or new index starts are new *arguments*, never new keys: no recompile;
- `run` can time compilation apart from execution.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np

from inspector.core import caches, compile_cache
from inspector.core.calls import Call, batch_call, carry, schedule
from inspector.core.errors import InspectorError
from inspector.core.lazy import LazyArray

__all__ = ["Call", "Plan", "cached_kernels", "clear_cache", "compile_count", "set_cache_limit",
           "thread_compiles"]

# The event JAX records around every XLA backend compilation (jax/_src/dispatch.py,
# `BACKEND_COMPILE_EVENT`, fired by `pxla._cached_compilation` for jit, AOT and eager ops alike).
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

_CACHE: OrderedDict[tuple, jax.stages.Compiled] = OrderedDict()
_LOCK = threading.Lock()
_IN_FLIGHT = 1  # kernels fed from lazy leaves that may run while the next leaf is read
_LIMIT = {"kernels": int(os.environ.get("INSPECTOR_KERNEL_CACHE_SIZE", "512"))}
_COMPILES = {"n": 0}
_COUNT_LOCK = threading.Lock()
_THREAD = threading.local()  # this thread's compiles and their seconds, for `run`'s figures


def _on_event_duration(event: str, duration: float, **_) -> None:
    if event != BACKEND_COMPILE_EVENT:
        return
    with _COUNT_LOCK:
        _COMPILES["n"] += 1
    _THREAD.n = getattr(_THREAD, "n", 0) + 1
    _THREAD.seconds = getattr(_THREAD, "seconds", 0.0) + duration


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


@dataclass
class Plan:
    """An op ready to compile and execute on one device, or SPMD over a mesh when its calls
    carry shardings (inputs sharded with `inspector.shard`)."""

    op: str
    device: jax.Device
    calls: list[Call]
    assemble: Callable[[list], object]
    bytes_read: int
    bytes_written: int
    _compiled: list = field(default_factory=list, repr=False)
    _steps: list | None = field(default=None, repr=False)  # (call indices, kernel), in order

    @property
    def mesh(self):
        """The `jax.sharding.Mesh` the op runs on (SPMD), or None for one device."""
        for call in self.calls:
            for sharding in call.shardings or ():
                if isinstance(sharding, jax.sharding.NamedSharding):
                    return sharding.mesh
        return None

    def compile(self) -> tuple[float, int]:
        """Compiles every kernel not yet cached; returns `(seconds, number compiled now)`.

        Independent calls that share a key run as one kernel over a batch of them (see
        `calls.schedule`): a tree of many leaves makes a few dispatches, not one per leaf."""
        start = time.perf_counter()
        kernels = [(step, self.calls[step[0]] if len(step) == 1
                    else batch_call([self.calls[i] for i in step]))
                   for step in schedule(self.calls)]
        n_new = _compile_missing([call for _, call in kernels], self.device)
        self._compiled = [None] * len(self.calls)
        self._steps = []
        for step, call in kernels:
            compiled, new = _compiled_kernel(call, self.device)
            if len(step) == 1:
                self._compiled[step[0]] = compiled
            n_new += new
            self._steps.append((step, compiled))
        return (time.perf_counter() - start if n_new else 0.0), n_new

    @property
    def dispatches(self) -> int:
        """Kernel calls per execution (batches of calls count once)."""
        if self._steps is None:
            self.compile()
        return len(self._steps)

    @property
    def compiled(self) -> list:
        """The compiled kernel of each call alone, in order (for running calls one by one)."""
        if self._steps is None:
            self.compile()
        for i, compiled in enumerate(self._compiled):
            if compiled is None:  # the call runs in a batch; compiled alone when asked
                self._compiled[i] = _compiled_kernel(self.calls[i], self.device)[0]
        return self._compiled

    def place(self) -> float:
        """Moves array arguments onto the device or mesh (lazy leaves wait); returns the seconds."""
        start = time.perf_counter()
        unique = {}
        for c in self.calls:
            targets = c.shardings or (self.device,) * len(c.args)
            for a, target in zip(c.args, targets, strict=True):
                if _needs_move(a, target):
                    unique[id(a), target] = (a, target)
        # One transfer of each distinct array (the weights are shared by every call)
        values = list(unique.values())
        moved = dict(zip(unique, _put(values), strict=True))
        for call in self.calls:
            targets = call.shardings or (self.device,) * len(call.args)
            call.args = [moved.get((id(a), t), a)
                         for a, t in zip(call.args, targets, strict=True)]
        jax.block_until_ready(list(moved.values()))
        return time.perf_counter() - start

    def execute(self):
        """Runs every call once and returns the assembled result (not yet blocked on)."""
        if self._steps is None:
            self.compile()
        outputs: list = [None] * len(self.calls)
        streaming: list = []  # outputs of calls fed from lazy leaves, still maybe computing
        head = None
        for step, compiled in self._steps:
            if len(step) > 1:  # a batch of independent calls of one key
                flat = [a for i in step for a in self.calls[i].args]
                for i, out in zip(step, compiled(*flat), strict=True):
                    outputs[i] = out
                    if self.calls[i].carry:
                        carry(self.calls[i], out)
                continue
            i = step[0]
            call = self.calls[i]
            lazy = any(isinstance(a, LazyArray) for a in call.args)
            if lazy and len(streaming) >= _IN_FLIGHT:
                # Dispatch is asynchronous: without this wait the loop would read leaf after
                # leaf while earlier kernels still hold theirs, and memory would not stay bounded.
                jax.block_until_ready(streaming.pop(0))
            # may_alias: a memory-mapped leaf 64-byte aligned in its file is used in place on
            # the CPU (no copy; kernels never write their inputs unless donated)
            args = [
                jax.device_put(np.asarray(a), call.target(j, self.device), may_alias=True)
                if isinstance(a, LazyArray) else a
                for j, a in enumerate(call.args)
            ]
            if call.chain:
                args[0] = outputs[i - 1]
            else:
                head = call
            out = compiled(*args)
            if lazy:
                streaming.append(out)
            if head is not None and head.carry:
                carry(head, out)
            outputs[i] = out
        return self.assemble(outputs)

    def cost(self) -> dict[str, float]:
        """XLA's cost analysis summed over the calls (`flops`, `bytes accessed`), if given."""
        if self._steps is None:
            self.compile()
        total: dict[str, float] = {}
        for _, compiled in self._steps:
            try:
                analysis = compiled.cost_analysis()
            except Exception:  # some backends give none; the figure is optional
                return {}
            if isinstance(analysis, list):
                analysis = analysis[0] if analysis else {}
            for name in ("flops", "bytes accessed"):
                if name in (analysis or {}):
                    total[name] = total.get(name, 0.0) + float(analysis[name])
        return total


_MANY = 256
"""From this many NumPy arrays bound for single devices, `_put` sends them through compiled
copies (fewer go through `jax.device_put`: no copy kernels to compile for a small tree)."""


def _put(values: list[tuple]) -> list:
    """`jax.device_put` of each `(array, target)`, fast for many NumPy arrays.

    `device_put` costs 50-120 us of Python per array here (1-2.5 s for a 10,000-leaf plain
    tree of two models), while a compiled call takes its NumPy arguments in C++: NumPy arrays
    of one shape and dtype bound for one device go 32 (then 4) at a time through a compiled
    identity (two small compiles per shape; the outputs are copies, never the caller's
    memory); the rest go through `device_put`."""
    out: list = [None] * len(values)
    groups: dict[tuple, list[int]] = {}
    host = [n for n, (a, t) in enumerate(values)
            if type(a) is np.ndarray and isinstance(t, jax.Device)]
    if len(host) >= _MANY:
        for n in host:
            a, target = values[n]
            groups.setdefault((a.shape, a.dtype, target), []).append(n)
    copies = []  # (target, call, value indices)
    for (shape, dtype, target), members in groups.items():
        start = 0
        for size in (32, 4):
            while len(members) - start >= size:
                chunk = members[start:start + size]
                copies.append((target, Call(("copy", size, shape, str(dtype)),
                                            lambda: _identity, [values[n][0] for n in chunk]),
                               chunk))
                start += size
    for target in {target for target, _, _ in copies}:
        _compile_missing([call for t, call, _ in copies if t == target], target)
    for target, call, chunk in copies:
        compiled, _ = _compiled_kernel(call, target)
        for n, array in zip(chunk, compiled(*call.args), strict=True):
            out[n] = array
    rest = [n for n in range(len(values)) if out[n] is None]
    placed = jax.device_put([values[n][0] for n in rest], [values[n][1] for n in rest])
    for n, array in zip(rest, placed, strict=True):
        out[n] = array
    return out


def _identity(*xs):
    return tuple(jnp.copy(x) for x in xs)


def _needs_move(arg, target) -> bool:
    if isinstance(arg, LazyArray):
        return False  # read and placed when its call runs, so checkpoints stream
    if not isinstance(arg, jax.Array):
        return True
    if isinstance(target, jax.Device):
        return arg.sharding.device_set != {target}
    return not arg.sharding.is_equivalent_to(target, arg.ndim)


def _abstract(arg, target):
    sharding = (jax.sharding.SingleDeviceSharding(target) if isinstance(target, jax.Device)
                else target)
    dtype = jax.dtypes.canonicalize_dtype(arg.dtype)  # what device_put will make of it
    return jax.ShapeDtypeStruct(np.shape(arg), dtype, sharding=sharding)


def _cache_key(call: Call, device) -> tuple:
    return call.key, device, call.shardings, call.out_shardings


def _lower(call: Call, device) -> jax.stages.Lowered:
    # at the first compile, not at import (the cache settings are JAX's, process-wide); here,
    # as the kernels compiled side by side (`_compile_missing`) never pass through `_compile`
    compile_cache.enable()  # kernels compiled by an earlier process come from disk
    abstract = [_abstract(a, call.target(i, device)) for i, a in enumerate(call.args)]
    jitted = jax.jit(call.make(), donate_argnums=call.donate, keep_unused=True,
                     **({} if call.out_shardings is None
                        else {"out_shardings": call.out_shardings}))
    return jitted.lower(*abstract)


def _compile(call: Call, device) -> jax.stages.Compiled:
    return _lower(call, device).compile()


def _compiled_kernel(call: Call, device) -> tuple[jax.stages.Compiled, bool]:
    key = _cache_key(call, device)
    with _LOCK:
        compiled = _CACHE.get(key)
        if compiled is not None:
            _CACHE.move_to_end(key)
            return compiled, False
        compiled = _CACHE[key] = _compile(call, device)
        _evict()
        return compiled, True


_WORKERS = max(1, min(8, os.cpu_count() or 1))


def _compile_missing(calls: list[Call], device) -> int:
    """Compiles the kernels of `calls` not yet cached, several at once; returns how many.

    Each kernel is traced and lowered in the calling thread (so JAX's thread-local settings,
    e.g. `jax.enable_x64` or a dtype-promotion context, apply as they would to `jax.jit`),
    then XLA compiles them side by side, outside the GIL, one per core (up to 8): a plain
    tree's kernels, three per leaf shape. Their compilations count for the calling thread
    (`thread_compiles`), as if it had made them."""
    missing: dict[tuple, Call] = {}
    with _LOCK:
        for call in calls:
            key = _cache_key(call, device)
            if key not in _CACHE:
                missing.setdefault(key, call)
    if len(missing) < 2 or _WORKERS < 2:
        return 0  # `_compiled_kernel` compiles it

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
    _THREAD.n = getattr(_THREAD, "n", 0) + sum(n for _, n, _ in results)
    _THREAD.seconds = getattr(_THREAD, "seconds", 0.0) + sum(s for _, _, s in results)
    return len(missing)


caches.register("compiled kernels", clear_cache, cached_kernels)
