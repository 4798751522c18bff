"""`inspector.show` and `inspector.Inspector`: the notebook widget, driven without a browser."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import inspector
from inspector import examples
from inspector.ui import notebook
from inspector.ui.notebook import Inspector
from tests.helpers import tree_lists

EXEC_MIME = "application/vnd.holoviews_exec.v0+json"
REACT = "panel.models.esm.ReactComponent"


@jax.tree_util.register_dataclass
@dataclass
class Layer:
    """A custom pytree node, as flax / equinox modules are."""

    w: jax.Array
    b: jax.Array


def test_a_single_positional_tree_is_named_tree_and_several_are_numbered():
    assert list(Inspector([1.0, 2.0]).state.trees) == ["tree"]
    assert list(Inspector([1.0], [2.0]).state.trees) == ["tree0", "tree1"]
    widget = Inspector(params={"w": np.ones(2)}, grads={"w": np.zeros(2)})
    assert list(widget.state.trees) == ["params", "grads"]
    assert {t.source for t in widget.state.trees.values()} == {"notebook"}
    assert widget.state.selected == "params"


def test_same_structured_trees_are_preselected_and_run_gives_s1():
    t1, t2, t3 = examples.s1_trees()
    widget = Inspector(t1=t1, t2=t2, t3=t3, other=examples.s2_tree())
    s = widget.state
    assert s.ops["weighted_sum"].trees == s.ops["stack"].trees == ["t1", "t2", "t3"]
    s.ops["weighted_sum"].weights = [1, 2, 3]
    rr = widget.run()
    assert tree_lists(rr.result) == examples.S1_EXPECTED
    assert s.result is rr and s.result_name == "weighted_sum(t1, t2, t3)"


def test_live_jax_arrays_and_custom_nodes_work_in_every_op():
    device = jax.devices()[-1]
    layers = [Layer(jax.device_put(jnp.full((2, 3), float(k)), device),
                    jax.device_put(jnp.arange(3.0) + k, device)) for k in range(3)]
    widget = Inspector(*layers)
    s = widget.state
    assert list(s.trees) == ["tree0", "tree1", "tree2"]
    assert s.ops["weighted_sum"].trees == list(s.trees)
    s.ops["weighted_sum"].weights = [1, 1, 1]
    out = widget.run().result
    np.testing.assert_array_equal(np.asarray(_leaves(out)[0]), np.full((2, 3), 3.0))
    s.op = "stack"
    stacked = widget.run().result
    assert [np.shape(x) for x in _leaves(stacked)] == [(3, 2, 3), (3, 3)]
    s.selected = "tree2"
    s.op = "index"
    s.ops["index"].set_text(".b", "1:")  # a dataclass's fields are its subtrees (key paths)
    indexed = widget.run().result
    assert np.asarray(_leaves(indexed)[1]).tolist() == [3.0, 4.0]
    assert s.error == ""


def _leaves(tree):
    if isinstance(tree, inspector.PackedTree):
        tree = tree.unpack()
    return jax.tree.leaves(tree)


def test_a_failing_run_raises_the_message_the_widget_shows():
    widget = Inspector(a={"w": np.ones(2)}, b={"w": np.ones(3)})
    widget.state.ops["weighted_sum"].param.update(trees=["a", "b"], weights=[1, 1])
    with pytest.raises(inspector.InspectorError, match=r"\['w'\]") as info:
        widget.run()
    assert str(info.value) == widget.state.error


def test_outside_a_kernel_runs_are_synchronous_and_show_does_not_block():
    code = ("import time, inspector; t = time.perf_counter(); "
            "w = inspector.show(t=[1.0, 2.0]); w.state.op = 'unstack'; "
            "print(w.state.background, round(time.perf_counter() - t) < 30)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_the_cell_output_carries_the_component_bundle_once():
    widget = notebook.show(t1=examples.s1_trees()[0])
    data, _ = widget._repr_mimebundle_()
    assert EXEC_MIME in data
    html = data["text/html"]
    esms = [m for m in _models(html) if m["name"] == REACT]
    carrying = [m for m in esms if m["attributes"].get("esm")]
    assert len(esms) > 30 and len(carrying) == 1  # about 50 components, 1.4 MB each before
    assert len(html) < 5_000_000
    # The page sets up (finalizes) models children first: the first component must carry it.
    assert _finalize_order(html)[0]["attributes"].get("esm")


def _docs_json(html: str) -> dict:
    start = html.index("var docs_json = ") + len("var docs_json = ")
    end = html.index(";\n  var render_items", start)
    return json.loads(html[start:end])


def _models(html: str) -> list[dict]:
    out = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "id" in node:
                out.append(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(_docs_json(html))
    return out


def _finalize_order(html: str) -> list[dict]:
    """The ReactComponents in the order BokehJS's deserializer finalizes them: an object is
    finalized once its attributes are decoded (post-order), the first definition of an id wins."""
    seen, order = set(), []

    def walk(node):
        if isinstance(node, dict):
            is_def = node.get("type") == "object" and "id" in node and node["id"] not in seen
            if is_def:
                seen.add(node["id"])
            for v in node.values():
                walk(v)
            if is_def and node.get("name") == REACT:
                order.append(node)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for doc in _docs_json(html).values():
        walk(doc["roots"])
    return order


def test_no_stylesheet_is_fetched_from_a_cdn_after_views_change():
    widget = notebook.show(t1=examples.s1_trees()[0], t2=examples.s1_trees()[1])
    data, _ = widget._repr_mimebundle_()
    assert "cdn.holoviz.org/panel/" not in re.sub(r'"esm":"[^"]{1000,}"', "", data["text/html"])
    widget.state.ops["weighted_sum"].weights = [1, 2]
    widget.run()  # the result column adds its timing card, code and history table
    doc = next(iter(widget.app.result.timing._body._models.values()))[0].document
    fetched = [m.url for m in doc.models if type(m).__name__ == "ImportedStyleSheet"
               and m.url.startswith("http")]
    assert fetched == []


def test_fonts_are_inlined_for_the_page():
    css = notebook.font_css()
    assert 'font-family: "Material Icons"' in css and "data:font/woff2;base64," in css
    assert "url(\"./" not in css and len(css) < 600_000


def test_two_trees_that_differ_open_on_their_comparison():
    model, old = examples.s5_model(), examples.s5_checkpoint()
    widget = Inspector(model=model, checkpoint=old)
    s = widget.state
    c = s.compare
    assert (c.diff_a, c.diff_b) == ("model", "checkpoint") and widget.tabs.active == 1
    assert s.compare.diff_result is not None
    t1, t2 = examples.s1_trees()[:2]
    assert Inspector(t1=t1, t2=t2).tabs.active == 0  # one structure: the operations


def test_code_runs_at_once_even_when_widget_clicks_go_to_a_thread():
    t1, t2, t3 = examples.s1_trees()
    widget = Inspector(t1=t1, t2=t2, t3=t3, background=True)
    widget.state.ops["weighted_sum"].weights = [1, 2, 3]
    widget.state.param.trigger("run")  # as a cell would: not a message from the widget
    assert widget.state.background and not widget.state.busy
    assert tree_lists(widget.state.result.result) == examples.S1_EXPECTED
