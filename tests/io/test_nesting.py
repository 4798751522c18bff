"""Flat keys to nested dicts and back (`inspector.io.nesting`)."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.core.errors import InspectorError, LoadError
from inspector.io.nesting import flatten, unflatten


def test_unflatten_nests_on_the_separator_in_key_order():
    pairs = [("layers.0.w", 1), ("layers.0.b", 2), ("layers.1.w", 3), ("head", 4)]
    assert unflatten(pairs, "m.safetensors") == {
        "layers": {"0": {"w": 1, "b": 2}, "1": {"w": 3}},
        "head": 4,
    }


def test_unflatten_splits_on_every_separator_given():
    pairs = [("params/dense.kernel", 1), ("params/dense.bias", 2)]
    assert unflatten(pairs, "m.npz", separators=(".", "/")) == {
        "params": {"dense": {"kernel": 1, "bias": 2}}
    }


@pytest.mark.parametrize(
    "pairs, named",
    [
        ([("a", 1), ("a.b", 2)], "'a' and 'a.b'"),
        ([("a.b", 1), ("a", 2)], "'a.b' and 'a'"),
        ([("x.y.z", 1), ("x.y", 2)], "'x.y.z' and 'x.y'"),
    ],
)
def test_a_key_that_is_both_an_array_and_a_parent_is_refused(pairs, named):
    with pytest.raises(LoadError) as info:
        unflatten(pairs, "clash.safetensors")
    assert "Cannot load clash.safetensors: 1 pair(s) of keys clash" in str(info.value)
    assert f"  - {named}" in str(info.value)


def test_two_spellings_of_one_place_are_refused():
    with pytest.raises(LoadError, match="'a.b' and 'a/b'"):
        unflatten([("a.b", 1), ("a/b", 2)], "m.npz", separators=(".", "/"))


def test_every_clash_is_listed():
    with pytest.raises(LoadError) as info:
        unflatten([("a", 1), ("a.b", 2), ("c", 3), ("c.d", 4)], "m.safetensors")
    assert "2 pair(s)" in str(info.value)


def test_flatten_joins_dict_keys_and_positions_and_skips_none():
    tree = {"layers": [{"w": np.ones(1)}, ({"w": 2.0},)], "opt": None, 7: np.zeros(1)}
    assert list(flatten(tree)) == ["layers.0.w", "layers.1.0.w", "7"]


def test_flatten_refuses_keys_with_separators_by_path():
    with pytest.raises(InspectorError, match=r"\['a'\]\['b/c'\]: the key contains"):
        flatten({"a": {"b/c": np.ones(1)}})


def test_flatten_refuses_object_arrays():
    with pytest.raises(InspectorError, match=r"\['o'\]: ndarray"):
        flatten({"o": np.array([object()])})
