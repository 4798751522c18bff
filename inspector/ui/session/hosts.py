"""Serving from several hosts: process 0 serves the page, the other processes follow.

Under multi-controller JAX every process must run the same programs over the global mesh, in
the same order. So the page's actions that touch arrays spread over every host (sharding a
tree over the hosts' mesh, an op on such trees, keeping its result) are commands: process 0
broadcasts each one with JAX's own `multihost_utils.broadcast_one_to_all`, then runs it; each
follower receives it and runs the same action on a session state of its own, built like the
page's (same trees, same names), so the op runs on every host's devices.

    pytree-inspector CKPT --coordinator HOST:PORT --num-processes N --process-id I

Panel-free (followers build no page): the session model's side of serving from several hosts.
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


def spans_hosts(tree) -> bool:
    """Whether some leaf of `tree` is a JAX array with shards on other processes."""
    import jax

    return any(isinstance(x, jax.Array) and not x.is_fully_addressable
               for x in jax.tree_util.tree_leaves(tree))


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


def follow(new_state: Callable, log: Callable[[str], None] = print) -> None:
    """A follower's loop: runs each command process 0 broadcasts until told to stop.

    Args:
        new_state: builds a session state like the page's (same trees, same names), running
            work synchronously; one per leader session.
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
        apply(state, command)
        log(describe_command(state, command))


def apply(state, command: dict) -> None:
    """Runs one command on a follower's session state (as the page's state ran it)."""
    kind = command["kind"]
    if kind == "shard":
        state.selected = command["tree"]
        state.mesh.param.update(axes=command["axes"],
                                specs={**state.mesh.specs, command["tree"]: command["specs"]})
        state.mesh.param.trigger("shard")
    elif kind == "run":
        state.param.update(op=command["op"], selected=command["selected"],
                           repeats=command["repeats"], compare_eager=command["compare_eager"])
        state.ops[command["op"]].param.update(**command["settings"])
        state.param.trigger("run")
    elif kind == "keep":
        state.param.trigger("keep_result")
    else:
        raise ValueError(f"unknown command {kind!r}")


def describe_command(state, command: dict) -> str:
    """One line for the follower's log: what ran, where, and what it left."""
    kind = command["kind"]
    if state.error:
        return f"{kind}: failed: {state.error.splitlines()[0]}"
    if kind == "run" and state.result is not None:
        rr = state.result
        from inspector import device_bytes

        held = sum(device_bytes(rr.result).values())
        return (f"ran {rr.op} on {rr.device} (mesh {rr.mesh}); {held} bytes of the result "
                "on this host's devices")
    return f"{kind}: {state.selected}"


# The page's side: wrapping a session's work so that followers run it too ----------------------

def _refuse(state, names) -> None:
    missing = [n for n in names if n not in state.hosts.shared(state.session_id)]
    if missing:
        from inspector import InspectorError

        raise InspectorError(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} only on this host: "
            "on several hosts, trees sharded over every host's devices can only be combined "
            "with trees every host has (the launcher's checkpoints, the examples, and trees "
            "sharded or kept from them).")


def led_shard(state, tree: str, axes: str, specs: dict, work: Callable) -> Callable:
    """`work` (sharding `tree`) made a command every follower runs too, when serving from
    several hosts; `work` itself otherwise.

    Raises:
        InspectorError: the tree is only on this host.
    """
    if state.hosts is None:
        return work
    _refuse(state, [tree])
    command = {"kind": "shard", "session": state.session_id, "tree": tree, "axes": axes,
               "specs": dict(specs)}
    return lambda: state.hosts.lead(command, work)


def led_run(state, job, work: Callable) -> Callable:
    """`work` (running `job`) made a command every follower runs too when the job's inputs
    span the hosts; `work` itself otherwise (the op runs here alone).

    Raises:
        InspectorError: the job mixes trees spread over the hosts with trees only here.
    """
    if state.hosts is None or not spans_hosts([state.trees[n].tree for n in job.trees]):
        return work
    settings = state.settings
    _refuse(state, settings.uses())
    values = {p: getattr(settings, p) for p in settings.watched()}  # JSON: lists, dicts, text
    command = {"kind": "run", "session": state.session_id, "op": state.op,
               "selected": state.selected, "repeats": state.repeats,
               "compare_eager": state.compare_eager, "settings": json.loads(json.dumps(values))}
    return lambda: state.hosts.lead(command, work)


def led_keep(state, result, work: Callable) -> Callable:
    """`work` (keeping the last result as a tree) made a command every follower runs too when
    the result spans the hosts (then every follower holds the same last result)."""
    if state.hosts is None or not spans_hosts(result):
        return work
    return lambda: state.hosts.lead({"kind": "keep", "session": state.session_id}, work)


def shared_now(state, names) -> None:
    """Records that every follower's copy of the session now holds these trees too."""
    if state.hosts is not None:
        state.hosts.shared(state.session_id).update(names)
