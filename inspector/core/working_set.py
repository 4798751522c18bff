"""The working set: loaded trees read once and held packed on a device, within a memory budget.

A checkpoint opens lazily (shapes only). The first op that needs its data asks the working set,
which reads it once, leaf by leaf through a small staging buffer (a bounded amount in flight),
straight into one device buffer per dtype (`PackedTree`, leaves are views). Later ops, weight
changes, statistics and exports reuse those buffers: a weight change costs one kernel, not a
re-read of the files. Past the budget, the least recently used trees are dropped back to their
lazy form (the caller still holds the lazy tree; the next use reads it again), and a request
that cannot fit even alone gets `None`, so the caller streams instead of running out of memory.

The budget is shared by every working set in the process (one per app session): a server with
ten sessions holds at most one budget's worth, evicting across sessions, oldest use first. A
tree several sessions hold (the launcher's checkpoints, one object in every session) is held
once, counted once, and freed when the last of them lets go.

On the CPU, a caller whose kernels read files in place (the app's weighted sum) asks for its
trees mapped (`hold(..., mapped=True)`): their large float32 groups are their files' maps
(`mapped_groups.MappedGroup`: nothing read), and `settle` replaces them by packed copies in a
background thread once the run is shown, so no map is held for long.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass

import jax
import numpy as np

from inspector.core import caches, in_flight, memory
from inspector.core.devices import device_name, resolve_device
from inspector.core.errors import InspectorError
from inspector.core.mapped_groups import has_mapped
from inspector.core.packed import PackedTree, plan_layout
from inspector.core.packed_reads import read_mapped, read_packed, settled

DEFAULT_FRACTION = 0.75
"""The default budget: this fraction of (memory free now + what working sets hold), read anew
each time it is needed, so it follows the machine (other programs starting or ending)."""

SETTLE_DELAY = 0.5
"""Seconds between a run on mapped trees and the start of their packed copies (`settle`):
the run's result is shown first."""

_LOCK = threading.RLock()
_ENTRIES: dict[tuple, _Entry] = {}  # (id(tree), device) -> the one held copy of that tree
_HOLDERS: dict[int, dict[str, _Entry]] = {}  # id(WorkingSet) -> its names -> entries
_BUDGET: dict[str, int | None] = {"bytes": None}


def budget() -> int:
    """Returns the process-wide budget in bytes: the one set with `set_budget`, else
    `DEFAULT_FRACTION` of the memory free on the default device now plus what is held."""
    with _LOCK:
        if _BUDGET["bytes"] is not None:
            return _BUDGET["bytes"]
        held = held_bytes()
    free = memory.device_available(resolve_device(None))
    return int(DEFAULT_FRACTION * (free + held))


def budget_is_set() -> bool:
    """Whether the budget was set (`set_budget`) rather than following free memory."""
    return _BUDGET["bytes"] is not None


def set_budget(nbytes: int | None) -> None:
    """Sets the process-wide budget in bytes (None: follow free memory again); evicts to fit."""
    with _LOCK:
        _BUDGET["bytes"] = None if nbytes is None else int(nbytes)
        _evict_until(budget(), keep=set())


def held_bytes() -> int:
    """Returns the bytes every working set in the process holds now (a tree shared by several
    sessions counted once)."""
    with _LOCK:
        return sum(e.nbytes for e in _ENTRIES.values())


@dataclass(frozen=True)
class Holding:
    """One tree held by a working set.

    Attributes:
        name: the name the session knows the tree by.
        device: where its buffers live (`cpu:0`, `cuda:0`).
        where: "host" (a CPU device: the buffers are host RAM) or "device".
        nbytes: the bytes its buffers take.
        last_used: `time.monotonic()` of its last use (eviction takes the oldest first).
        shared: how many working sets (sessions) hold this very copy (1: only this one).
    """

    name: str
    device: str
    where: str
    nbytes: int
    last_used: float
    shared: int = 1


class _Entry:
    """One tree read onto one device, shared by every working set that holds that tree.

    The entry keeps its source tree alive, so `id(source)` in its key is never reused while
    it is held; it is dropped when its last holder releases it, or evicted for all of them.
    """

    __slots__ = ("source", "packed", "device", "nbytes", "last_used", "holders", "ready",
                 "error", "settling")

    def __init__(self, source, device, nbytes: int):
        self.source = source
        self.packed: PackedTree | None = None
        self.device = device
        self.nbytes = nbytes
        self.last_used = time.monotonic()
        self.holders: set[int] = set()
        self.ready = threading.Event()  # set once read (or failed: `error`)
        self.error: BaseException | None = None
        self.settling = False  # its mapped groups are being copied (`WorkingSet.settle`)

    @property
    def key(self) -> tuple:
        return (id(self.source), self.device)


class WorkingSet:
    """The trees one session (or one script) holds packed on devices, by name.

    Sessions that hold the same tree object (the launcher's checkpoints are one object shared
    by every session) share one copy: it is read once and freed when the last of them releases
    it (or closes), or when the budget evicts it.

    >>> before = held_bytes()  # process-wide: other working sets may hold trees too
    >>> ws = WorkingSet()
    >>> tree = {"w": np.arange(4, dtype=np.float32)}
    >>> held = ws.hold({"a": tree})
    >>> held["a"].unpack()["w"].tolist(), [h.name for h in ws.holdings()]
    ([0.0, 1.0, 2.0, 3.0], ['a'])
    >>> other = WorkingSet()
    >>> other.hold({"same": tree})["same"] is held["a"]   # read once, shared
    True
    >>> ws.close(); other.close(); ws.holdings(), held_bytes() - before
    ([], 0)
    """

    def __init__(self):
        self._closed = False
        with _LOCK:
            self._names: dict[str, _Entry] = {}
            _HOLDERS[id(self)] = self._names
        # A working set dropped without close() lets go of its trees when collected.
        weakref.finalize(self, _forget_holder, id(self))

    def hold(self, trees: dict, device=None, extra_bytes: int = 0,
             reading=None, mapped: bool = False) -> dict | None:
        """Returns `{name: PackedTree on device}` for `trees`, reading each only if not held
        (by this working set or any other).

        All of them are held at once (an op needs its inputs together), plus `extra_bytes`
        (the op's output) within the budget: other trees, least recently used first and in any
        session, are dropped to make room. If they cannot fit even alone, nothing is read and
        None comes back (run the op streamed instead).

        Args:
            trees: name -> pytree (lazy checkpoint leaves, arrays) or packed tree.
            device: where to hold them (a `jax.Device`, a name, or None for the default).
            extra_bytes: bytes the caller is about to allocate beside them.
            reading: called as `reading(name, nbytes, done_bytes, total_bytes)` before each
                tree this call reads (none for trees already held), and once after the last
                with name None and done_bytes == total_bytes, to show progress.
            mapped: on a CPU device, hold the large float32 groups of the trees this call
                reads where they lie in their files (`mapped_groups.MappedGroup`: mapped,
                not read) until `settle` replaces them by packed copies.
        """
        device = resolve_device(device)
        with _LOCK:
            if self._closed:
                raise InspectorError("This working set was closed (its session ended): "
                                     "make a new one.")
            entries: dict[str, _Entry] = {}
            fresh: dict[tuple, _Entry] = {}
            needed = extra_bytes
            for name, tree in trees.items():
                key = (id(tree), device)
                entry = _ENTRIES.get(key) or fresh.get(key)
                if entry is None:
                    entry = fresh[key] = _Entry(tree, device, _nbytes(tree))
                    needed += entry.nbytes
                entries[name] = entry
            shared = sum(e.nbytes for e in set(entries.values()) if e.key not in fresh)
            if shared + needed > budget():
                return None
            keep = {e.key for e in entries.values()}
            _evict_until(budget() - needed, keep=keep)
            for entry in fresh.values():
                _ENTRIES[entry.key] = entry
            for name, entry in entries.items():
                self._attach(name, entry)
                entry.last_used = time.monotonic()
        # Read outside the lock: other sessions (and the page showing what is held) go on;
        # a session wanting a tree being read waits for that read instead of reading it twice.
        names = {entry.key: name for name, entry in entries.items()}
        total, done = sum(e.nbytes for e in fresh.values()), 0
        for entry in fresh.values():
            _tell(reading, names[entry.key], entry.nbytes, done, total)
            done += entry.nbytes
            try:
                entry.packed = (mapped and read_mapped(entry.source, device)) or read_packed(
                    entry.source, device)
            except BaseException as exc:
                entry.error = exc
                with _LOCK:
                    _drop(entry)
                raise
            finally:
                entry.ready.set()
                with _LOCK:
                    if not entry.holders:  # every holder closed while it was read
                        _drop(entry)
        if fresh:
            _tell(reading, None, 0, total, total)
        out = {}
        for name, entry in entries.items():
            entry.ready.wait()
            if entry.error is not None:
                raise entry.error
            out[name] = entry.packed
        return out

    def settle(self, delay: float | None = None) -> threading.Thread | None:
        """Replaces the `MappedGroup`s of the trees this working set holds by packed copies,
        in a background thread starting `delay` seconds from now (default `SETTLE_DELAY`:
        the run that mapped them is shown first). The files' maps are then let go; later ops
        find the trees packed. Returns the thread (None when nothing is mapped). A copy that
        fails drops its tree (the next use reads it again); whoever holds the mapped tree
        keeps it."""
        with _LOCK:
            entries = [e for e in self._names.values()
                       if has_mapped(e.packed) and not e.settling]
            for entry in entries:
                entry.settling = True
        if not entries:
            return None
        delay = SETTLE_DELAY if delay is None else delay
        thread = threading.Thread(target=_settle, args=(entries, delay), daemon=True,
                                  name="inspector-settle")
        thread.start()
        return thread

    def _attach(self, name: str, entry: _Entry) -> None:
        old = self._names.get(name)
        if old is entry:
            return
        if old is not None:  # a stale copy (another device, a reloaded tree)
            _release(id(self), old)
        self._names[name] = entry
        entry.holders.add(id(self))

    def get(self, name: str) -> PackedTree | None:
        """Returns the packed tree held under `name` (marking it used), or None."""
        with _LOCK:
            entry = self._names.get(name)
            if entry is None or entry.packed is None:
                return None
            entry.last_used = time.monotonic()
            return entry.packed

    def holdings(self) -> list[Holding]:
        """Returns what this working set holds, by name, most recently used first."""
        with _LOCK:
            out = [Holding(n, device_name(e.device), "host" if e.device.platform == "cpu"
                           else "device", e.nbytes, e.last_used, len(e.holders))
                   for n, e in self._names.items() if e.packed is not None]
        return sorted(out, key=lambda h: -h.last_used)

    @property
    def nbytes(self) -> int:
        """The bytes this working set holds (shared trees included)."""
        with _LOCK:
            return sum(e.nbytes for e in self._names.values())

    def release(self, *names: str) -> None:
        """Lets go of the named trees (all of them when no name is given): each goes back to
        its lazy form once no other working set holds it."""
        with _LOCK:
            for name in names or list(self._names):
                entry = self._names.pop(name, None)
                if entry is not None:
                    _release(id(self), entry)

    def close(self) -> None:
        """Lets go of everything and gives freed memory back to the OS (a session ending);
        holding more afterwards raises."""
        with _LOCK:
            self._closed = True
        self.release()
        memory.give_back()


def _settle(entries: list, delay: float) -> None:
    time.sleep(delay)
    if sys.platform.startswith("linux"):  # this thread only (Linux): the runs come first
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except OSError:
            pass
    for entry in entries:
        mapped = entry.packed
        try:
            copy = settled(mapped, entry.device, in_flight.wait_quiet)  # runs first
        except Exception:  # out of memory, a file that changed: read it again next time
            with _LOCK:
                _drop(entry)
            continue
        with _LOCK:
            if entry.packed is mapped:
                entry.packed = copy


def _tell(reading, *args) -> None:
    """Reports progress to `reading` (if given); a failing report never stops the reads."""
    if reading is not None:
        try:
            reading(*args)
        except Exception:
            pass


def _release(holder: int, entry: _Entry) -> None:
    entry.holders.discard(holder)
    if not entry.holders and entry.ready.is_set():
        _drop(entry)


def _drop(entry: _Entry) -> None:
    """Forgets `entry` everywhere (under `_LOCK`)."""
    if _ENTRIES.get(entry.key) is entry:
        del _ENTRIES[entry.key]
    for holder in entry.holders:
        names = _HOLDERS.get(holder, {})
        for name in [n for n, e in names.items() if e is entry]:
            del names[name]
    entry.holders.clear()


def _forget_holder(holder: int) -> None:
    with _LOCK:
        for entry in list(_HOLDERS.pop(holder, {}).values()):
            _release(holder, entry)


def _nbytes(tree) -> int:
    if isinstance(tree, PackedTree):
        return tree.nbytes
    layout, _ = plan_layout(tree)
    return sum(n * np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(g))).itemsize
               for g, n in layout.sizes.items())


def _evict_until(limit: int, keep: set) -> None:
    """Drops least recently used trees (every session's) until at most `limit` is held;
    trees being read and those keyed in `keep` stay."""
    held = held_bytes()
    evicted = False
    for e in sorted(_ENTRIES.values(), key=lambda e: e.last_used):
        if held <= limit:
            break
        if e.key in keep or not e.ready.is_set():
            continue
        _drop(e)
        held -= e.nbytes
        evicted = True
    if evicted:
        memory.give_back()


def _drop_all() -> None:
    """Drops every tree held (read onto a device) by any working set; those being read stay."""
    with _LOCK:
        _evict_until(0, keep=set())


caches.register("working set", _drop_all, lambda: len(_ENTRIES))
