"""The selected tree's file metadata and index problems above the input tree (state params only)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import safetensors.numpy

from inspector.ui.lazy_tree import find, walk
from inspector.ui.tree_view import TreeView
from tests.helpers import open_files

gguf = pytest.importorskip("gguf")
S1, S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def _labels(view: TreeView) -> list[str]:
    return [item["label"] for item in walk(view.tree.items)]


def test_index_problems_show_above_the_tree(session, tmp_path):
    safetensors.numpy.save_file({"a.w": np.ones(2, np.float32)}, str(tmp_path / S1))
    weight_map = {"a.w": S1, "b.w": S2}
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    view = TreeView(session)
    open_files(session, index)
    assert session.open.open_error == "" and session.selected == index.name
    panel = view.file_info
    assert panel.alert.visible and panel._layout in view._layout.objects
    assert panel.alert.title == (
        "1 problem with this sharded checkpoint (tensors it could not load were left out)")
    assert f"missing_file: {S2}: the index names it" in panel._problems.object
    assert str(tmp_path) not in panel._problems.object  # no server paths in the page
    assert session.trees[index.name].n_leaves == 1  # what is consistent loaded
    assert not panel.card.visible  # the index has no metadata
    session.selected = "kept"
    assert not panel.alert.visible and not panel._layout.visible


def test_gguf_metadata_and_ggml_types_show(session, tmp_path):
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(2048)
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    raw = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("blk.0.attn_q.weight", raw, raw_shape=raw.shape,
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    view = TreeView(session)
    open_files(session, path)
    panel = view.file_info
    assert panel.card.visible and not panel.alert.visible
    assert panel.card.title == "File metadata · gguf · llama · 2 keys"
    assert "general.architecture: llama" in panel._metadata.object
    assert "llama.context_length: 2048" in panel._metadata.object
    for node in ("['blk']", "['blk']['0']", "['blk']['0']['attn_q']"):
        view.expand(node)
    assert any("float32[2,64]" in label and "Q8_0 · 8.5 bits/value · 136 B in the file" in label
               for label in _labels(view)), _labels(view)
    view.tree.active = [find(view.tree.items, "['blk']['0']['attn_q']['weight']")]
    assert "Q8_0 · 8.5 bits/value · 136 B in the file · dequantized" in view.stats.stats_html
