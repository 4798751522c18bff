"""Host-to-device transfer: a plan's array arguments moved onto their device or mesh, many
NumPy arrays at once through compiled copies rather than one `jax.device_put` each."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core.calls import Call
from inspector.core.kernel_cache import compile_missing, compiled_kernel
from inspector.core.lazy import LazyArray
from inspector.core.mapped_groups import MappedGroup

__all__ = ["MANY", "place", "put"]

MANY = 256
"""From this many NumPy arrays bound for single devices, `put` sends them through compiled
copies (fewer go through `jax.device_put`: no copy kernels to compile for a small tree)."""


def place(calls: list[Call], device) -> float:
    """Moves the calls' array arguments onto `device` or their shardings (lazy leaves wait);
    returns the seconds. Each distinct array moves once (the weights are shared by every call)."""
    start = time.perf_counter()
    unique = {}
    for c in calls:
        targets = c.shardings or (device,) * len(c.args)
        for a, target in zip(c.args, targets, strict=True):
            if c.host and isinstance(a, MappedGroup):
                continue  # a host kernel reads it as it is (`Call.host`)
            if _needs_move(a, target):
                unique[id(a), target] = (a, target)
    moved = dict(zip(unique, put(list(unique.values())), strict=True))
    for call in calls:
        targets = call.shardings or (device,) * len(call.args)
        call.args = [moved.get((id(a), t), a) for a, t in zip(call.args, targets, strict=True)]
    jax.block_until_ready(list(moved.values()))
    return time.perf_counter() - start


def put(values: list[tuple]) -> list:
    """`jax.device_put` of each `(array, target)`, fast for many NumPy arrays.

    `device_put` costs 50-120 us of Python per array here (1-2.5 s for a 10,000-leaf plain
    tree of two models), while a compiled call takes its NumPy arguments in C++: NumPy arrays
    of one shape and dtype bound for one device go 32 (then 4) at a time through a compiled
    identity (two small compiles per shape; the outputs are copies, never the caller's
    memory); the rest go through `device_put`."""
    out: list = [None] * len(values)
    for n, (a, target) in enumerate(values):
        if isinstance(a, MappedGroup):  # its packed copy, made once and kept
            out[n] = a.placed(target) if isinstance(target, jax.Device) else \
                jax.device_put(a.host(), target)
    groups: dict[tuple, list[int]] = {}
    host = [n for n, (a, t) in enumerate(values)
            if type(a) is np.ndarray and isinstance(t, jax.Device)]
    if len(host) >= MANY:
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
        compile_missing([call for t, call, _ in copies if t == target], target)
    for target, call, chunk in copies:
        compiled, _ = compiled_kernel(call, target)
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
