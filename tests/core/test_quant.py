"""Quantized weights: groups found by name and dtype, dequantized against NumPy float64."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy as stn

import inspector
from tests.core import quant_producers as P

F8 = ml_dtypes.float8_e4m3fn


def _close(got, want, dtype="float32"):
    got = np.asarray(got).astype(np.float64)
    tol = {"float32": 1e-6, "bfloat16": 8e-3, "float16": 1e-3}[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


# --- FP8 -------------------------------------------------------------------------------------


def test_s6_deepseek_block_scales_one_group_and_known_values():
    codes = np.zeros((256, 384), F8)
    codes[0, 0], codes[130, 300] = 2.0, -1.5  # blocks (0, 0) and (1, 2)
    scale = np.arange(1, 7, dtype=np.float32).reshape(2, 3) / 8  # 0.125 .. 0.75
    tree = {"mlp": {"up_proj": {"weight": codes, "weight_scale_inv": scale}}}
    [g] = inspector.quant_groups(tree)
    assert (g.scheme, g.path, g.shape, g.dtype, g.problems) == (
        "fp8", "['mlp']['up_proj']['weight']", (256, 384), "bfloat16", [])
    assert g.members == {"weight": "['mlp']['up_proj']['weight']",
                         "scale": "['mlp']['up_proj']['weight_scale_inv']"}
    assert g.layout == "fp8 e4m3 · 128x128 block scales"
    out = inspector.dequantize(tree, "float32")
    w = np.asarray(out["mlp"]["up_proj"]["weight"])
    assert sorted(out["mlp"]["up_proj"]) == ["weight"]
    assert w[0, 0] == 2.0 * 0.125 and w[130, 300] == -1.5 * 0.75  # by hand
    assert np.count_nonzero(w) == 2


@pytest.mark.parametrize("spelling", ["weight_scale_inv", "weight_scale", "scale_weight"])
@pytest.mark.parametrize("scale_shape", [(), (1,), (300,), (300, 1), (3, 2), (5, 4)])
# (5, 4) over (300, 200): any block from (60, 50) to (74, 66) tiles; blocks are powers of two
def test_fp8_scale_spellings_and_tilings_match_numpy(spelling, scale_shape):
    rng = np.random.default_rng(0)
    codes = P.fp8_codes(rng, (300, 200))  # not a multiple of 128: the last blocks are partial
    scale = rng.uniform(0.01, 1, scale_shape).astype(np.float32)
    tree = {"w": {"weight": codes, spelling: scale}, "bias": np.ones(3, np.float32)}
    [g] = inspector.quant_groups(tree)
    assert g.problems == [] and g.shape == (300, 200)
    out = inspector.dequantize(tree, "float32")
    assert sorted(out) == ["bias", "w"] and sorted(out["w"]) == ["weight"]
    assert out["bias"] is tree["bias"]
    block = (64, 64) if scale_shape == (5, 4) else None
    assert g.block == block or block is None
    _close(out["w"]["weight"], P.fp8_reference(codes, scale, block))


def test_fp8_layouts_in_words():
    c = np.zeros((256, 384), F8)
    kinds = {s: inspector.quant_groups({"weight": c, "weight_scale": np.ones(s, np.float32)}
                                       )[0].layout for s in [(), (256, 1), (2, 3), (16, 24)]}
    assert kinds == {(): "fp8 e4m3 · per-tensor scale", (256, 1): "fp8 e4m3 · per-channel scale",
                     (2, 3): "fp8 e4m3 · 128x128 block scales",
                     (16, 24): "fp8 e4m3 · 16x16 block scales"}


def test_problems_listed_not_raised():
    c = np.zeros((256, 384), ml_dtypes.float8_e5m2)
    tree = {"orphan": {"weight": c},
            "lonely": {"weight_scale_inv": np.ones((2, 3), np.float32)},
            "twice": {"weight": np.ones((4, 4), np.float32), "weight_scale": np.ones(1)},
            "misfit": {"weight": c, "weight_scale_inv": np.ones((300, 3), np.float32)},
            "plain": {"weight": np.ones(3), "input_scale": np.ones(1)}}
    groups = {g.path: g for g in inspector.quant_groups(tree)}
    assert sorted(groups) == ["['lonely']['weight']", "['misfit']['weight']",
                              "['orphan']['weight']", "['twice']['weight']"]
    assert groups["['orphan']['weight']"].problems[0].startswith("no scale: float8 codes")
    assert groups["['lonely']['weight']"].problems[0].startswith(
        "no weight: the scale 'weight_scale_inv' has no float8 weight 'weight'")
    assert "not float8 codes" in groups["['twice']['weight']"].problems[0]
    assert groups["['misfit']['weight']"].problems == [
        "scale shape (300, 3) does not tile the weight (256, 384)"]
    assert not any(g.usable for g in groups.values())
    out = inspector.dequantize(tree)  # nothing usable: every leaf kept as it was
    assert out["orphan"]["weight"] is c and sorted(out["misfit"]) == ["weight",
                                                                      "weight_scale_inv"]


def test_describe_rows_carry_quant():
    tree = {"up": {"weight": np.zeros((256, 384), F8),
                   "weight_scale_inv": np.ones((2, 3), np.float32)},
            "orphan": {"weight": np.zeros((4, 4), F8)}, "b": np.ones(2)}
    rows = {r.path: r.quant for r in inspector.describe(tree)}
    assert rows["['up']['weight']"] == \
        "fp8 e4m3 · 128x128 block scales in ['weight_scale_inv']"
    assert rows["['orphan']['weight']"].startswith("fp8 e4m3 · unscaled; no scale")
    assert rows["['b']"] is None and rows["['up']['weight_scale_inv']"] is None
    flat = {"model.up.weight": np.zeros((256, 384), F8),
            "model.up.weight_scale_inv": np.ones((2, 3), np.float32)}
    assert inspector.describe(flat)[1].quant == \
        "fp8 e4m3 · 128x128 block scales in ['…weight_scale_inv']"


# --- MXFP4 ----------------------------------------------------------------------------------


def test_mxfp4_hand_made_byte():
    blocks = np.zeros((1, 1, 1, 16), np.uint8)
    blocks[0, 0, 0, 0] = 0x21  # low nibble 1 (0.5) first, then 2 (1.0)
    blocks[0, 0, 0, 1] = 0xF9  # 9 (-0.5), then 15 (-6.0)
    scales = np.full((1, 1, 1), 128, np.uint8)  # 2^(128 - 127) = 2
    tree = {"experts": {"gate_up_proj_blocks": blocks, "gate_up_proj_scales": scales}}
    [g] = inspector.quant_groups(tree)
    assert (g.scheme, g.path, g.shape) == ("mxfp4", "['experts']['gate_up_proj']", (1, 1, 32))
    w = np.asarray(inspector.dequantize(tree, "float32")["experts"]["gate_up_proj"])
    assert w[0, 0, :4].tolist() == [1.0, 2.0, -1.0, -12.0] and not w[0, 0, 4:].any()


def test_mxfp4_gpt_oss_layout_file_matches_numpy(tmp_path):
    rng = np.random.default_rng(1)
    e, r, g = 2, 6, 3
    blocks = rng.integers(0, 256, (e, r, g, 16), dtype=np.uint8)
    scales = rng.integers(118, 136, (e, r, g), dtype=np.uint8)
    path = tmp_path / "model-00001-of-00001.safetensors"
    stn.save_file({"model.layers.0.mlp.experts.down_proj_blocks": blocks,
                   "model.layers.0.mlp.experts.down_proj_scales": scales,
                   "model.layers.0.mlp.router.weight": np.ones((4, 4), np.float32)}, path)
    tree = inspector.load(path)
    [grp] = inspector.quant_groups(tree)
    assert grp.shape == (e, r, g * 32) and grp.problems == []
    experts = inspector.dequantize(tree, "float32")["model"]["layers"]["0"]["mlp"]["experts"]
    assert sorted(experts) == ["down_proj"]
    _close(experts["down_proj"], P.mxfp4_reference(blocks, scales))


# --- GPTQ / AWQ -----------------------------------------------------------------------------


def test_gptq_packed_as_autogptq_matches_numpy_and_a_hand_element():
    rng = np.random.default_rng(2)
    q, zeros, scales, g_idx = P.int4_layer(rng, n_out=64, n_in=256, group=128)
    qweight, qzeros = P.gptq_pack(q, zeros)
    assert qweight.shape == (32, 64) and qzeros.shape == (2, 8)
    # by hand: input row 11 is nibble 3 of word 1; output column 5 of group 0
    assert (int(qweight[1, 5]) >> 12) & 0xF == q[5, 11]
    assert ((int(qzeros[0, 0]) >> 20) & 0xF) + 1 == zeros[0, 5]
    tree = {"q_proj": {"qweight": qweight, "qzeros": qzeros, "scales": scales,
                       "g_idx": g_idx.astype(np.int32), "bias": np.zeros(64, np.float16)}}
    [g] = inspector.quant_groups(tree)
    assert (g.scheme, g.path, g.shape, g.dtype) == ("gptq", "['q_proj']['weight']", (64, 256),
                                                     "float16")
    out = inspector.dequantize(tree, "float32")["q_proj"]
    assert sorted(out) == ["bias", "weight"]
    want = P.int4_reference(q, zeros, scales, g_idx)
    assert np.asarray(out["weight"])[5, 11] == pytest.approx(
        float(scales[0, 5]) * (q[5, 11] - zeros[0, 5]), rel=1e-6)
    _close(out["weight"], want)


def test_gptq_act_order_g_idx_is_used():
    rng = np.random.default_rng(3)
    q, zeros, scales, _ = P.int4_layer(rng, n_out=32, n_in=64, group=32)
    g_idx = rng.permutation(np.arange(64) // 32)
    qweight, qzeros = P.gptq_pack(q, zeros)
    tree = {"qweight": qweight, "qzeros": qzeros, "scales": scales,
            "g_idx": g_idx.astype(np.int32)}
    _close(inspector.dequantize(tree, "float32")["weight"],
           P.int4_reference(q, zeros, scales, g_idx))


def test_awq_packed_as_autoawq_matches_numpy_and_a_hand_element():
    rng = np.random.default_rng(4)
    q, zeros, scales, g_idx = P.int4_layer(rng, n_out=64, n_in=256, group=64)
    qweight, qzeros = P.awq_pack(q, zeros)
    assert qweight.shape == (256, 8) and qzeros.shape == (4, 8)
    # by hand: output column 10 = word 1, position 2 in [0, 2, 4, 6, 1, 3, 5, 7]: nibble 1
    assert (int(qweight[7, 1]) >> 4) & 0xF == q[10, 7]
    tree = {"o_proj": {"qweight": qweight, "qzeros": qzeros, "scales": scales}}
    [g] = inspector.quant_groups(tree)
    assert (g.scheme, g.shape, g.layout) == ("awq", (64, 256), "awq int4 · groups of 64")
    _close(inspector.dequantize(tree, "float32")["o_proj"]["weight"],
           P.int4_reference(q, zeros, scales, g_idx))


def test_int4_missing_member_is_a_problem():
    rng = np.random.default_rng(5)
    q, zeros, scales, _ = P.int4_layer(rng, 32, 64, 32)
    qweight, _ = P.gptq_pack(q, zeros)
    [g] = inspector.quant_groups({"qweight": qweight, "scales": scales})
    assert g.problems == ["missing qzeros: gptq needs qweight, qzeros and scales"]


# --- files, shards, streaming ---------------------------------------------------------------


def _deepseek_shards(tmp_path, rng):
    """A sharded DeepSeek-V3-layout checkpoint whose second layer's scale sits in the other
    shard; returns the index path and the arrays."""
    arrays = {f"model.layers.{i}.mlp.up_proj.{n}": a for i in range(2) for n, a in (
        ("weight", P.fp8_codes(rng, (256, 384))),
        ("weight_scale_inv", rng.uniform(1e-3, 1e-2, (2, 3)).astype(np.float32)))}
    arrays["model.norm.weight"] = np.ones(384, np.float32)
    names = sorted(arrays)
    shard_of = {n: "model-00001-of-00002.safetensors" for n in names}
    shard_of["model.layers.1.mlp.up_proj.weight_scale_inv"] = "model-00002-of-00002.safetensors"
    for shard in set(shard_of.values()):
        stn.save_file({n: arrays[n] for n in names if shard_of[n] == shard}, tmp_path / shard,
                      metadata={"format": "pt"})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": shard_of}))
    return index, arrays


def test_sharded_deepseek_split_group_streams_out(tmp_path):
    index, arrays = _deepseek_shards(tmp_path, np.random.default_rng(6))
    tree = inspector.load(index)
    groups = {g.path: g for g in inspector.quant_groups(tree)}
    split = groups["['model']['layers']['1']['mlp']['up_proj']['weight']"]
    assert split.problems == ["split across shards: weight in model-00001-of-00002.safetensors"
                              ", weight_scale_inv in model-00002-of-00002.safetensors"]
    assert groups["['model']['layers']['0']['mlp']['up_proj']['weight']"].problems == []
    out = inspector.dequantize(tree, "bfloat16", out=tmp_path / "bf16.safetensors")
    for i in range(2):
        up = out["model"]["layers"][str(i)]["mlp"]["up_proj"]
        assert sorted(up) == ["weight"] and up["weight"].dtype == ml_dtypes.bfloat16
        p = f"model.layers.{i}.mlp.up_proj."
        _close(up["weight"], P.fp8_reference(arrays[p + "weight"], arrays[p + "weight_scale_inv"]),
               "bfloat16")
    np.testing.assert_array_equal(np.asarray(out["model"]["norm"]["weight"]), 1.0)


def test_run_times_dequantize_and_reuses_kernels():
    rng = np.random.default_rng(7)
    tree = {f"l{i}": {"weight": P.fp8_codes(rng, (256, 256)),
                      "weight_scale_inv": np.ones((2, 2), np.float32)} for i in range(6)}
    r = inspector.run(inspector.dequantize, tree, "bfloat16", repeats=2)
    assert r.op == "dequantize" and r.n_kernels <= 2
    assert r.bytes_read == 6 * (256 * 256 + 16) and r.bytes_written == 6 * 256 * 256 * 2
    again = inspector.run(inspector.dequantize, tree, "bfloat16", repeats=1)
    assert again.n_compiled == 0
    _close(again.result["l3"]["weight"], P.fp8_reference(tree["l3"]["weight"], np.ones((2, 2))),
           "bfloat16")


def test_gptq_and_awq_layers_from_a_safetensors_file(tmp_path):
    rng = np.random.default_rng(8)
    q1, z1, s1, g1 = P.int4_layer(rng, n_out=32, n_in=128, group=64)
    q2, z2, s2, g2 = P.int4_layer(rng, n_out=64, n_in=64, group=32)
    gq, gz = P.gptq_pack(q1, z1)
    aq, az = P.awq_pack(q2, z2)
    pre = "model.layers.0.self_attn."
    stn.save_file({pre + "q_proj.qweight": gq, pre + "q_proj.qzeros": gz,
                   pre + "q_proj.scales": s1, pre + "q_proj.g_idx": g1.astype(np.int32),
                   pre + "o_proj.qweight": aq, pre + "o_proj.qzeros": az,
                   pre + "o_proj.scales": s2}, tmp_path / "model.safetensors",
                  metadata={"format": "pt"})
    tree = inspector.load(tmp_path / "model.safetensors")
    assert [(g.scheme, g.shape) for g in inspector.quant_groups(tree)] == [
        ("awq", (64, 64)), ("gptq", (32, 128))]
    attn = inspector.dequantize(tree, dtype=None)["model"]["layers"]["0"]["self_attn"]
    assert np.asarray(attn["q_proj"]["weight"]).dtype == np.float16  # the scales' dtype
    _close(attn["q_proj"]["weight"], P.int4_reference(q1, z1, s1, g1), "float16")
    _close(attn["o_proj"]["weight"], P.int4_reference(q2, z2, s2, g2), "float16")


def test_fp8_e5m2_codes_with_bfloat16_scales_and_mxfp4_edge_scales():
    rng = np.random.default_rng(9)
    codes = rng.standard_normal((128, 64)).astype(ml_dtypes.float8_e5m2)
    scale = np.array([[0.25]], ml_dtypes.bfloat16)
    tree = {"weight": codes, "weight_scale": scale}
    assert inspector.quant_groups(tree)[0].layout == "fp8 e5m2 · per-tensor scale"
    _close(inspector.dequantize(tree, "float32")["weight"],
           codes.astype(np.float64) * 0.25)
    blocks = np.full((2, 16), 0x22, np.uint8)  # 1.0 in both nibbles
    scales = np.array([255, 1], np.uint8)  # e8m0: NaN, and 2^-126 (the least normal float)
    w = np.asarray(inspector.dequantize({"x_blocks": blocks, "x_scales": scales},
                                        "float32")["x"])
    assert w.shape == (64,) and np.isnan(w[:32]).all()
    assert (w[32:] == np.float32(2.0 ** -126)).all()
    [bad] = inspector.quant_groups({"x_blocks": blocks, "x_scales": np.zeros(3, np.uint8)})
    assert bad.problems == ["scale shape (3,) does not tile the blocks (2, 16) (expected "
                            "(2,) for (..., G, 16) blocks)"]


def test_groups_inside_lists_tuples_and_ordered_dicts_keep_their_containers():
    from collections import OrderedDict

    def layer():
        return {"weight": np.full((4, 4), 2, F8), "weight_scale_inv": np.float32([0.5])}

    tree = {"layers": [layer(), (layer(), 3)], "od": OrderedDict(x=layer())}
    assert [g.path for g in inspector.quant_groups(tree)] == [
        "['layers'][0]['weight']", "['layers'][1][0]['weight']", "['od']['x']['weight']"]
    out = inspector.dequantize(tree, "float32")
    assert type(out["layers"]) is list and type(out["layers"][1]) is tuple
    assert type(out["od"]) is OrderedDict and list(out["od"]["x"]) == ["weight"]
    assert out["layers"][1][1] == 3
    np.testing.assert_array_equal(np.asarray(out["layers"][1][0]["weight"]), 1.0)


@pytest.mark.parametrize("code_dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
                                        ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz])
def test_fp8_bit_decoding_equals_ml_dtypes_for_all_256_codes(code_dtype):
    import jax

    from inspector.core.quant.kernels import fp8_bits

    codes = np.arange(256, dtype=np.uint8).view(code_dtype)
    got = np.asarray(jax.jit(lambda c: fp8_bits(c, code_dtype))(codes))
    want = codes.astype(np.float32)  # NaN / inf / -0 / subnormal bit patterns included
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    # and through dequantize on the CPU: a (16, 16) weight of every code, block-scaled by 2^k
    # (partial last blocks: 16 x 16 with 3 x 3 scales of 6 x 6)
    scale = np.exp2(np.arange(9, dtype=np.float32) - 4).reshape(3, 3)
    out = inspector.dequantize({"weight": codes.reshape(16, 16), "weight_scale_inv": scale},
                               "float32", device=jax.devices("cpu")[0])
    w = np.repeat(np.repeat(scale.astype(np.float64), 6, 0), 6, 1)[:16, :16]
    np.testing.assert_array_equal(np.asarray(out["weight"]),
                                  (codes.reshape(16, 16).astype(np.float64) * w))


def _float32_edge_cases() -> np.ndarray:
    """float32 bit patterns that test a rounding to bfloat16: every exponent with halfway,
    just-below, just-above and odd/even upper halves, subnormals, infinities, NaNs with and
    without payloads (both signs), and random bits."""
    exps = np.arange(256, dtype=np.uint32) << 23
    lows = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x10000, 0x18000, 0x17FFF,
                     0x7F8000, 0x7FFFFF, 0x7F7FFF, 0x400000], dtype=np.uint32)
    grid = (exps[:, None] | lows[None, :]).ravel()
    rand = np.random.default_rng(0).integers(0, 2**32, 100_000, dtype=np.uint64)
    bits = np.concatenate([grid, grid | 0x80000000, rand.astype(np.uint32)])
    return bits.view(np.float32)


def test_bf16_rounding_by_bits_equals_xla_and_ml_dtypes():
    import jax

    from inspector.core.quant.kernels import bf16_bits

    x = _float32_edge_cases()
    on_cpu = jax.device_put(x, jax.devices("cpu")[0])
    got = np.asarray(jax.jit(bf16_bits)(on_cpu))
    xla = np.asarray(jax.jit(lambda v: v.astype(jax.numpy.bfloat16))(on_cpu))
    np.testing.assert_array_equal(got.view(np.uint16), xla.view(np.uint16))  # bit for bit
    with np.errstate(invalid="ignore"):  # signalling NaNs among the inputs
        want = x.astype(ml_dtypes.bfloat16)  # ml_dtypes: round to nearest even
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))


@pytest.mark.parametrize("code_dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
                                        ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz])
def test_fp8_to_bfloat16_on_the_cpu_equals_numpy_bit_for_bit(code_dtype):
    """Every code in every 128 x 128 block, scales with full 24-bit mantissas (the product's
    rounding to float32 then to bfloat16 is tested, not only exact products) and a scale
    whose products fall halfway between bfloat16s (ties to even); per-tensor, block and
    partial-block scales."""
    import jax

    rng = np.random.default_rng(1)
    codes = np.tile(np.arange(256, dtype=np.uint8), 256 * 384 // 256).reshape(256, 384)
    codes = rng.permuted(codes, axis=1).view(code_dtype)
    cpu = jax.devices("cpu")[0]
    for shape in [(), (2, 3), (3, 4)]:  # (3, 4): blocks of 128 x 128 tile (256, 384) ceil
        scale = (rng.uniform(0.5, 2, shape) * np.exp2(rng.integers(-20, 20, shape)))
        scale = scale.astype(np.float32)
        if shape == ():  # 1 + 2^-8: halfway between two bfloat16s, times a code of 1 or 2
            scale = np.float32(1 + 2**-8)
        out = inspector.dequantize({"weight": codes, "weight_scale_inv": scale}, "bfloat16",
                                   device=cpu)["weight"]
        block = {(): (256, 384), (2, 3): (128, 128), (3, 4): (86, 96)}[shape]
        s = np.broadcast_to(scale, (1, 1)) if shape == () else scale
        full = np.repeat(np.repeat(s.astype(np.float64), block[0], 0), block[1], 1)
        want = (codes.astype(np.float64) * full[:256, :384]).astype(np.float32)
        want = want.astype(ml_dtypes.bfloat16)
        got = np.asarray(out)
        nan = np.isnan(want.astype(np.float32))
        assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
        np.testing.assert_array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16", "float32"])
def test_fp8_kernel_of_a_gpu_and_of_the_cpu_give_the_same_bits(out_dtype):
    """A GPU takes `astype` (hardware float8 conversion) where the CPU decodes bits and rounds
    to bfloat16 by integer ops: both formulations, run here, agree bit for bit."""
    import jax

    from inspector.core.quant import kernels

    rng = np.random.default_rng(2)
    codes = rng.integers(0, 256, (256, 384), dtype=np.uint8).view(F8)
    scale = rng.uniform(1e-3, 1e3, (2, 3)).astype(np.float32)
    got = {}
    for bits in (False, True):
        kernel = kernels.make_fp8((256, 384), (128, 128), "block", out_dtype, F8, bits)
        got[bits] = np.asarray(jax.jit(lambda c, s, k=kernel: k(None, c, s))(codes, scale))
    nan = np.isnan(got[True].astype(np.float32))
    assert np.array_equal(np.isnan(got[False].astype(np.float32)), nan) and nan.sum() > 0
    np.testing.assert_array_equal(got[False][~nan].view(np.uint8), got[True][~nan].view(np.uint8))


def test_cpu_fp8_kernels_ask_for_wide_vectors_and_batches_keep_the_options():
    import jax

    from inspector.core.calls import Call, batch_call
    from inspector.core.quant import kernels
    from inspector.core.quant.dequantize import plan_dequantize

    rng = np.random.default_rng(3)
    tree = {f"l{i}": {"weight": P.fp8_codes(rng, (256, 256)),
                      "weight_scale_inv": np.ones((2, 2), np.float32)} for i in range(3)}
    plan = plan_dequantize(tree, "bfloat16", device=jax.devices("cpu")[0])
    assert kernels.cpu_options() in ((), kernels.WIDE_VECTORS)
    assert all(call.options == kernels.cpu_options() for call in plan.calls)
    assert all(kernels.cpu_options() in call.key[4] for call in plan.calls)  # in the key
    a = Call(("a",), lambda: None, [], options=(("x", 1),))
    b = Call(("b",), lambda: None, [], options=(("x", 2), ("y", 3)))
    assert batch_call([a, b]).options == (("x", 1), ("y", 3))
    assert batch_call([Call(("c",), lambda: None, [])]).options == ()
    out = plan.execute()  # compiled with the options: values as without them
    for i in range(3):
        want = tree[f"l{i}"]["weight"].astype(np.float32).astype(ml_dtypes.bfloat16)
        np.testing.assert_array_equal(np.asarray(out[f"l{i}"]["weight"]), want)
