"""Stack, unstack and index on packed trees: one kernel per dtype, values as NumPy float64."""

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import inspector
from inspector import PackedTree, StructureMismatchError, format_index
from inspector.core.index.packed import _passes
from inspector.core.op import Op

DTYPES = [np.float32, np.int32, ml_dtypes.bfloat16, np.float16, np.uint8]


def make_trees(k, shapes, dtypes, seed):
    rng = np.random.default_rng(seed)

    def leaf(shape, dtype):
        return (rng.normal(size=shape) * 50).astype(dtype)

    return [{"emb": leaf(shapes[0], dtypes[0]),
             "layers": [{"w": leaf(s, d)} for s, d in zip(shapes[1:], dtypes[1:], strict=True)],
             "none": None} for _ in range(k)]


def f64(x):
    return np.asarray(x).astype(np.float64)


def leaves(tree):
    return jax.tree.leaves(tree.unpack() if isinstance(tree, PackedTree) else tree)


_SHAPES = st.lists(st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple),
                   min_size=2, max_size=4)


@pytest.mark.slow  # each example compiles its own kernels
@settings(max_examples=10, deadline=None)
@given(k=st.integers(1, 4), shapes=_SHAPES, seed=st.integers(0, 99),
       dtype_ids=st.lists(st.integers(0, len(DTYPES) - 1), min_size=4, max_size=4))
def test_stack_and_unstack_of_packed_trees_match_numpy(k, shapes, seed, dtype_ids):
    dtypes = [DTYPES[i] for i in dtype_ids[: len(shapes)]]
    trees = make_trees(k, shapes, dtypes, seed)
    stacked = inspector.stack([inspector.pack(t) for t in trees])
    assert isinstance(stacked, PackedTree) and stacked.layout.lead == (k,)
    assert len(stacked.buffers) == len({np.dtype(d).name for d in dtypes})  # one per dtype
    per_tree = [jax.tree.leaves(t) for t in trees]
    for i, got in enumerate(leaves(stacked)):
        want = np.stack([f64(col[i]) for col in per_tree])
        assert got.shape == want.shape
        np.testing.assert_array_equal(f64(got), want)
    assert [(r.path, r.shape, r.dtype) for r in inspector.describe(stacked)] == [
        (r.path, r.shape, r.dtype) for r in inspector.describe(inspector.stack(trees))]
    back = inspector.unstack(stacked)
    assert len(back) == k and all(isinstance(t, PackedTree) and t.layout.lead == () for t in back)
    for tree, got in zip(trees, back, strict=True):
        for a, b in zip(jax.tree.leaves(tree), leaves(got), strict=True):
            assert b.shape == a.shape
            np.testing.assert_array_equal(f64(b), f64(a))


_LEAD_ENTRY = st.one_of(
    st.integers(-4, 3),
    st.builds(slice, st.none() | st.integers(-5, 5), st.none() | st.integers(-5, 5),
              st.none() | st.sampled_from([-2, -1, 1, 2])),
)


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(k=st.integers(1, 4), shapes=_SHAPES, seed=st.integers(0, 99),
       entries=st.lists(_LEAD_ENTRY, min_size=3, max_size=3), per_subtree=st.booleans(),
       dtype_ids=st.lists(st.integers(0, len(DTYPES) - 1), min_size=4, max_size=4))
@example(k=2, shapes=[(), (), ()], seed=0, per_subtree=True, dtype_ids=[0, 0, 0, 0],
         entries=[slice(None), slice(None), slice(None, None, -1)])  # ':' and '::-1' mixed
def test_index_of_a_packed_stack_matches_numpy(k, shapes, seed, entries, per_subtree, dtype_ids):
    dtypes = [DTYPES[i] for i in dtype_ids[: len(shapes)]]
    trees = make_trees(k, shapes, dtypes, seed)
    stacked = inspector.stack([inspector.pack(t) for t in trees])
    plain = jax.tree.map(lambda *xs: np.stack(xs), *trees)
    if per_subtree:  # the same kind of entry (int or slice) everywhere, each its own value
        kinds = {type(e) for e in entries}
        if len(kinds) > 1:
            entries = [entries[0]] * 3
        index_tree = {"emb": format_index(entries[0]),
                      "layers": [entries[1 + i % 2] for i in range(len(shapes) - 1)],
                      "none": None}
        per_leaf = [entries[0]] + [entries[1 + i % 2] for i in range(len(shapes) - 1)]
    else:
        index_tree, per_leaf = entries[0], [entries[0]] * len(shapes)
    try:
        want = [f64(x[i]) for x, i in zip(jax.tree.leaves(plain), per_leaf, strict=True)]
    except IndexError:
        with pytest.raises(inspector.IndexOutOfRangeError):
            inspector.index(stacked, index_tree)
        return
    out = inspector.index(stacked, index_tree)
    shapes_out = {w.shape[: w.ndim - len(s)] for w, s in zip(want, shapes, strict=True)}
    if len(shapes_out) == 1:  # one result lead: stays packed, one kernel per dtype
        assert isinstance(out, PackedTree)
    got = leaves(out)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_array_equal(f64(g), w)


def test_one_call_per_dtype_for_every_packed_op_in_one_dispatch():
    trees = make_trees(3, [(4, 2), (3,), (2, 2, 2), ()], [np.float32, np.int32, np.float32,
                                                           ml_dtypes.bfloat16], 0)
    packed = [inspector.pack(t) for t in trees]
    stacked = inspector.stack(packed)
    for op, args in [(inspector.weighted_sum, (packed, [1.0, 2.0, 3.0])),
                     (inspector.stack, (packed,)), (inspector.unstack, (stacked,)),
                     (inspector.index, (stacked, 1)),
                     (inspector.index, (stacked, {"emb": 0, "layers": 2, "none": None})),
                     (inspector.index, (stacked, {"emb": "0:2", "layers": "1:3", "none": None})),
                     (inspector.weighted_sum, ([stacked, stacked], [0.5, 0.5]))]:
        plan = Op.of(op).plan(*args)
        assert len(plan.calls) == 3, (op, len(plan.calls))  # one per dtype
        r = inspector.run(op, *args, repeats=2)
        assert r.n_kernels == 1, (r.op, r.n_kernels)  # independent: one kernel runs them all


def test_moving_an_index_on_a_packed_stack_does_not_recompile(compiles):
    trees = make_trees(4, [(4, 2), (3,)], [np.float32, np.float32], 1)
    stacked = inspector.stack([inspector.pack(t) for t in trees])
    inspector.index(stacked, {"emb": 0, "layers": 1, "none": None})
    with compiles() as c:  # (unpacking, not counted, slices a GPU's buffers with compiled ops)
        outs = [inspector.index(stacked, {"emb": i, "layers": 3 - i, "none": None})
                for i in range(4)]
    assert c.count == 0
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out.unpack()["layers"][0]["w"],
                                      trees[3 - i]["layers"][0]["w"])


def test_pack_with_a_leading_axis_and_its_errors():
    tree = {"a": np.arange(6.0).reshape(2, 3), "b": np.zeros((3, 2))}
    with pytest.raises(StructureMismatchError, match=r"1 leaves do not start with \(2,\)"
                       r"[\s\S]*\['b'\]: shape \(3, 2\)"):
        inspector.pack(tree, lead_dims=1)
    tree["b"] = np.ones((2, 1))
    p = inspector.pack(tree, lead_dims=1)
    a, b = inspector.unstack(p)
    assert a.unpack()["a"].tolist() == [0.0, 1.0, 2.0] and b.unpack()["b"].tolist() == [1.0]


def test_plain_trees_keep_working_beside_packed_ones():
    trees = make_trees(2, [(3,), (2, 2)], [np.float32, np.float32], 2)
    mixed = [inspector.pack(trees[0]), trees[1]]
    out = inspector.stack(mixed)
    assert not isinstance(out, PackedTree)
    np.testing.assert_array_equal(out["emb"], np.stack([trees[0]["emb"], trees[1]["emb"]]))


def test_per_subtree_index_over_many_subtrees_compiles_once(compiles):
    rng = np.random.default_rng(5)
    trees = [{f"b{i:03d}": {"w": rng.normal(size=(3, 2)).astype(np.float32),
                            "n": rng.integers(0, 9, size=(4,)).astype(np.int32)}
              for i in range(40)} for _ in range(3)]
    stacked = inspector.stack([inspector.pack(t) for t in trees])
    inspector.index(stacked, {f"b{i:03d}": 0 for i in range(40)})
    choices = [{f"b{i:03d}": (i + shift) % 3 for i in range(40)} for shift in range(3)]
    with compiles() as c:  # (unpacking, not counted, slices a GPU's buffers with compiled ops)
        outs = [inspector.index(stacked, choice) for choice in choices]
    assert c.count == 0
    for choice, out in zip(choices, outs, strict=True):
        out = out.unpack()
        for key, model in choice.items():
            for leaf in ("w", "n"):
                np.testing.assert_array_equal(out[key][leaf], trees[model][key][leaf])


def test_packs_of_one_structure_share_one_layout_object():
    trees = make_trees(2, [(3,), (2, 2)], [np.float32, np.int32], 3)
    a, b = (inspector.pack(t) for t in trees)
    assert a.layout is b.layout  # interned: ops compare layouts by identity, not 20k slots
    assert inspector.stack([a, b]).layout is inspector.stack([b, a]).layout
    other = inspector.pack(make_trees(1, [(4,), (2, 2)], [np.float32, np.int32], 3)[0])
    assert other.layout != a.layout


def test_a_cached_index_plan_never_returns_stale_values():
    from inspector.core.index.packed import cached_recipes

    index_tree = {"emb": 1, "layers": "0", "none": None}
    first = make_trees(3, [(4, 2), (3,)], [np.float32, np.int32], 4)
    stacked = inspector.stack([inspector.pack(t) for t in first])
    out = inspector.index(stacked, index_tree).unpack()
    np.testing.assert_array_equal(out["emb"], first[1]["emb"])
    held = cached_recipes()
    # Same layout, other data (a reloaded checkpoint): the cached plan, the new values.
    second = make_trees(3, [(4, 2), (3,)], [np.float32, np.int32], 5)
    restacked = inspector.stack([inspector.pack(t) for t in second])
    assert restacked.layout is stacked.layout
    out = inspector.index(restacked, index_tree).unpack()
    assert cached_recipes() == held
    np.testing.assert_array_equal(out["emb"], second[1]["emb"])
    np.testing.assert_array_equal(out["layers"][0]["w"], second[0]["layers"][0]["w"])
    # New buffers under the same layout (as an edit of the tree gives): their values.
    bumped = PackedTree(restacked.layout, {g: np.asarray(b) + (g == "float32")
                                           for g, b in restacked.buffers.items()})
    out = inspector.index(bumped, index_tree).unpack()
    np.testing.assert_array_equal(out["emb"], second[1]["emb"] + 1)
    # Another structure (wider leaves): another plan, its own values.
    third = make_trees(3, [(4, 5), (3,)], [np.float32, np.int32], 6)
    wider = inspector.stack([inspector.pack(t) for t in third])
    out = inspector.index(wider, index_tree).unpack()
    assert out["emb"].shape == (4, 5)
    np.testing.assert_array_equal(out["emb"], third[1]["emb"])
    # A moved index is a new entry (its own checks): out of range still fails, every time.
    for _ in range(2):
        with pytest.raises(inspector.IndexOutOfRangeError, match=r"\['emb'\]: index 3 is out"):
            inspector.index(wider, {"emb": 3, "layers": "0", "none": None})
    # A slice and an int with the same start are different indices.
    out = inspector.index(wider, {"emb": slice(1, 2), "layers": "0:1", "none": None}).unpack()
    assert out["emb"].shape == (1, 4, 5)


def test_per_subtree_index_pieces_cover_the_whole_output():
    # Several subtree ranges per buffer, each from another model and pattern (reversed,
    # stepped, single): the pieces are written in place into the donated output.
    rng = np.random.default_rng(7)
    trees = [{f"b{i}": rng.normal(size=(5, 3)).astype(np.float32) for i in range(6)}
             for _ in range(4)]
    stacked = inspector.stack([inspector.pack(t) for t in trees])
    choice = {"b0": "1:3", "b1": "3:1:-1", "b2": "0:4:2", "b3": "2:4", "b4": "::-3", "b5": "0:2"}
    want = {k: f64(np.stack([t[k] for t in trees]))[slice(*[
        None if s == "" else int(s) for s in v.split(":")])] for k, v in choice.items()}
    for _ in range(2):  # the second time from the cached plan, the output buffer reused
        r = inspector.run(inspector.index, stacked, choice, repeats=2)
        assert r.n_kernels == 1 and isinstance(r.result, PackedTree)
        got = r.result.unpack()
        for k in choice:
            np.testing.assert_array_equal(f64(got[k]), want[k])


@pytest.mark.parametrize("choice, passes", [
    ({"big": 2, "small": 0, "tail": 1}, 2),
    ({"big": "1:3", "small": "0:2", "tail": "3:1:-1"}, 2),
    ({"big": "::-2", "small": "1::2", "tail": "0:4:2"}, 2),
    ({"a": 3, "b": 0, "small": 1, "tail": 2}, 1),  # no model supplies four fifths of it
])
def test_a_large_buffer_mostly_from_one_source_is_copied_whole_then_patched(choice, passes):
    """When one (model, pattern) supplies most of a large buffer, the plan copies that row
    whole (a slice XLA spreads over the cores), then a chained kernel writes the other
    subtrees over it in place; the output buffer is the same one from run to run."""
    rng = np.random.default_rng(11)
    trees = [{"small": rng.integers(-99, 99, size=(8, 4)).astype(np.int32),  # its own pass
              "tail": rng.normal(size=(16,)).astype(np.float32)} for _ in range(4)]
    for t in trees:  # 4.3 MiB in one leaf, or in two halves
        big = rng.normal(size=(1100, 1024)).astype(np.float32)
        t.update({"big": big} if "big" in choice else {"a": big[:550], "b": big[550:]})
    stacked = inspector.stack([inspector.pack(t) for t in trees])
    plan = Op.of(inspector.index).plan(stacked, choice)
    passes = passes if jax.default_backend() == "cpu" else 1  # GPUs update in place at speed
    assert [c.chain for c in plan.calls] == [False, True][:passes] + [False]  # float32, int32
    full = {k: f64(np.stack([t[k] for t in trees])) for k in choice}
    want = {k: full[k][v] if isinstance(v, int) else
            full[k][slice(*[None if s == "" else int(s) for s in v.split(":")])]
            for k, v in choice.items()}
    for _ in range(2):  # the second time from the cached plan
        r = inspector.run(inspector.index, stacked, choice, repeats=3)
        assert r.n_kernels == (3 if passes == 2 else 1)  # one pass: both dtypes in one batch
        got = r.result.unpack()
        for k in choice:
            np.testing.assert_array_equal(f64(got[k]), want[k], err_msg=k)
    plan.compile()
    plan.place()
    pointers = {plan.execute().buffers["float32"].unsafe_buffer_pointer() for _ in range(3)}
    assert len(pointers) == 1  # each execution writes into the same donated buffer


def test_the_whole_row_goes_first_only_where_it_pays():
    head = (("i",),)
    mib = 2**20
    runs = ((0, 81, 0, head), (81, 90, 1, head), (90, 100, 2, head))  # row 0: 81%
    assert _passes(runs, 100, 4 * mib, "cpu") == [((0, 100, 0, head),), runs[1:]]
    assert _passes(runs, 100, 4 * mib, "gpu") == [runs]  # in-place updates are fast there
    assert _passes(runs, 100, 4 * mib - 1, "cpu") == [runs]  # small: one dispatch
    split = ((0, 79, 0, head), (79, 100, 1, head))  # 79%: rewriting 21% costs more
    assert _passes(split, 100, 4 * mib, "cpu") == [split]
    apart = ((0, 45, 0, head), (45, 55, 1, head), (55, 100, 0, head))  # row 0: 90%, in two runs
    assert _passes(apart, 100, 4 * mib, "cpu") == [((0, 100, 0, head),), (apart[1],)]


def test_one_index_for_a_whole_packed_stack_names_every_leaf_it_does_not_fit():
    trees = make_trees(2, [(4, 2), (3,), ()], [np.float32, np.int32, np.float32], 8)
    stacked = inspector.stack([inspector.pack(t) for t in trees])
    with pytest.raises(inspector.IndexOutOfRangeError,
                       match=r"3 leaves do not fit[\s\S]*\['emb'\]: index 2 is out[\s\S]*"
                             r"\['layers'\]\[0\]\['w'\][\s\S]*\['layers'\]\[1\]\['w'\]"):
        inspector.index(stacked, 2)
    with pytest.raises(inspector.IndexParseError, match=r"\(root\)"):
        inspector.index(stacked, "1:x")
    out = inspector.index(stacked, "-1").unpack()
    np.testing.assert_array_equal(out["layers"][1]["w"], trees[1]["layers"][1]["w"])
    assert out["none"] is None
