"""The one-pass safetensors tree (`io.safetensors_tree`): the same leaves as the careful path
on well-formed files, and None (so the careful path names the problem) on anything else."""

from __future__ import annotations

import json
import os
import struct

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

import inspector
from inspector.core.errors import LoadError
from inspector.core.lazy import LazyArray
from inspector.io import nesting, safetensors_format, safetensors_header, safetensors_tree
from inspector.io.locate import locate


def _tensors():
    rng = np.random.default_rng(3)
    return {
        "model.embed.weight": rng.standard_normal((10, 4)).astype(np.float32),
        "model.layers.0.attn.q": rng.standard_normal((4, 4)).astype(ml_dtypes.bfloat16),
        "model.layers.0.mlp.up": rng.integers(-9, 9, (4, 8)).astype(np.int32),
        "model.layers.1.attn.q": rng.standard_normal((4, 4)).astype(np.float16),
        "model.layers.1.empty": np.zeros((0, 3), np.float32),
        "model.norm": np.ones(4, np.float64),
        "flags": np.array([True, False, True]),
    }


def _careful(path):
    location = locate(path)
    entries = safetensors_header.read_header(location)
    return nesting.unflatten(safetensors_format._leaves(location, entries), location)


def _fast(path):
    location = locate(path)
    return safetensors_tree.load_tree(location, safetensors_header.header_bytes(location))


def _write(path, header: dict, data: bytes, text: str | None = None):
    text = (json.dumps(header, separators=(",", ":")) if text is None else text).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def test_the_one_pass_tree_has_the_careful_paths_leaves_and_values(tmp_path):
    tensors = _tensors()
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(tensors, str(path), metadata={"format": "pt"})
    fast, careful = _fast(path), _careful(path)
    assert fast is not None
    flat_fast, flat_careful = nesting.flatten(fast), nesting.flatten(careful)
    assert list(flat_fast) == list(flat_careful)  # the header's order
    assert set(flat_fast) == set(tensors)
    for name, leaf in flat_fast.items():
        other = flat_careful[name]
        assert type(leaf) is LazyArray
        for field in ("shape", "dtype", "source", "region", "sharding", "quant"):
            assert getattr(leaf, field) == getattr(other, field), (name, field)
        np.testing.assert_array_equal(np.asarray(leaf), tensors[name])
        assert np.asarray(leaf).dtype == tensors[name].dtype
    assert inspector.describe(fast) == inspector.describe(careful)
    assert nesting.flatten(inspector.load(path)).keys() == tensors.keys()


@pytest.mark.parametrize("case", ["repeated name", "repeated field", "escaped quote",
                                  "pretty", "packed F4", "extra field", "clash"])
def test_anything_unusual_goes_the_careful_way_with_the_same_result(tmp_path, case):
    a = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    b = {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}
    data = np.arange(4, dtype="<f4").tobytes()
    path = tmp_path / "m.safetensors"
    if case == "repeated name":
        _write(path, {}, data, '{"x.a":' + json.dumps(a) + ',"x.a":' + json.dumps(b) + "}")
    elif case == "repeated field":
        _write(path, {}, data[:8], '{"a":{"dtype":"F16","dtype":"F32","shape":[2],'
                                   '"data_offsets":[0,8]}}')
    elif case == "escaped quote":
        _write(path, {'we"ird': a, "b": b}, data)
    elif case == "pretty":
        _write(path, {}, data, json.dumps({"a": a, "b": b}, indent=2))
    elif case == "packed F4":
        f4 = {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]}
        _write(path, {"a": f4, "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}},
               b"\x12\x34\x56\x78")
    elif case == "extra field":
        _write(path, {"a": {**a, "note": "x"}, "b": b}, data)
    elif case == "clash":
        _write(path, {"a": a, "a.b": b}, data)
    assert (_fast(path) is None) == (case != "pretty")  # whitespace is no problem
    if case in ("repeated name", "repeated field", "clash"):
        with pytest.raises(LoadError):
            inspector.load(path)
        return
    loaded = nesting.flatten(inspector.load(path))
    assert {k: np.asarray(v).tolist() for k, v in loaded.items()} == {
        k: np.asarray(v).tolist() for k, v in nesting.flatten(_careful(path)).items()}


@pytest.mark.parametrize("offsets", [[[0, 8], [4, 12]], [[0, 8], [12, 20]], [[0, 8], [8, 16]],
                                     [[0, 4], [8, 16]]])
def test_byte_ranges_that_do_not_tile_the_data_are_refused_as_before(tmp_path, offsets):
    header = {"a": {"dtype": "F32", "shape": [2], "data_offsets": offsets[0]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": offsets[1]}}
    path = _write(tmp_path / "m.safetensors", header, bytes(16))
    ok = offsets == [[0, 8], [8, 16]]
    assert (_fast(path) is not None) == ok
    if not ok:
        with pytest.raises(LoadError) as caught:
            inspector.load(path)
        assert "m.safetensors" in str(caught.value)


@pytest.mark.parametrize("shape", [[-1, -2], [True, 2], [2.0], ["2"]])
def test_shapes_that_are_not_counts_are_refused_as_before(tmp_path, shape):
    header = {"a": {"dtype": "F32", "shape": shape, "data_offsets": [0, 8]}}
    path = _write(tmp_path / "m.safetensors", header, bytes(8))
    assert _fast(path) is None
    with pytest.raises(LoadError):
        inspector.load(path)


def test_a_leaf_without_a_reader_names_its_file_when_the_file_shrank(tmp_path):
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({"w": np.ones((64, 64), np.float32)}, str(path))
    leaf = inspector.load(path)["w"]
    assert leaf._reader is None and leaf.region == (str(path), leaf.region[1])
    os.truncate(path, os.path.getsize(path) - 100)
    with pytest.raises(LoadError) as caught:
        leaf.read()
    assert "m.safetensors:w" in str(caught.value) and "load it again" in str(caught.value)


def test_a_float_shape_equal_to_an_int_one_is_still_refused(tmp_path):
    header = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
              "b": {"dtype": "F32", "shape": [2.0], "data_offsets": [8, 16]}}
    path = _write(tmp_path / "m.safetensors", header, bytes(16))
    assert _fast(path) is None
    with pytest.raises(LoadError):
        inspector.load(path)


def test_a_large_build_leaves_no_young_objects_and_keeps_a_programs_frozen_ones(tmp_path):
    import gc

    from inspector.core import gc_pause

    with gc_pause.gc_paused():
        kept = [[i] for i in range(gc_pause.PROMOTE_AFTER + 10)]
    assert gc.isenabled() and gc.get_count()[0] < 1000 and gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_pause.gc_paused():
            more = [[i] for i in range(gc_pause.PROMOTE_AFTER + 10)]
        assert gc.get_freeze_count() == frozen  # the program's frozen objects stay frozen
    finally:
        gc.unfreeze()
    assert len(kept) == len(more)


@pytest.mark.parametrize("parser", ["orjson", "json"])
def test_either_parser_gives_the_same_tree_and_refuses_the_same_headers(tmp_path, monkeypatch,
                                                                       parser):
    if parser == "json":
        monkeypatch.setattr(safetensors_tree, "_loads", safetensors_tree._json_loads)
    else:
        import orjson

        assert safetensors_tree._loads is orjson.loads  # a dependency: the fast parser is on
    tensors = _tensors()
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(tensors, str(path), metadata={"format": "pt"})
    fast = nesting.flatten(_fast(path))
    assert {k: (v.shape, v.dtype, v.source, v.region) for k, v in fast.items()} == {
        k: (v.shape, v.dtype, v.source, v.region)
        for k, v in nesting.flatten(_careful(path)).items()}
    for text in ['{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551624]}}',
                 '{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,8]}}']:
        bad = _write(tmp_path / "bad.safetensors", {}, bytes(8), text)
        assert _fast(bad) is None
        with pytest.raises(LoadError):
            inspector.load(bad)


@pytest.mark.parametrize("names", [
    ["m.l.0.a.w", "m.l.1.a.w", "m.l.0.a.s", "m.l.0.b.w", "m.x", "m.l.1.a.s"],  # interleaved
    ["a..b", ".w", "w", "a..c", ".v", "a.b.c.d.e"],  # empty parts of dotted names
    ["z.y", "a.y", "z.x", "b", "a.x.q", "z.w.v.u"],  # parents out of order
])
def test_the_one_pass_nesting_gives_the_careful_tree_in_any_name_order(tmp_path, names):
    header, offset = {}, 0
    for name in names:
        header[name] = {"dtype": "F32", "shape": [1], "data_offsets": [offset, offset + 4]}
        offset += 4
    data = np.arange(len(names), dtype="<f4").tobytes()
    path = _write(tmp_path / "m.safetensors", header, data)
    fast, careful = _fast(path), _careful(path)
    assert fast is not None
    as_lists = lambda t: {k: as_lists(v) if isinstance(v, dict)  # noqa: E731
                          else np.asarray(v).tolist() for k, v in t.items()}
    assert as_lists(fast) == as_lists(careful)
    assert list(nesting.flatten(fast)) == list(nesting.flatten(careful))


@pytest.mark.parametrize("names", [["a.b", "a.b.c"], ["a.b.c", "a.b"], ["x.a.b", "x.a.b.c.d"],
                                   ["x.y.z", "x.q", "x.y"]])
def test_a_tensor_where_a_dict_of_keys_is_goes_the_careful_way(tmp_path, names):
    header = {n: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
              for i, n in enumerate(names)}
    path = _write(tmp_path / "m.safetensors", header, bytes(4 * len(names)))
    assert _fast(path) is None
    with pytest.raises(LoadError):
        inspector.load(path)


def test_ranges_listed_out_of_file_order_still_tile(tmp_path):
    header = {"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
              "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
              "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    path = _write(tmp_path / "m.safetensors", header, np.arange(2, dtype="<f4").tobytes())
    fast = _fast(path)
    assert fast is not None
    assert {k: np.asarray(v).tolist() for k, v in fast.items()} == {
        "a": [0.0], "b": [1.0], "e": []}
