"""The commands process 0 broadcasts when served from several hosts, in one process: with one
process JAX's broadcast hands the command back, so the leader's checks and a follower's
`apply` run here for real (the two-process run is `test_hosts.py`)."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.cli.hosts import Leader, broadcast
from inspector.ui.app import create_app, new_state
from inspector.ui.session.host_commands import apply, describe_command


@pytest.fixture
def leader():
    lead = Leader()
    yield lead
    lead.stop()


def test_broadcast_round_trips_a_command():
    command = {"kind": "run", "session": 3, "settings": {"weights": [1, 0.5, -1e-07]}}
    assert broadcast(command) == command


def test_leader_shards_only_trees_every_host_has(leader):
    page = create_app(background=False, defaults=True, root="", hosts=leader)
    state = page.inspector.state
    assert state.session_id == 1 and leader.shared(1) == set(state.trees)
    state.add_tree("upload", {"w": np.ones((4, 2), np.float32)}, select=True)
    state.mesh.param.trigger("shard")
    assert state.error == (
        "upload is only on this host: on several hosts, trees sharded over every host's "
        "devices can only be combined with trees every host has (the launcher's checkpoints, "
        "the examples, and trees sharded or kept from them).")
    assert "upload @ data=1" not in state.trees
    state.selected = "t1"
    state.mesh.param.trigger("shard")
    assert state.error == "" and state.selected == "t1 @ data=1"
    assert "t1 @ data=1" in leader.shared(1)  # a follower made it too


def test_a_follower_applies_shard_and_run_commands():
    state = new_state(defaults=True, background=False, root="")
    state.auto_run = False
    apply(state, {"kind": "shard", "session": 1, "tree": "t2", "axes": "data=1",
                  "specs": {"[0]": "data"}})
    assert state.selected == "t2 @ data=1" and state.error == ""
    assert describe_command(state, {"kind": "shard"}) == "shard: t2 @ data=1"
    apply(state, {"kind": "run", "session": 1, "op": "weighted_sum", "selected": "t1",
                  "repeats": 2, "compare_eager": False,
                  "settings": {"trees": ["t1", "t2 @ data=1", "t3"], "weights": [1, 2, 3]}})
    assert state.error == ""
    assert state.result.mesh == "data=1"
    out = state.result.result
    assert [[np.asarray(x).tolist() for x in pair] for pair in out] == [
        [[[26, 11], [21, 24]], [30, 15]], [[[23, 20], [18, 33]], [33, 18]]]  # S1
    assert describe_command(state, {"kind": "run"}).startswith("ran weighted_sum on 1 device "
                                                               "(mesh data=1);")
