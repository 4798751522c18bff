"""Quantized weights in the app: one tree row per weight, badges, dequantized statistics, and
the Dequantize op driven through the session state (and once in chromium)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy as stn

import inspector
from inspector.ui.session.leaf_numbers import leaf_array
from inspector.ui.session.state import InspectorState
from inspector.ui.session.tree_index import index_for

F8 = ml_dtypes.float8_e4m3fn
UP = "['model']['up_proj']['weight']"


def fp8_tree():
    codes = np.zeros((256, 384), F8)
    codes[0, 0], codes[200, 300] = 2.0, -3.0
    return {"model": {
        "up_proj": {"weight": codes,
                    "weight_scale_inv": np.array([[0.5, 1, 2], [4, 8, 16]], np.float32)},
        "orphan": {"weight": np.ones((8, 8), F8)},
        "norm": {"weight": np.ones(384, np.float32)}}}


def _labels(index, expanded):
    items, _ = index.items(expanded, "ckpt")
    out = {}

    def walk(item):
        out[item["id"]] = item
        for kid in item.get("items", []):
            walk(kid)

    walk(items[0])
    return out


@pytest.mark.parametrize("packed", [False, True])
def test_one_row_per_weight_with_logical_shape_and_a_badge_on_the_orphan(packed):
    tree = inspector.pack(fp8_tree()) if packed else fp8_tree()
    index = index_for(tree)
    items = _labels(index, index.default_expanded(100))
    assert "['model']['up_proj']['weight_scale_inv']" not in items  # shown with its weight
    up = items[UP]["label"].split("\u2003")
    assert up == ["['weight']", "bfloat16[256,384]", "fp8 e4m3 · 128x128 block scales",
                  "96 KiB"]
    orphan = items["['model']['orphan']['weight']"]
    assert [b["label"] for b in orphan["buttons"]] == ["no scale"]
    assert "off by the missing factor" in orphan["title"]
    assert "buttons" not in items[UP]


@pytest.mark.parametrize("packed", [False, True])
def test_statistics_of_the_row_are_the_dequantized_values_raw_one_switch_away(packed):
    tree = inspector.pack(fp8_tree()) if packed else fp8_tree()
    index = index_for(tree)
    x = leaf_array(tree, index, UP)
    assert x.dtype == np.float32 and x[0, 0] == 1.0 and x[200, 300] == -48.0
    raw = leaf_array(tree, index, UP, raw=True)
    assert raw.dtype == F8 and float(raw[200, 300]) == -3.0


def test_dequantize_op_through_the_state():
    state = InspectorState()
    state.add_tree("ckpt", fp8_tree(), select=True)
    state.op = "dequantize"
    settings = state.ops["dequantize"]
    assert settings.tree == "ckpt"
    assert state.preview.splitlines()[0] == \
        "ckpt: 1 weight to bfloat16 (1 left as they are: see their badges):"
    settings.dtype = "float32"
    state.param.trigger("run")
    assert state.error == ""
    out = state.result.result  # the tree is held packed: one pass over its float8 buffer
    assert isinstance(out, inspector.PackedTree)
    out = out.unpack()
    assert sorted(out["model"]["up_proj"]) == ["weight"]
    assert np.asarray(out["model"]["orphan"]["weight"]).dtype == F8  # kept as it is
    w = np.asarray(out["model"]["up_proj"]["weight"])
    assert w.dtype == np.float32 and w[0, 0] == 1.0 and w[200, 300] == -48.0
    assert state.history[-1].op == "dequantize"


# --- chromium ------------------------------------------------------------------------------


@pytest.mark.browser
def test_fp8_checkpoint_in_the_browser(browser, tmp_path):
    from tests.serving import launched_app, open_tab, session

    tree = fp8_tree()
    flat = {"model.up_proj.weight": tree["model"]["up_proj"]["weight"],
            "model.up_proj.weight_scale_inv": tree["model"]["up_proj"]["weight_scale_inv"],
            "model.down_proj.weight": np.ones((384, 256), F8),
            "model.down_proj.weight_scale_inv": np.ones((3, 2), np.float32),
            "model.orphan.weight": np.ones((8, 8), F8),
            "model.norm.weight": np.ones(384, np.float32)}
    stn.save_file(flat, tmp_path / "fp8.safetensors")
    with launched_app(tmp_path, "fp8.safetensors") as url, session(browser, url) as page:
        row = page.locator(f'[role=treeitem][data-path="{UP}"]').first
        row.wait_for()
        assert "bfloat16[256,384]\u2003fp8 e4m3 · 128x128 block scales" in row.inner_text()
        down = page.locator('[role=treeitem][data-path="[\'model\'][\'down_proj\'][\'weight\']"]')
        assert "bfloat16[384,256]" in down.first.inner_text()
        assert page.locator('[role=treeitem][data-path*="weight_scale_inv"]').count() == 0
        orphan = page.locator('[role=treeitem][data-path="[\'model\'][\'orphan\'][\'weight\']"]')
        assert orphan.first.locator(".wtree-badge", has_text="no scale").count() == 1
        row.click()  # the statistics of the dequantized weight: codes 2 and -3 times scales
        stats = page.locator(".leaf-stats").first
        stats.get_by_text("dequantized").wait_for()
        assert stats.locator("[data-stat=min]").inner_text() == "-48"
        assert stats.locator("[data-stat=max]").inner_text() == "1"
        page.screenshot(path="/tmp/quant_stats.png", full_page=True)
        page.get_by_text("Raw codes").click()  # the stored codes, one click away
        page.locator(".leaf-stats [data-stat=max]", has_text="2").first.wait_for()
        open_tab(page, "Dequantize")
        page.get_by_role("button", name="Run the current operation.").click()
        result = page.locator(".result-tree, [role=tree]").last
        done = result.locator(f'[role=treeitem][data-path="{UP}"]').first
        done.wait_for(timeout=60_000)
        assert "bfloat16[256,384]" in done.inner_text() and "fp8" not in done.inner_text()
        page.screenshot(path="/tmp/quant_browser.png", full_page=True)


def test_dequantize_of_a_gguf_through_the_state(tmp_path):
    gguf = pytest.importorskip("gguf")
    from tests.io.test_gguf_format import write_gguf

    q8 = gguf.GGMLQuantizationType.Q8_0
    w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    norm = np.arange(64, dtype=np.float32)
    path = write_gguf(tmp_path / "m.gguf", {
        "blk.0.attn_q.weight": (gguf.quants.quantize(w, q8), q8), "blk.0.attn_norm.weight": norm})
    state = InspectorState()
    state.add_tree("m.gguf", inspector.load(path), select=True)
    state.op = "dequantize"
    state.ops["dequantize"].dtype = "float16"
    assert state.preview.splitlines() == ["m.gguf: 1 weight to float16:",
                                          "1 weight stored as Q8_0 → float16"]
    state.param.trigger("run")
    assert state.error == ""
    out = inspector.unpack(state.result.result) if isinstance(
        state.result.result, inspector.PackedTree) else state.result.result
    got = np.asarray(out["blk"]["0"]["attn_q"]["weight"])
    want = gguf.quants.dequantize(gguf.quants.quantize(w, q8), q8).astype(np.float16)
    assert got.dtype == np.float16 and got.tolist() == want.tolist()
    assert np.asarray(out["blk"]["0"]["attn_norm"]["weight"]).tobytes() == norm.tobytes()
