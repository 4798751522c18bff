"""`Opaque`: read-only, compared by type and state, summarised in one line."""

from __future__ import annotations

import numpy as np
import pytest

from inspector.core.opaque import BACK_REFERENCE, Opaque


def test_read_only_and_unhashable():
    o = Opaque("argparse.Namespace", {"lr": 0.1})
    with pytest.raises(AttributeError, match="read-only"):
        o.state = {}
    with pytest.raises(TypeError):
        hash(o)


def test_equality_by_type_and_state_arrays_and_nans_included():
    a = Opaque("m.C", {"w": np.arange(3.0), "x": float("nan"), "k": [1, (2, 3)]})
    assert a == Opaque("m.C", {"w": np.arange(3.0), "x": float("nan"), "k": [1, (2, 3)]})
    assert a != Opaque("m.D", a.state)
    assert a != Opaque("m.C", {**a.state, "w": np.arange(1.0, 4.0)})
    assert a != Opaque("m.C", {**a.state, "k": [1, [2, 3]]})  # a tuple is not a list


def test_plain_and_summary():
    parent = Opaque("omegaconf.dictconfig.DictConfig", {"_content": {
        "layers": Opaque("omegaconf.listconfig.ListConfig", {"_content": [
            Opaque("omegaconf.nodes.AnyNode", {"_val": 8, "_parent": BACK_REFERENCE})]}),
        "name": Opaque("omegaconf.nodes.AnyNode", {"_val": "x"})}})
    assert parent.plain() == {"layers": [8], "name": "x"}
    assert parent.summary() == "\u2039DictConfig\u203a {2 keys}"
    assert Opaque("typing.Any").summary() == "\u2039Any\u203a"
    assert Opaque("my.Color", 2).summary() == "\u2039Color\u203a 2"
    model = Opaque("nets.Linear", {"_parameters": {"weight": np.zeros((2, 3)),
                                                   "bias": np.zeros(2)}})
    assert model.summary() == "\u2039Linear\u203a {1 key} \u00b7 2 arrays inside"
