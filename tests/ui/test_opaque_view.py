"""The app's tree and selection panel for `Opaque` leaves (objects in a Lightning checkpoint)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import inspector
from inspector.ui.lazy_tree import find
from inspector.ui.tree_view import TreeView

ROOT = pathlib.Path(__file__).parents[2]


def _lightning(tmp_path) -> pathlib.Path:
    subprocess.run([sys.executable, "-m", "tests.io.lightning_checkpoint", str(tmp_path)],
                   cwd=ROOT, check=True)  # fmt: skip
    return tmp_path / "lightning.ckpt"


def _labels(items) -> dict:
    out = {}
    for item in items:
        out[item["id"]] = item["label"]
        out.update(_labels(item.get("items") or []))
    return out


def test_the_tree_shows_objects_by_class_and_size_and_their_content_on_selection(state, tmp_path):
    state.add_tree("lightning.ckpt", inspector.load(_lightning(tmp_path)), "test", select=True)
    view = TreeView(state)
    labels = _labels(view.tree.items)
    assert "\u2039ListConfig\u203a [3 items]" in labels["['layers']"]
    assert "\u2039DictConfig\u203a {2 keys}" in labels["['hyper_parameters']"]
    view.tree.active = [find(view.tree.items, "['layers']")]
    html = view.stats.stats_html
    assert "omegaconf.listconfig.ListConfig" in html and "[64, 64, 10]" in html
    assert not view.stats.histogram_shown
    view.tree.active = [find(view.tree.items, "['hyper_parameters']")]
    html = view.stats.stats_html
    assert "{&#x27;model&#x27;: {&#x27;layers&#x27;: [64, 64, 10]" in html


@pytest.mark.browser
def test_browser_shows_a_lightning_checkpoints_objects(browser, tmp_path):
    from tests.serving import launched_app, session

    _lightning(tmp_path)
    with launched_app(tmp_path, "lightning.ckpt") as url, session(browser, url) as page:
        row = page.locator('[role=treeitem][data-path="[\'layers\']"]').first
        row.wait_for()
        assert "\u2039ListConfig\u203a [3 items]" in row.inner_text()
        row.locator(".wtree-label").click()
        content = page.locator(".opaque-content").first
        content.wait_for()
        assert content.inner_text() == "[64, 64, 10]"
        assert "omegaconf.listconfig.ListConfig" in page.locator(".leaf-stats").first.inner_text()


def test_comparing_two_checkpoints_badges_objects_whose_content_differs():
    from inspector.ui.diff_view import DiffView
    from inspector.ui.session.state import InspectorState

    def tree(layers):
        return {"w": np.zeros(2, np.float32),
                "layers": inspector.Opaque("omegaconf.listconfig.ListConfig",
                                           {"_content": layers})}  # fmt: skip

    s = InspectorState()
    s.add_tree("a", tree([64, 10]))
    s.add_tree("b", tree([64, 12]))
    s.compare.param.update(diff_a="a", diff_b="b")
    differences = s.compare.diff_result.differences
    assert [(d.path, d.kind) for d in differences] == [("['layers']", "state")]
    view = DiffView(s)
    shown = view.tree.shown()
    assert [b["label"] for b in shown["['layers']"]["buttons"]] == ["state"]
    assert "1 state" in view.summary.html.object
    assert s.compare.diff_result.summary_lines()[0] == (
        "1 difference: 0 missing, 0 extra, 0 shape, 0 dtype, 0 type, 1 state; 1 leaf match.")
