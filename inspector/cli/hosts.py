"""Serving from several hosts, the launcher's side: process 0 serves the page and leads, the
other processes follow.

Under multi-controller JAX every process must run the same programs over the global mesh, in
the same order. So the page's actions that touch arrays spread over every host are commands
(`inspector.ui.session.host_commands`): process 0 broadcasts each one with JAX's own
`multihost_utils.broadcast_one_to_all`, then runs it; each follower receives it and runs the
same action on a session state of its own, built like the page's (same trees, same names).

    pytree-inspector CKPT --coordinator HOST:PORT --num-processes N --process-id I

This module is the process protocol: joining the cluster, broadcasting a command, the leader
(one command at a time, a heartbeat) and the followers' loop. It imports nothing of the UI.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable

import numpy as np

HEARTBEAT_SECONDS = 60.0
"""An idle leader broadcasts a no-op this often, so followers never wait in one collective
for longer than CPU collectives allow (gloo times out idle waits)."""


def initialize(coordinator: str, num_processes: int, process_id: int) -> None:
    """Joins this process to the others (`jax.distributed.initialize`); call before any JAX
    work. CPU devices talk through gloo collectives."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes=num_processes, process_id=process_id)


def broadcast(command: dict | None) -> dict:
    """Returns process 0's `command` on every process (the others pass None).

    Two broadcasts with JAX's multihost utilities: the length, then the JSON bytes (every
    process must pass arrays of one shape).
    """
    from jax.experimental import multihost_utils

    payload = json.dumps(command).encode() if command is not None else b""
    n = int(multihost_utils.broadcast_one_to_all(np.int64(len(payload))))
    buf = np.zeros(n, np.uint8)
    if command is not None:
        buf[:] = np.frombuffer(payload, np.uint8)
    return json.loads(bytes(np.asarray(multihost_utils.broadcast_one_to_all(buf))))


class Leader:
    """Process 0's side: numbers the sessions, broadcasts commands one at a time and runs them,
    and tells which trees every follower has (so a command never names a tree they lack)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._sessions = itertools.count(1)
        self._shared: dict[int, set[str]] = {}
        self._last = time.monotonic()
        self._stopped = False
        threading.Thread(target=self._heartbeat, daemon=True, name="hosts-heartbeat").start()

    def new_session(self, names) -> int:
        """Registers a session whose initial trees (`names`) every follower builds too."""
        session = next(self._sessions)
        self._shared[session] = set(names)
        return session

    def shared(self, session: int) -> set[str]:
        """The tree names every follower's copy of `session` holds."""
        return self._shared.setdefault(session, set())

    def lead(self, command: dict, work: Callable):
        """Broadcasts `command`, then returns `work()`; one command at a time, so every
        process runs the same programs in the same order."""
        with self._lock:
            broadcast(command)
            self._last = time.monotonic()
            return work()

    def stop(self) -> None:
        """Tells the followers to exit (the server stopped)."""
        with self._lock:
            if not self._stopped:
                self._stopped = True
                broadcast({"kind": "stop"})

    def _heartbeat(self):
        while not self._stopped:
            time.sleep(HEARTBEAT_SECONDS / 4)
            if time.monotonic() - self._last > HEARTBEAT_SECONDS:
                with self._lock:
                    if not self._stopped:
                        broadcast({"kind": "noop"})
                        self._last = time.monotonic()


def follow(new_state: Callable, run: Callable[[object, dict], str],
           log: Callable[[str], None] = print) -> None:
    """A follower's loop: runs each command process 0 broadcasts until told to stop.

    Args:
        new_state: builds a session state like the page's (same trees, same names), running
            work synchronously; one per leader session.
        run: runs one command on a state and returns a line saying what it did
            (`host_commands.run_command`).
        log: where to say what was run (the launcher prints it).
    """
    states: dict[int, object] = {}
    while True:
        command = broadcast(None)
        kind = command.get("kind")
        if kind == "stop":
            return
        if kind == "noop":
            continue
        state = states.get(command["session"])
        if state is None:
            state = states[command["session"]] = new_state()
        log(run(state, command))
