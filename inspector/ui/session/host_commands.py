"""Serving from several hosts, the page's side: a session's actions that touch arrays spread
over every host (sharding a tree over the hosts' mesh, an op on such trees, keeping its result)
made commands that process 0 broadcasts (through `state.hosts`, the launcher's
`inspector.cli.hosts.Leader`), and a follower's `apply` of each command to a session state of
its own, built like the page's.

Panel-free (followers build no page).
"""

from __future__ import annotations

import json
from collections.abc import Callable


def spans_hosts(tree) -> bool:
    """Whether some leaf of `tree` is a JAX array with shards on other processes."""
    import jax

    return any(isinstance(x, jax.Array) and not x.is_fully_addressable
               for x in jax.tree_util.tree_leaves(tree))


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


def run_command(state, command: dict) -> str:
    """A follower's run of one command: applies it, returns the line saying what it did."""
    apply(state, command)
    return describe_command(state, command)


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
