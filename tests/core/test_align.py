"""`inspector.align`: torch and Flax names and layouts paired with no override (S9)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import inspector
from inspector.core.port.paths import leaves
from inspector.core.port.transforms import Transform
from tests.core.port_models import bert_pair, cnn_pair, write_torch

LINEAR, CONV1D, CONV2D = (1, 0), (2, 1, 0), (2, 3, 1, 0)


def _by_path(tree) -> dict:
    paths, _, _, values = leaves(tree)
    return {p: np.asarray(v) for p, v in zip(paths, values, strict=True)}


def _assert_every_pair_right(alignment, source, target) -> None:
    """Every target leaf paired, and its source transformed (NumPy) equals it bit for bit:
    the values are drawn once at random, so only the right source can."""
    src, tgt = _by_path(source), _by_path(target)
    assert alignment.complete, alignment.problems()
    assert [p.target for p in alignment.pairs] == list(tgt)
    for pair in alignment.pairs:
        got = pair.transform.apply(src[pair.source])
        assert got.shape == tgt[pair.target].shape, pair
        assert np.array_equal(got, tgt[pair.target]), pair


def _perm(alignment, target_suffix: str):
    return {p.transform.perm for p in alignment.pairs if p.target.endswith(target_suffix)}


def test_bert_like_pair_every_leaf_right_with_no_override():
    torch, flax = bert_pair()
    alignment = inspector.align(torch, flax)
    _assert_every_pair_right(alignment, torch, flax)
    assert alignment.unmatched_source == () and alignment.ambiguous == ()
    assert _perm(alignment, "['kernel']") == {LINEAR}
    assert _perm(alignment, "['embedding']") == {None}
    assert _perm(alignment, "['scale']") == {None}
    q = alignment.pair("['params']['encoder']['layer_1']['attention']['self']['query']['kernel']")
    assert q.source == "['encoder.layer.1.attention.self.query.weight']"
    assert q.score == 1.0 and str(q.transform) == "transpose (1, 0)"
    ln = alignment.pair("['params']['encoder']['layer_1']['output']['LayerNorm_0']['scale']")
    assert ln.source == "['encoder.layer.1.output.LayerNorm.weight']"
    assert "numbers matched by order" in ln.reason


def test_square_kernels_are_transposed_like_the_others_of_their_kind():
    # query/key/value/output and the pooler are (8, 8): the identity fits them as well as the
    # transpose, and only the FFN kernels (8, 32) / (32, 8) say which it is.
    torch, flax = bert_pair(hidden=8, inter=32)
    alignment = inspector.align(torch, flax)
    square = [p for p in alignment.pairs if p.target.endswith("['kernel']")
              and len(set(np.shape(_by_path(flax)[p.target]))) == 1]
    assert len(square) == 2 * 4 + 1
    assert {p.transform.perm for p in square} == {LINEAR}
    assert all("the layout every 'weight' -> 'kernel' rank 2 pair fits" in p.reason
               for p in square)
    # The same kernels with the values as given (not transposed) on the Flax side would be
    # wrong: the transform is a real transpose, not a relabelling
    src = _by_path(torch)
    assert not np.array_equal(src[square[0].source], _by_path(flax)[square[0].target])


def test_cnn_like_pair_numbered_siblings_matched_by_order():
    torch, flax = cnn_pair()
    alignment = inspector.align(torch, flax)
    _assert_every_pair_right(alignment, torch, flax)
    sources = {p.target: p.source for p in alignment.pairs}
    # features.0, features.4, features.7 (ReLU, MaxPool between) -> Conv_1, Conv_2, Conv_3
    assert [sources[f"['params']['Conv_{i}']['kernel']"] for i in (1, 2, 3)] == [
        "['features.0.weight']", "['features.4.weight']", "['features.7.weight']"]
    assert sources["['params']['Conv_0']['kernel']"] == "['frontend.0.weight']"
    assert sources["['batch_stats']['BatchNorm_1']['var']"] == "['features.5.running_var']"
    assert sources["['params']['Dense_1']['kernel']"] == "['classifier.3.weight']"
    pairs = {p.target: p for p in alignment.pairs}
    assert pairs["['params']['Conv_0']['kernel']"].transform.perm == CONV1D
    assert {pairs[f"['params']['Conv_{i}']['kernel']"].transform.perm for i in (1, 2, 3)} == {
        CONV2D}
    assert _perm(alignment, "['mean']") == _perm(alignment, "['scale']") == {None}
    # torch's BatchNorm step counters have no Flax counterpart: listed, not dropped silently
    assert alignment.unmatched_source == ("['features.1.num_batches_tracked']",
                                          "['features.5.num_batches_tracked']")
    assert "numbered siblings matched by order" in pairs["['params']['Conv_2']['bias']"].reason


@pytest.mark.parametrize("pair", [bert_pair, cnn_pair])
def test_torch_state_dict_file_aligns_like_the_dict(tmp_path, pair):
    torch, flax = pair()
    write_torch(tmp_path / "model.pt", torch)
    loaded = inspector.load(tmp_path / "model.pt")  # nested: {'encoder': {'layer': {'0': ...
    alignment = inspector.align(loaded, flax)
    _assert_every_pair_right(alignment, loaded, flax)


def _ambiguous_pair():
    rng = np.random.default_rng(3)
    w1, w2, b = (rng.standard_normal(s).astype(np.float32) for s in ((8, 8), (8, 8), (8,)))
    source = {"encoder.dense.weight": w1, "decoder.dense.weight": w2, "head.bias": b}
    target = {"dense": {"kernel": w1.T.copy()}, "head": {"bias": b}}
    return source, target


def test_two_equal_candidates_are_listed_not_guessed():
    source, target = _ambiguous_pair()
    alignment = inspector.align(source, target)
    assert [p.target for p in alignment.pairs] == ["['head']['bias']"]
    (amb,) = alignment.ambiguous
    assert amb.target == "['dense']['kernel']"
    assert set(amb.candidates) == {"['encoder.dense.weight']", "['decoder.dense.weight']"}
    assert alignment.unmatched_target == () and not alignment.complete
    assert set(alignment.unmatched_source) == set(amb.candidates)


def test_override_resolves_and_returns_a_new_alignment():
    source, target = _ambiguous_pair()
    before = inspector.align(source, target)
    after = before.override("['dense']['kernel']", "['encoder.dense.weight']")
    assert before.ambiguous and after.complete  # the original is unchanged
    pair = after.pair("['dense']['kernel']")
    assert (pair.source, pair.transform.perm, pair.score, pair.reason) == (
        "['encoder.dense.weight']", LINEAR, 1.0, "set by hand")
    assert after.unmatched_source == ("['decoder.dense.weight']",)
    # Changing it again gives the first source back to the unmatched ones
    again = after.override("['dense']['kernel']", "['decoder.dense.weight']",
                           Transform("none"))
    assert again.unmatched_source == ("['encoder.dense.weight']",)
    assert again.pair("['dense']['kernel']").transform == Transform("none")


def test_override_refuses_what_cannot_fit():
    source, target = _ambiguous_pair()
    alignment = inspector.align(source, target)
    with pytest.raises(inspector.InspectorError) as info:
        alignment.override("['dense']['kernel']", "['head.bias']")
    assert "['dense']['kernel'] with ['head.bias']: no transpose or reshape turns (8,) into " \
           "(8, 8)" in str(info.value)
    with pytest.raises(inspector.InspectorError, match=r"\['nope'\]: it is no leaf of the"):
        alignment.override("['nope']", "['head.bias']")
    with pytest.raises(inspector.InspectorError, match="reshape \\(64,\\) turns"):
        alignment.override("['dense']['kernel']", "['encoder.dense.weight']",
                           Transform("reshape", shape=(64,)))


def test_unmatched_target_and_reshape_of_singleton_axes():
    rng = np.random.default_rng(4)
    pos = rng.standard_normal((1, 16, 8)).astype(np.float32)
    source = {"pos_embed": pos, "cls.weight": np.zeros((3, 8), np.float32)}
    target = {"pos_embed": pos[0].copy(), "odd": {"kernel": np.zeros((5, 7), np.float32)}}
    alignment = inspector.align(source, target)
    pair = alignment.pair("['pos_embed']")
    assert (pair.transform.kind, pair.transform.shape) == ("reshape", (16, 8))
    assert alignment.unmatched_target == ("['odd']['kernel']",)
    assert alignment.unmatched_source == ("['cls.weight']",)


def test_dtype_cast_is_noted():
    source = {"w": np.ones((2, 3), np.float32)}
    target = {"w": np.ones((2, 3), np.float16)}
    (pair,) = inspector.align(source, target).pairs
    assert pair.transform.cast == "float32 -> float16"
    assert str(pair.transform) == "none, cast float32 -> float16"


def test_json_round_trip_keeps_every_field():
    torch, flax = cnn_pair()
    alignment = inspector.align(torch, flax).override(
        "['params']['Dense_0']['bias']", "['classifier.1.bias']")
    text = alignment.to_json()
    back = inspector.Alignment.from_json(text)
    assert back == alignment
    assert back.pairs[0] == alignment.pairs[0] and back.targets == alignment.targets
    assert json.loads(text)["pairs"][-1]["transform"] == {"kind": "transpose", "perm": [1, 0],
                                                          "shape": None, "cast": None}
    with pytest.raises(inspector.InspectorError, match="Not an alignment written by"):
        inspector.Alignment.from_json('{"pairs": []}')


@pytest.mark.parametrize("layout", ["flat", "file"])
def test_to_code_runs_in_a_fresh_interpreter_and_gives_the_target(tmp_path, layout):
    torch, flax = cnn_pair()
    source = torch if layout == "flat" else (write_torch(tmp_path / "m.pt", torch)
                                             or inspector.load(tmp_path / "m.pt"))
    alignment = inspector.align(source, flax)
    (tmp_path / "port.py").write_text(alignment.to_code("port"))
    # The script is given the flat state dict either way (as `torch.load` would give it)
    np.savez(tmp_path / "state.npz", **torch)
    script = (
        "import sys, numpy as np\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import port\n"
        "assert 'inspector' not in sys.modules and 'jax' not in sys.modules\n"
        f"state = dict(np.load({str(tmp_path / 'state.npz')!r}))\n"
        "out = port.port(state)\n"
        "flat = {}\n"
        "def walk(node, at):\n"
        "    for k, v in node.items():\n"
        "        walk(v, at + (k,)) if isinstance(v, dict) else flat.__setitem__('/'.join(at + (k,)), v)\n"  # noqa: E501
        "walk(out, ())\n"
        f"np.savez({str(tmp_path / 'out.npz')!r}, **flat)\n")
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path)
    got = dict(np.load(tmp_path / "out.npz"))
    want = {"/".join(k for k in p.strip("[]'").split("']['")): v
            for p, v in _by_path(flax).items()}
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key].dtype == value.dtype and np.array_equal(got[key], value), key


def test_renumbered_siblings_whose_order_does_not_fit_are_matched_per_shape():
    # torch numbers the blocks 0, 2, 4; Flax 0, 1, 2 and in another order of shapes: pairing
    # by order alone would put (8, 8) onto (5, 3), so order is taken within each shape.
    rng = np.random.default_rng(6)
    w = {i: rng.standard_normal(s).astype(np.float32)
         for i, s in ((0, (4, 8)), (2, (8, 8)), (4, (3, 5)))}
    source = {f"blocks.{i}.weight": x for i, x in w.items()}
    target = {"blocks_0": {"kernel": w[0].T.copy()}, "blocks_1": {"kernel": w[4].T.copy()},
              "blocks_2": {"kernel": w[2].T.copy()}}
    alignment = inspector.align(source, target)
    _assert_every_pair_right(alignment, source, target)
    assert all("among leaves of fitting shape" in p.reason for p in alignment.pairs)


def test_code_from_a_flat_alignment_takes_the_nested_tree_too():
    torch, flax = bert_pair(layers=1)
    namespace: dict = {}
    exec(inspector.align(torch, flax).to_code(), namespace)  # noqa: S102 - our own output
    nested: dict = {}
    for key, value in torch.items():  # {'encoder': {'layer': {'0': ...}}}, as loaders nest
        node = nested
        *parents, last = key.split(".")
        for k in parents:
            node = node.setdefault(k, {})
        node[last] = value
    out = namespace["convert"](nested)
    want = _by_path(flax)
    got = _by_path(out)
    assert set(got) == set(want)
    assert all(np.array_equal(got[p], want[p]) for p in want)
