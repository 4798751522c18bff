"""`dequantize` of a packed FP8 tree: one pass per float8 buffer, a packed result.

Values are checked bit for bit against NumPy (the exact float64 product rounded to float32,
as a float32 multiply is, then ml_dtypes' rounding to the output dtype) and against the
per-group path on the same tree unpacked.
"""

from __future__ import annotations

import time

import jax
import ml_dtypes
import numpy as np
import pytest

import inspector
from inspector.core.packed_reads import read_packed
from inspector.core.quant import dequantize as D
from inspector.core.quant import dequantize_packed as DP
from inspector.core.quant import flat_runs

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
OUT = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}


def numpy_reference(codes, scale, block, dtype: str) -> np.ndarray:
    """`float(code) * scale` element by element in float64 (exact: 4 x 24 significant bits),
    the scale of element (i, j) `scale[i // b0, j // b1]`; rounded to float32, then `dtype`."""
    x = codes.astype(np.float64)
    s = np.asarray(scale, np.float64).reshape(-1) if np.size(scale) > 1 else None
    out = np.empty_like(x)
    if s is None:
        out = x * float(np.asarray(scale).reshape(()))
    else:
        grid = [-(-n // b) for n, b in zip(x.shape, block, strict=True)]
        s = s.reshape(grid)
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                out[i, j] = x[i, j] * s[i // block[0], j // block[1]]
    return out.astype(np.float32).astype(OUT[dtype])


def bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def fp8(rng, shape, dtype=E4M3):
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture(autouse=True, params=["host loop", "xla"])
def kernel_kind(request, monkeypatch):
    """Every test twice on the CPU: with the numba loop (`dequantize_host.py`) and with the XLA
    kernel (what other devices run)."""
    monkeypatch.setattr(DP, "HOST_LOOP", request.param == "host loop")
    return request.param


def flat_plan(tree, dtype="bfloat16"):
    plan = D.plan_dequantize(tree, dtype)
    kinds = {c.key[0] if c.key[0] != "fresh" else c.key[1] for c in plan.calls}
    assert kinds and kinds <= {"dequantize-flat", "dequantize-flat-host"}, \
        "the flat path was not taken"
    return plan


def check_against_per_group(packed, dtype: str):
    """The packed result unpacked equals the per-group path's result on the unpacked tree:
    the same key paths in the same order, dtypes, shapes and bits."""
    flat_plan(packed, dtype)
    got = inspector.dequantize(packed, dtype)
    assert isinstance(got, inspector.PackedTree)
    want = inspector.dequantize(packed.unpack(), dtype)
    g, w = (jax.tree_util.tree_flatten_with_path(t)[0] for t in (got.unpack(), want))
    assert [jax.tree_util.keystr(k) for k, _ in g] == [jax.tree_util.keystr(k) for k, _ in w]
    for (path, a), (_, b) in zip(g, w, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert (a.dtype, a.shape) == (b.dtype, b.shape), path
        np.testing.assert_array_equal(bits(a), bits(b), err_msg=str(path))
    return got.unpack()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_128x128_blocks_one_kernel_exact(dtype):
    rng = np.random.default_rng(1)
    shapes = [(256, 512), (384, 256), (128, 128)]
    tree = {f"l{i}": {"weight": fp8(rng, s),
                      "weight_scale_inv": rng.uniform(1e-3, 2, (s[0] // 128, s[1] // 128))
                      .astype(np.float32)} for i, s in enumerate(shapes)}
    packed = inspector.pack(tree)
    [call] = flat_plan(packed, dtype).calls
    [runs] = DP.flat_layout(packed.layout, dtype).runs
    # a run per row of each block; the 128 x 128 weight, one scale, is one run
    assert runs.width == 128 and len(runs.scale_index) == 256 * 4 + 384 * 2 + 1
    out = check_against_per_group(packed, dtype)
    for name, leaf in tree.items():
        assert sorted(out[name]) == ["weight"]
        want = numpy_reference(leaf["weight"], leaf["weight_scale_inv"], (128, 128), dtype)
        np.testing.assert_array_equal(bits(out[name]["weight"]), bits(want))


def test_every_code_and_special_values_match_numpy_and_the_per_group_path():
    codes = np.arange(256, dtype=np.uint8).view(E4M3).reshape(2, 128)  # 0x7F / 0xFF: NaN
    scale = np.float32([[0.3], [1e-30]])  # a tiny scale: products far from 1, still normal
    tree = {"w": {"weight": codes, "weight_scale_inv": scale}}
    for dtype in OUT:
        out = check_against_per_group(inspector.pack(tree), dtype)
        want = numpy_reference(codes, scale, (1, 128), dtype)
        got = np.asarray(out["w"]["weight"])
        assert np.array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(bits(got)[~np.isnan(got)], bits(want)[~np.isnan(want)])


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_shapes_not_a_multiple_of_the_block_ceil_tiling(dtype):
    rng = np.random.default_rng(2)
    tree = {"a": {"weight": fp8(rng, (200, 300)),
                  "weight_scale_inv": rng.uniform(0.1, 2, (2, 3)).astype(np.float32)},
            "b": {"weight": fp8(rng, (136, 132)),
                  "weight_scale_inv": rng.uniform(0.1, 2, (2, 2)).astype(np.float32)}}
    packed = inspector.pack(tree)
    assert DP.flat_layout(packed.layout, dtype).runs[0].width == 4  # 300 = 128 + 128 + 44
    out = check_against_per_group(packed, dtype)
    for name, leaf in tree.items():
        want = numpy_reference(leaf["weight"], leaf["weight_scale_inv"], (128, 128), dtype)
        np.testing.assert_array_equal(bits(out[name]["weight"]), bits(want))
    # runs of 128 and 1 (a row of 129): narrower than MIN_WIDTH, the per-group kernels
    odd = {"c": {"weight": fp8(rng, (130, 129)), "weight_scale_inv": np.float32([[1, 2]] * 2)}}
    assert DP.flat_layout(inspector.pack(odd).layout, dtype) is None
    out = inspector.dequantize(inspector.pack(odd), dtype)
    want = numpy_reference(odd["c"]["weight"], odd["c"]["weight_scale_inv"], (128, 128), dtype)
    np.testing.assert_array_equal(bits(out["c"]["weight"]), bits(want))


@pytest.mark.parametrize("scale_shape,block", [((), (64, 96)), ((1,), (64, 96)),
                                               ((64,), (1, 96)), ((64, 1), (1, 96))])
def test_per_tensor_and_per_channel_scales(scale_shape, block):
    rng = np.random.default_rng(3)
    codes, scale = fp8(rng, (64, 96)), rng.uniform(0.1, 2, scale_shape).astype(np.float32)
    tree = {"w": {"weight": codes, "weight_scale": scale},
            "v": {"weight": fp8(rng, (64, 96)), "scale_weight": scale}}
    packed = inspector.pack(tree)
    [runs] = DP.flat_layout(packed.layout, "float16").runs
    per_tensor = np.size(scale) == 1
    assert len(runs.scale_index) == (2 if per_tensor else 128)  # merged: one run a tensor
    out = check_against_per_group(packed, "float16")
    want = numpy_reference(codes, scale, block, "float16")
    np.testing.assert_array_equal(bits(out["w"]["weight"]), bits(want))


def test_stacked_experts_3d_blocks_and_a_1d_per_tensor_weight():
    rng = np.random.default_rng(11)
    experts, scale = fp8(rng, (4, 256, 384)), rng.uniform(0.1, 2, (2, 2, 3)).astype(np.float32)
    tree = {"e": {"weight": experts, "weight_scale_inv": scale},
            "v": {"weight": fp8(rng, (256,)), "weight_scale": np.float32(2.0)}}
    packed = inspector.pack(tree)
    assert DP.flat_layout(packed.layout, "float32").runs[0].width == 128
    out = check_against_per_group(packed, "float32")
    s = np.repeat(np.repeat(np.repeat(scale.astype(np.float64), 2, 0), 128, 1), 128, 2)
    want = (experts.astype(np.float64) * s).astype(np.float32)  # exact, then float32
    np.testing.assert_array_equal(np.asarray(out["e"]["weight"]), want)
    np.testing.assert_array_equal(np.asarray(out["v"]["weight"]),
                                  tree["v"]["weight"].astype(np.float32) * 2)


def test_e5m2_and_e4m3_buffers_each_one_kernel():
    rng = np.random.default_rng(4)
    tree = {"a": {"weight": fp8(rng, (128, 256), E5M2),
                  "weight_scale_inv": rng.uniform(0.1, 2, (1, 2)).astype(np.float32)},
            "b": {"weight": fp8(rng, (128, 256)),
                  "weight_scale_inv": rng.uniform(0.1, 2, (1, 2)).astype(np.float32)}}
    packed = inspector.pack(tree)
    assert len(flat_plan(packed).calls) == 2
    out = check_against_per_group(packed, "bfloat16")
    want = numpy_reference(tree["a"]["weight"], tree["a"]["weight_scale_inv"], (128, 128),
                           "bfloat16")
    np.testing.assert_array_equal(bits(out["a"]["weight"]), bits(want))


def test_plain_leaves_kept_shared_and_an_orphan_keeps_its_codes():
    rng = np.random.default_rng(5)
    orphan = fp8(rng, (32, 128))
    tree = {"layer": {"weight": fp8(rng, (128, 256)),
                      "weight_scale_inv": np.float32([[0.5, 0.25]]),
                      "bias": rng.standard_normal(256).astype(np.float32)},
            "norm": rng.standard_normal(128).astype(np.float32),
            "emb": rng.standard_normal((4, 8)).astype(ml_dtypes.bfloat16),
            "lone": {"weight": orphan}}
    packed = inspector.pack(tree)
    got = inspector.dequantize(packed, "bfloat16")
    out = check_against_per_group(packed, "bfloat16")
    assert sorted(out["layer"]) == ["bias", "weight"]
    np.testing.assert_array_equal(out["norm"], tree["norm"])
    np.testing.assert_array_equal(bits(out["lone"]["weight"]), bits(orphan))
    assert np.asarray(out["lone"]["weight"]).dtype == E4M3
    # the float8 and float32 buffers are the input's own (the orphan, the bias, the norm);
    # the bf16 leaf keeps its buffer, the weights get a new one
    assert got.buffers["float8_e4m3fn"] is packed.buffers["float8_e4m3fn"]
    assert got.buffers["float32"] is packed.buffers["float32"]
    assert got.buffers["bfloat16"] is packed.buffers["bfloat16"]
    assert got.layout.group_dtypes["bfloat16:float8_e4m3fn"] == "bfloat16"


def test_other_schemes_and_stacked_layouts_go_the_per_group_way():
    rng = np.random.default_rng(6)
    fp8_layer = {"weight": fp8(rng, (128, 128)), "weight_scale_inv": np.float32([[2.0]])}
    mixed = {"a": fp8_layer, "b": {"w_blocks": rng.integers(0, 255, (4, 2, 16), np.uint8),
                                   "w_scales": np.full((4, 2), 127, np.uint8)}}
    out = inspector.dequantize(inspector.pack(mixed), "float32")
    assert not isinstance(out, inspector.PackedTree) and out["b"]["w"].shape == (4, 64)
    stacked = inspector.pack({"weight": np.stack([fp8_layer["weight"]] * 2),
                              "weight_scale_inv": np.float32([[[2.0]], [[2.0]]])}, lead_dims=1)
    assert DP.flat_layout(stacked.layout, "bfloat16") is None


def test_a_second_tree_of_the_layout_compiles_nothing(compiles):
    rng = np.random.default_rng(7)

    def tree(seed):
        r = np.random.default_rng(seed)
        return inspector.pack({f"l{i}": {"weight": fp8(r, (128, 384)),
                                         "weight_scale_inv": r.uniform(0.1, 2, (1, 3))
                                         .astype(np.float32)} for i in range(3)})

    first, second = tree(8), tree(9)
    assert second.layout is first.layout
    inspector.run(inspector.dequantize, first, "bfloat16", repeats=1)
    with compiles() as c:
        r = inspector.run(inspector.dequantize, second, "bfloat16", repeats=2)
    assert c.count == r.n_compiled == 0 and r.n_kernels == 1
    # bytes: each code and each scale read once, each weight written once in bf16
    n = 3 * 128 * 384
    assert (r.bytes_read, r.bytes_written) == (n + 3 * 3 * 4, 2 * n)
    want = numpy_reference(second.unpack()["l2"]["weight"],
                           second.unpack()["l2"]["weight_scale_inv"], (128, 128), "bfloat16")
    np.testing.assert_array_equal(bits(r.result.unpack()["l2"]["weight"]), bits(want))
    del rng


def test_device_buffers_and_repeated_executions_reuse_the_output():
    rng = np.random.default_rng(10)
    tree = {f"l{i}": {"weight": fp8(rng, (256, 256)),
                      "weight_scale_inv": rng.uniform(0.1, 2, (2, 2)).astype(np.float32)}
            for i in range(2)}
    on_device = read_packed(tree, None)
    r = inspector.run(inspector.dequantize, on_device, "bfloat16", repeats=3)
    want = numpy_reference(tree["l1"]["weight"], tree["l1"]["weight_scale_inv"], (128, 128),
                           "bfloat16")
    np.testing.assert_array_equal(bits(r.result.unpack()["l1"]["weight"]), bits(want))


def test_runs_of_a_100k_leaf_layout_are_built_in_well_under_a_second():
    # 50,000 small weights of four kinds (block, per-channel, per-tensor, partial blocks):
    # runs grow with the parameters (one per block row), the Python work with the kinds
    kinds = [((16, 256), (128, 128), 2), ((32, 64), (1, 64), 32), ((8, 8), (8, 8), 1),
             ((24, 192), (128, 128), 2)]
    groups, code, scale = [], 0, 0
    for k in range(50_000):
        shape, block, n_scales = kinds[k % 4]
        groups.append((code, scale, shape, block))
        code += shape[0] * shape[1] + (64 if k % 1000 == 0 else 0)  # a few gaps
        scale += n_scales
    flat_runs.build(code, groups[:100])  # NumPy warmed up
    start = time.perf_counter()
    starts, index = flat_runs.build(code, groups)
    width, pieces = flat_runs.pieces(starts, index)
    seconds = time.perf_counter() - start
    assert seconds < 0.5, f"{seconds:.2f} s"
    assert starts[0] == 0 and starts[-1] == code and np.all(np.diff(starts) > 0)
    assert width == 64 and len(pieces) == code // 64
    # spot checks by hand: group 4 (16 x 256, 128 x 128 blocks), 5 (per-channel), 7
    at = np.searchsorted(starts, groups[4][0])
    assert np.diff(starts[at:at + 3]).tolist() == [128, 128]
    assert index[at:at + 3].tolist() == [groups[4][1], groups[4][1] + 1, groups[4][1]]
    at = np.searchsorted(starts, groups[5][0])
    assert index[at:at + 32].tolist() == list(range(groups[5][1], groups[5][1] + 32))
    at = np.searchsorted(starts, groups[7][0])
    assert np.diff(starts[at:at + 3]).tolist() == [128, 64]
    assert index[at:at + 3].tolist() == [groups[7][1], groups[7][1] + 1, groups[7][1]]
    assert len(index) == 12_500 * (32 + 32 + 1 + 48) + 50  # + 50 gaps


@pytest.mark.parametrize("code_dtype", [E4M3, E5M2])
def test_the_gpu_and_cpu_formulations_of_the_flat_kernel_give_the_same_bits(code_dtype):
    """A GPU takes `astype` (hardware float8 conversion), the CPU decodes bits and rounds to
    bfloat16 by integer ops: both, run here on every code, agree bit for bit."""
    rng = np.random.default_rng(12)
    codes = rng.integers(0, 256, 64 * 128, dtype=np.uint8).view(code_dtype)
    scales = rng.uniform(1e-3, 1e3, 40).astype(np.float32)
    pieces = rng.integers(0, 40, 64).astype(np.int32)
    for out in OUT:
        got = []
        for cpu in (False, True):
            kernel = DP.make_flat_fp8(128, code_dtype, out, cpu)
            got.append(np.asarray(jax.jit(lambda c, s, p, k=kernel: k(None, c, s, p))(
                codes, scales, pieces)))
        nan = np.isnan(got[1].astype(np.float32))
        assert np.array_equal(np.isnan(got[0].astype(np.float32)), nan)
        np.testing.assert_array_equal(bits(got[0])[~nan], bits(got[1])[~nan])
        with np.errstate(over="ignore", invalid="ignore"):  # float16 overflows to inf
            want = (codes.astype(np.float64).reshape(64, 128) * scales[pieces][:, None]
                    ).astype(np.float32).astype(OUT[out]).reshape(-1)
        np.testing.assert_array_equal(bits(got[1])[~nan], bits(want)[~nan])


@pytest.mark.parametrize("holder", ["dict", "ordered"])
def test_groups_in_lists_tuples_ordered_dicts_and_flat_names_keep_containers_and_order(holder):
    from collections import OrderedDict

    rng = np.random.default_rng(13)
    make = dict if holder == "dict" else OrderedDict

    def layer():
        return make(weight=fp8(rng, (8, 16)), weight_scale_inv=np.float32([0.5]))

    flat = {f"h.{i}.{n}": v for i in range(3) for n, v in layer().items()}
    flat["h.norm"] = np.ones(4, np.float32)
    tree = {"layers": [layer(), (layer(), np.float32(3))], "od": OrderedDict(x=layer()),
            "flat": flat}
    packed = inspector.pack(tree)
    assert DP.flat_layout(packed.layout, "float32") is not None
    out = check_against_per_group(packed, "float32")  # key paths, order, bits
    assert type(out["layers"]) is list and type(out["layers"][1]) is tuple
    assert type(out["od"]) is OrderedDict and list(out["od"]["x"]) == ["weight"]
    assert type(out["od"]["x"]) is make
    assert sorted(out["flat"]) == ["h.0.weight", "h.1.weight", "h.2.weight", "h.norm"]
    np.testing.assert_array_equal(np.asarray(out["flat"]["h.1.weight"]),
                                  flat["h.1.weight"].astype(np.float32) * 0.5)


@pytest.mark.parametrize("kernel_kind", ["host loop"], indirect=True)  # the loop's own buffers
def test_the_cpus_loop_writes_each_execution_into_the_last_ones_memory(kernel_kind):
    """On the CPU the numba loop's host call honours donation as an XLA kernel does: a timed
    repeat writes into the last result's memory (64-byte aligned, no fresh pages) and that
    result is deleted; after `detach` the next execution takes fresh memory and the last
    result stays readable. Values exact every time."""
    from inspector.core.runner import PlannedRun

    rng = np.random.default_rng(12)
    tree = {f"l{i}": {"weight": fp8(rng, (256, 384)),
                      "weight_scale_inv": rng.uniform(0.1, 2, (2, 3)).astype(np.float32)}
            for i in range(3)}
    packed = inspector.pack(tree)
    cpu = jax.devices("cpu")[0]  # the loop's device, also where the default is a GPU
    planned = PlannedRun(inspector.dequantize, packed, "bfloat16", device=cpu)
    assert [c.host for c in planned.plan.calls] == [True]
    want = numpy_reference(tree["l2"]["weight"], tree["l2"]["weight_scale_inv"], (128, 128),
                           "bfloat16")

    def output(result):
        (name,) = set(result.buffers) - set(packed.buffers)
        return result.buffers[name]

    first, _ = planned.execute()
    address = output(first).unsafe_buffer_pointer()
    assert address % 64 == 0
    second, _ = planned.execute()
    assert output(first).is_deleted() and output(second).unsafe_buffer_pointer() == address
    np.testing.assert_array_equal(bits(second.unpack()["l2"]["weight"]), bits(want))
    planned.detach()
    third, _ = planned.execute()
    assert not output(second).is_deleted()
    assert output(third).unsafe_buffer_pointer() != address
    for result in (second, third):
        np.testing.assert_array_equal(bits(result.unpack()["l2"]["weight"]), bits(want))
