"""The op registry: one settings class and one form make a new op a tab, a run, a history row
and a line of code, with nothing else edited; each op's settings drive it without a browser."""

from __future__ import annotations

import jax
import numpy as np
import panel as pn
import panel_material_ui as pmui
import param
import pytest

import inspector
from inspector.core.plan import Call, Plan
from inspector.ui import forms as form_registry
from inspector.ui.operation_panel import OperationPanel
from inspector.ui.session import op_settings
from inspector.ui.session.op_settings import OpSettings, Preview, settings_classes
from inspector.ui.session.records import CallRecord, RunRecord
from inspector.ui.session.snippet import state_snippet
from inspector.ui.session.state import InspectorState
from tests.helpers import assert_tree_allclose


def _plan_negate(tree, device=None):
    device = inspector.resolve_device(device)
    if isinstance(tree, inspector.PackedTree):
        tree = tree.unpack()
    leaves, treedef = jax.tree.flatten(tree)
    calls = [Call(("negate", x.shape, str(x.dtype)), lambda: (lambda a: -a), [x]) for x in leaves]
    nbytes = sum(x.nbytes for x in leaves)
    return Plan("negate", device, calls, treedef.unflatten, nbytes, nbytes)


NEGATE = inspector.Op("negate", _plan_negate)


class NegateSettings(OpSettings):
    op = "negate"
    title = "Negate"
    position = 99
    follows_selection = True

    tree = param.String(default="", doc="The tree to negate.")

    def describe(self, loaded):
        return CallRecord("negate", f"negate({self.tree})", [self.tree]), self.tree

    def arguments(self, trees, options):
        return NEGATE, (trees[0],), {}

    def preview(self, trees):
        return Preview(f"-{self.tree}", "" if self.tree in trees else "Pick a tree.")

    @classmethod
    def code(cls, call, names, writer):
        writer.uses_jax = True
        return f"jax.tree.map(lambda x: -x, {names[0]})"


class NegateForm(pn.viewable.Viewer):
    def __init__(self, settings, state, **params):
        super().__init__(**params)
        self.tree = pmui.Select.from_param(settings.param.tree, options=list(state.trees))

    def __panel__(self):
        return self.tree


@pytest.fixture
def negate():
    op_settings.register(NegateSettings)
    form_registry.form("negate")(NegateForm)
    try:
        yield
    finally:
        op_settings._REGISTRY.pop("negate")
        form_registry._FORMS.pop("negate")


def test_the_four_ops_are_registered_in_tab_order():
    assert list(settings_classes()) == ["weighted_sum", "index", "stack", "unstack", "dequantize",
                                       "merge", "convert"]
    assert set(form_registry.forms()) >= set(settings_classes())


def test_a_new_op_is_one_settings_class_and_one_form(negate):
    state = InspectorState()
    state.load_defaults()
    panel = OperationPanel(state)
    assert [state.ops[op].title for op in panel.forms][-1] == "Negate"
    state.param.update(op="negate", selected="params")
    assert state.ops["negate"].tree == "params" and state.preview == "-params"
    state.param.trigger("run")
    assert state.error == ""
    record = state.history[-1]
    assert isinstance(record, RunRecord) and record.op == "negate" and record.trees == ("params",)
    expected = jax.tree.map(lambda x: -np.asarray(x, np.float64),
                            state.trees["params"].tree.unpack())
    got = state.result.result
    assert_tree_allclose(got, expected, rtol=0)
    code = state_snippet(state).splitlines()
    assert code[0] == "import jax" and code[-1] == "result = jax.tree.map(lambda x: -x, params)"


def test_run_records_are_frozen_and_carry_their_call(state):
    state.param.trigger("run")
    record = state.history[-1]
    with pytest.raises(AttributeError):
        record.op = "stack"
    with pytest.raises(TypeError):
        record.call.options["weights"] = (0,)
    assert record.call.options["weights"] == (1, 2, 3) and record.call.device == state.device
    assert record.row()["inputs"] == "t1, t2, t3 · weights 1, 2, 3"


def test_each_settings_object_drives_its_op_without_a_browser(state):
    ws = state.ops["weighted_sum"]
    ws.weights = [0.5, 0.25, 0.25]
    job = ws.job(state.trees)
    assert job.call == CallRecord("weighted_sum", "weighted_sum(t1, t2, t3)", ["t1", "t2", "t3"],
                                  {"weights": (0.5, 0.25, 0.25)})
    assert "int32 → float32" in ws.preview(state.trees).text
    index = state.ops["index"]
    index.tree = "s2"
    assert state.selected == "s2"  # the index settings follow the input tree, and lead it
    index.set_text("[1]", "9")
    assert "[1]: index 9 is out of bounds" in index.preview(state.trees).error
    state.ops["stack"].trees = ["mlp_1", "mlp_0"]
    assert state.ops["stack"].job(state.trees).label == "stack(mlp_1, mlp_0)"
