"""`inspector.convert`: the target tree from the source, bit for bit, by jitted kernels (S9)."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest

import inspector
from inspector.core.lazy import LazyArray
from inspector.core.port.paths import leaves
from tests.core.port_models import bert_pair, cnn_pair, write_torch


def _assert_same_tree(got, want) -> None:
    """Same structure, and per leaf the same shape, dtype and bits."""
    got_leaves, got_def = jax.tree.flatten(got)
    want_leaves, want_def = jax.tree.flatten(want)
    assert got_def == want_def
    for g, w in zip(got_leaves, want_leaves, strict=True):
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g.view(np.uint8), np.ascontiguousarray(w).view(np.uint8))


@pytest.mark.parametrize("pair", [bert_pair, cnn_pair])
def test_converted_tree_equals_the_target_bit_for_bit(pair):
    torch, flax = pair()
    out = inspector.convert(torch, inspector.align(torch, flax))
    _assert_same_tree(out, flax)
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(out))


def test_checkpoint_file_converts_with_one_compile_per_kernel_key(tmp_path):
    torch, flax = bert_pair(layers=3)
    write_torch(tmp_path / "bert.pt", torch)
    source = inspector.load(tmp_path / "bert.pt")
    assert all(isinstance(x, LazyArray) for x in jax.tree.leaves(source))
    alignment = inspector.align(source, flax)
    reads = []
    for leaf in jax.tree.leaves(source):  # count the reads of each checkpoint leaf
        leaf._reader = (lambda r, s: lambda: reads.append(s) or r())(leaf._reader, leaf.source)
    plan = inspector.Op.of(inspector.convert).plan(source, alignment)
    keys = {call.key for call in plan.calls}
    inspector.clear_cache()
    before = inspector.compile_count()
    out = inspector.convert(source, alignment)
    _assert_same_tree(out, flax)
    # One kernel per (shape, transform, dtype): three embeddings, two bias sizes and three
    # kernel shapes (8, 8) (8, 32) (32, 8): 8 for the 3-layer BERT's 55 leaves
    assert len(jax.tree.leaves(flax)) == 55
    assert inspector.compile_count() - before == len(keys) == 8
    assert sorted(reads) == sorted(x.source for x in jax.tree.leaves(source))  # once each
    before = inspector.compile_count()
    inspector.convert(source, alignment)
    assert inspector.compile_count() == before


def test_refusal_lists_every_unmatched_and_ambiguous_path():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 6)).astype(np.float32)
    source = {"enc.dense.weight": w, "dec.dense.weight": w + 1}
    target = {"dense": {"kernel": w.T.copy()},
              **{f"extra_{i}": np.zeros((7, 5), np.float32) for i in range(60)}}
    alignment = inspector.align(source, target)
    with pytest.raises(inspector.InspectorError) as info:
        inspector.convert(source, alignment)
    text = str(info.value)
    assert text.startswith("Cannot convert: 61 target leaves have no single source (60 "
                           "unmatched, 1 ambiguous).")
    for i in range(60):  # every one listed, none elided past 50
        assert f"  - ['extra_{i}']: no source leaf matches it\n" in text
    assert ("  - ['dense']['kernel']: ambiguous between ['dec.dense.weight'], "
            "['enc.dense.weight']") in text
    assert "allow_missing=True" in text


def test_allow_missing_leaves_out_or_keeps_the_targets_values():
    torch, flax = cnn_pair()
    flax["params"]["Head_0"] = {"kernel": np.full((3, 5), 7, np.float32)}
    alignment = inspector.align(torch, flax)
    assert alignment.unmatched_target == ("['params']['Head_0']['kernel']",)
    without = inspector.convert(torch, alignment, allow_missing=True)
    assert "Head_0" not in without["params"]
    kept = inspector.convert(torch, alignment, allow_missing=True, target=flax)
    _assert_same_tree(kept, flax)


def test_out_streams_into_a_safetensors_file(tmp_path):
    torch, flax = bert_pair()
    write_torch(tmp_path / "bert.pt", torch)
    source = inspector.load(tmp_path / "bert.pt")
    out = inspector.convert(source, inspector.align(source, flax),
                            out=tmp_path / "ported.safetensors")
    assert all(isinstance(x, LazyArray) for x in jax.tree.leaves(out))
    paths, _, _, values = leaves(flax)
    got = dict(zip(leaves(out)[0], leaves(out)[3], strict=True))
    for p, v in zip(paths, values, strict=True):
        assert np.array_equal(np.asarray(got[p]), v), p


def test_run_times_convert_as_a_registered_op():
    torch, flax = cnn_pair()
    alignment = inspector.align(torch, flax)
    result = inspector.run(inspector.convert, torch, alignment, repeats=2)
    assert result.op == "convert" and len(result.times) == 2
    total = sum(v.nbytes for v in jax.tree.leaves(flax))
    assert result.bytes_written == total
    _assert_same_tree(result.result, flax)


def test_cast_to_the_targets_dtype_and_json_alignment_builds_nested_dicts():
    torch, flax = cnn_pair()
    half = jax.tree.map(lambda x: x.astype(ml_dtypes.bfloat16), flax)
    alignment = inspector.Alignment.from_json(inspector.align(torch, half).to_json())
    assert alignment.pair("['params']['Conv_1']['kernel']").transform.cast == \
        "float32 -> bfloat16"
    out = inspector.convert(torch, alignment)  # no treedef after JSON: nested dicts
    _assert_same_tree(out, half)


def test_source_that_changed_since_the_alignment_is_refused():
    torch, flax = cnn_pair()
    alignment = inspector.align(torch, flax)
    del torch["classifier.3.bias"]
    torch["classifier.1.weight"] = np.zeros((4, 4), np.float32)
    with pytest.raises(inspector.StructureMismatchError) as info:
        inspector.convert(torch, alignment)
    text = str(info.value)
    assert "2 source leaves do not fit the alignment" in text
    assert "['classifier.3.bias']: missing from the source (feeds ['params']['Dense_1']" in text
    assert "['classifier.1.weight']: shape (4, 4), the alignment was made for (16, 16)" in text


def test_packed_trees_align_and_convert_to_the_targets_structure():
    torch, flax = cnn_pair()
    source, target = inspector.pack(torch), inspector.pack(flax)
    alignment = inspector.align(source, target)
    assert alignment.complete
    _assert_same_tree(inspector.convert(source, alignment), flax)
    _assert_same_tree(inspector.convert(source, alignment, target=target), flax)


def test_runs_on_the_chosen_device():
    torch, flax = cnn_pair()
    device = inspector.devices()[-1]
    out = inspector.convert(torch, inspector.align(torch, flax), device=device)
    assert {x.devices().pop() for x in jax.tree.leaves(out)} == {device}
