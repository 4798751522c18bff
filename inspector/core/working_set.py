"""The working set: loaded trees read once and held packed on a device, within a memory budget.

A checkpoint opens lazily (shapes only). The first op that needs its data asks the working set,
which reads it once, leaf by leaf through a small staging buffer (a bounded amount in flight),
straight into one device buffer per dtype (`PackedTree`, leaves are views). Later ops, weight
changes, statistics and exports reuse those buffers: a weight change costs one kernel, not a
re-read of the files. Past the budget, the least recently used trees are dropped back to their
lazy form (the caller still holds the lazy tree; the next use reads it again), and a request
that cannot fit even alone gets `None`, so the caller streams instead of running out of memory.

The budget is shared by every working set in the process (one per app session): a server with
ten sessions holds at most one budget's worth, evicting across sessions, oldest use first.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core import memory
from inspector.core.devices import device_name, resolve_device
from inspector.core.lazy import read_ahead
from inspector.core.packed import PackedTree, plan_layout

DEFAULT_FRACTION = 0.6
"""The default budget: this fraction of the memory free (on the device) when first needed."""

_STAGING_BYTES = 64 * 2**20  # host bytes in flight while a tree is read onto its device

_LOCK = threading.RLock()
_SETS: weakref.WeakSet[WorkingSet] = weakref.WeakSet()
_BUDGET: dict[str, int | None] = {"bytes": None}


def budget() -> int:
    """Returns the process-wide budget in bytes (default: a fraction of free memory now)."""
    with _LOCK:
        if _BUDGET["bytes"] is None:
            free = memory.device_available(resolve_device(None))
            _BUDGET["bytes"] = int(DEFAULT_FRACTION * (free + held_bytes()))
        return _BUDGET["bytes"]


def set_budget(nbytes: int | None) -> None:
    """Sets the process-wide budget in bytes (None: back to the default); evicts to fit it."""
    with _LOCK:
        _BUDGET["bytes"] = None if nbytes is None else int(nbytes)
        _evict_until(budget(), keep=set())


def held_bytes() -> int:
    """Returns the bytes every working set in the process holds now."""
    with _LOCK:
        return sum(h.nbytes for ws in list(_SETS) for h in ws._entries.values())


@dataclass(frozen=True)
class Holding:
    """One tree held by a working set.

    Attributes:
        name: the name the session knows the tree by.
        device: where its buffers live (`cpu:0`, `cuda:0`).
        where: "host" (a CPU device: the buffers are host RAM) or "device".
        nbytes: the bytes its buffers take.
        last_used: `time.monotonic()` of its last use (eviction takes the oldest first).
    """

    name: str
    device: str
    where: str
    nbytes: int
    last_used: float


class _Entry:
    __slots__ = ("source", "packed", "device", "nbytes", "last_used")

    def __init__(self, source, packed: PackedTree, device, nbytes: int):
        self.source = weakref.ref(source) if _weakrefable(source) else (lambda s=source: s)
        self.packed = packed
        self.device = device
        self.nbytes = nbytes
        self.last_used = time.monotonic()


def _weakrefable(x) -> bool:
    try:
        weakref.ref(x)
        return True
    except TypeError:
        return False


class WorkingSet:
    """The trees one session (or one script) holds packed on devices, by name.

    >>> ws = WorkingSet()
    >>> tree = {"w": np.arange(4, dtype=np.float32)}
    >>> held = ws.hold({"a": tree})
    >>> held["a"].unpack()["w"].tolist(), [h.name for h in ws.holdings()]
    ([0.0, 1.0, 2.0, 3.0], ['a'])
    >>> ws.hold({"a": tree})["a"] is held["a"]   # read once, reused
    True
    >>> ws.close(); ws.holdings()
    []
    """

    def __init__(self):
        self._entries: dict[str, _Entry] = {}
        with _LOCK:
            _SETS.add(self)

    def hold(self, trees: dict, device=None, extra_bytes: int = 0) -> dict | None:
        """Returns `{name: PackedTree on device}` for `trees`, reading each only if not held.

        All of them are held at once (an op needs its inputs together), plus `extra_bytes`
        (the op's output) within the budget: other trees, least recently used first and in any
        session, are dropped to make room. If they cannot fit even alone, nothing is read and
        None comes back (run the op streamed instead).

        Args:
            trees: name -> pytree (lazy checkpoint leaves, arrays) or packed tree.
            device: where to hold them (a `jax.Device`, a name, or None for the default).
            extra_bytes: bytes the caller is about to allocate beside them.
        """
        device = resolve_device(device)
        with _LOCK:
            needed = extra_bytes
            fresh = {}
            for name, tree in trees.items():
                entry = self._entries.get(name)
                if entry is not None and entry.source() is tree and entry.device == device:
                    continue
                fresh[name] = tree
                needed += _nbytes(tree)
            held_here = sum(self._entries[n].nbytes for n in trees if n in self._entries
                            and n not in fresh)
            if held_here + needed > budget():
                return None
            for name in fresh:  # stale copies (another device, a reloaded tree)
                self._entries.pop(name, None)
            _evict_until(budget() - needed, keep={(id(self), n) for n in trees})
            for name, tree in fresh.items():
                packed = read_packed(tree, device)
                self._entries[name] = _Entry(tree, packed, device, packed.nbytes)
            now = time.monotonic()
            for name in trees:
                self._entries[name].last_used = now
            return {name: self._entries[name].packed for name in trees}

    def get(self, name: str) -> PackedTree | None:
        """Returns the packed tree held under `name` (marking it used), or None."""
        with _LOCK:
            entry = self._entries.get(name)
            if entry is None:
                return None
            entry.last_used = time.monotonic()
            return entry.packed

    def holdings(self) -> list[Holding]:
        """Returns what this working set holds, by name, most recently used first."""
        with _LOCK:
            out = [Holding(n, device_name(e.device), "host" if e.device.platform == "cpu"
                           else "device", e.nbytes, e.last_used) for n, e in self._entries.items()]
        return sorted(out, key=lambda h: -h.last_used)

    @property
    def nbytes(self) -> int:
        """The bytes this working set holds."""
        with _LOCK:
            return sum(e.nbytes for e in self._entries.values())

    def release(self, *names: str) -> None:
        """Drops the named trees (all of them when no name is given) back to their lazy form."""
        with _LOCK:
            for name in names or list(self._entries):
                self._entries.pop(name, None)

    def close(self) -> None:
        """Drops everything and gives freed memory back to the OS (a session ending)."""
        self.release()
        with _LOCK:
            _SETS.discard(self)
        memory.give_back()


def _nbytes(tree) -> int:
    if isinstance(tree, PackedTree):
        return tree.nbytes
    layout, _ = plan_layout(tree)
    return sum(n * np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(g))).itemsize
               for g, n in layout.sizes.items())


def _evict_until(limit: int, keep: set) -> None:
    """Drops least recently used trees of every working set until at most `limit` is held."""
    entries = [(e.last_used, ws, name, e) for ws in list(_SETS)
               for name, e in ws._entries.items() if (id(ws), name) not in keep]
    held = held_bytes()
    evicted = False
    for _, ws, name, e in sorted(entries, key=lambda t: t[0]):
        if held <= limit:
            break
        ws._entries.pop(name, None)
        held -= e.nbytes
        evicted = True
    if evicted:
        memory.give_back()


def read_packed(tree, device) -> PackedTree:
    """Returns `tree` packed into one buffer per dtype on `device`, each leaf read once.

    Leaves are copied through a small host staging buffer into the device buffer (donated
    and updated in place), so reading a checkpoint needs its device copy plus a few MiB, not
    a second full host copy.
    """
    device = resolve_device(device)
    if isinstance(tree, PackedTree):
        return PackedTree(tree.layout, {g: jax.device_put(b, device)
                                        for g, b in tree.buffers.items()})
    layout, leaves = plan_layout(tree)
    by_group: dict[str, list] = {g: [] for g in layout.sizes}
    for leaf, slot in zip(leaves, layout.slots, strict=True):
        by_group[slot.group].append((leaf, slot))
    buffers = {g: _upload(by_group[g], n, np.dtype(g), device) for g, n in layout.sizes.items()}
    return PackedTree(layout, buffers).with_dtypes(buffers)


def _upload(items: list, size: int, dtype: np.dtype, device) -> jax.Array:
    dtype = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    buffer = jnp.zeros((size,), dtype, device=device)
    chunk = max(1, min(size, _STAGING_BYTES // dtype.itemsize))
    staging = np.empty(chunk, dtype)
    filled, start = 0, 0  # elements in staging; where staging[0] goes in the buffer

    def flush(n):
        nonlocal buffer
        piece = jax.device_put(staging[:n], device)
        buffer = _write(buffer, piece, np.int32(start))
        piece.block_until_ready()  # staging is refilled next: its copy must be done

    for value, (_, slot) in zip(read_ahead(leaf for leaf, _ in items), items, strict=True):
        data = np.asarray(value).reshape(-1)
        done = 0
        while done < slot.size:
            n = min(chunk - filled, slot.size - done)
            staging[filled : filled + n] = data[done : done + n]
            filled += n
            done += n
            if filled == chunk:
                flush(filled)
                start += filled
                filled = 0
        del data
    if filled:
        flush(filled)
    return buffer


def _write_piece(buffer, piece, start):
    return jax.lax.dynamic_update_slice_in_dim(buffer, piece, start, axis=0)


# The buffer is donated: each piece is written in place (one compile per piece length).
_write = jax.jit(_write_piece, donate_argnums=0)
