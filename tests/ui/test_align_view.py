"""Align a onto b in the Compare view, driven through the state and the widgets (S9)."""

from __future__ import annotations

import asyncio
import json

import pytest

from inspector.ui.align_view import AlignView
from inspector.ui.session.align_state import align_state
from inspector.ui.session.state import InspectorState
from tests.core.port_models import write_ambiguous_cnn


@pytest.fixture
def state(tmp_path):
    """The torch-layout checkpoint (a .pt file, lazy) as a, the Flax-layout params as b; the
    Flax head's kernel could come from either of two torch heads: one ambiguous target."""
    write_ambiguous_cnn(tmp_path)
    s = InspectorState(file_root=str(tmp_path))
    s.open.open_paths = [str(tmp_path / "cnn.pt"), str(tmp_path / "cnn_flax.safetensors")]
    s.open.param.trigger("open_files")
    s.compare.param.update(diff_a="cnn.pt", diff_b="cnn_flax.safetensors")
    return s


def test_align_lists_problems_first_and_an_override_fixes_them(state):
    view = AlignView(state)
    assert view.align_button.label == "Align cnn.pt onto cnn_flax.safetensors"
    assert view.convert_button.disabled
    view.align_button.clicks += 1
    a = align_state(state).alignment
    assert a is not None and not a.complete
    frame = view.table.value
    # The head's (16, 16) kernel: the encoder's or the decoder's head, not guessed
    assert "align-ambiguous" in frame["status"].iloc[0]
    assert frame["target"].iloc[0] == "['params']['head']['kernel']"
    assert "align-paired" in frame["status"].iloc[1]
    assert view.summary.object == ("20 of 21 target leaves paired · 0 unmatched · 1 ambiguous"
                                   " · 4 source leaves unused")
    assert view.convert_button.disabled
    view.table.selection = [0]
    assert view.editor.visible
    assert view.source_picker.options == [
        "['decoder']['head']['weight']", "['encoder']['head']['weight']",
        "['features']['1']['num_batches_tracked']", "['features']['5']['num_batches_tracked']"]
    view.source_picker.value = "['encoder']['head']['weight']"
    view.pair_button.clicks += 1
    a = align_state(state).alignment
    assert a.complete and a.pair("['params']['head']['kernel']").transform.perm == (1, 0)
    # The fixed row stays on top, now paired, with its source and transform
    fixed = view.table.value.iloc[0]
    assert "align-paired" in fixed["status"] and fixed["target"] == "['params']['head']['kernel']"
    assert (fixed["source"], fixed["transform"], fixed["reason"]) == (
        "['encoder']['head']['weight']", "transpose (1, 0)", "set by hand")
    assert not view.convert_button.disabled
    mapping = json.loads(asyncio.run(view.json_download.callback()).getvalue())
    assert [p["reason"] for p in mapping["pairs"]].count("set by hand") == 1
    assert b"def convert(source):" in asyncio.run(view.code_download.callback()).getvalue()


def test_convert_adds_the_port_and_the_value_comparison_shows_no_difference(state):
    view = AlignView(state)
    view.start()
    align = align_state(state)
    align.override("['params']['head']['kernel']", "['encoder']['head']['weight']")
    view.convert_button.clicks += 1
    assert align.converted == "cnn.pt ported" and "cnn.pt ported" in state.trees
    assert (state.compare.diff_a, state.compare.diff_b) == ("cnn_flax.safetensors", "cnn.pt ported")
    d = state.compare.diff_result
    assert d.differences == [] and d.matched == 21
    leaves = [r for r in state.compare.diff_table if r["kind"] == "leaf"]
    assert len(leaves) == 21 and all(r["max_abs"] == 0 for r in leaves)


def test_refusal_and_bad_override_are_shown(state):
    view = AlignView(state)
    view.start()
    align = align_state(state)
    align.param.trigger("convert")
    assert "Cannot convert yet: 1 target leaf has no single source" in align.error
    assert "  - ['params']['head']['kernel']: ambiguous between ['decoder']['head']['weight'], " \
        "['encoder']['head']['weight']\nSelect each such row" in align.error
    assert view.alert.visible and "align-error" in view._error.object
    assert not align.override("['params']['head']['kernel']", "['features']['0']['bias']")
    assert "no transpose or reshape turns (8,) into (16, 16)" in align.error
