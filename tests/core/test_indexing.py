import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import inspector
from inspector import (
    IndexOutOfRangeError,
    IndexParseError,
    StructureMismatchError,
    format_index,
    index,
    parse_index,
)
from tests.helpers import tree_lists


def s2_tree():
    a1 = np.arange(12.0).reshape(4, 3)
    b = np.arange(5.0)
    c = np.arange(12.0).reshape(6, 2)
    return [(a1, 10 * a1, 100 * a1), b, None, (c, (None,))]


S2_EXPECTED = [([3.0, 4.0, 5.0], [30.0, 40.0, 50.0], [300.0, 400.0, 500.0]), [1.0, 2.0], None,
               ([10.0, 11.0], (None,))]


@pytest.mark.parametrize("index_tree", [[1, slice(1, 3), None, -1], ["1", "1:3", None, "-1"]])
def test_s2_exact(index_tree):
    out = index(s2_tree(), index_tree)
    assert tree_lists(out) == S2_EXPECTED
    assert jax.tree.structure(out) == jax.tree.structure(s2_tree())


def test_moving_an_index_does_not_recompile(compiles):
    tree = s2_tree()
    index(tree, [1, "1:3", None, -1])
    with compiles() as c:
        out = index(tree, [2, "2:4", None, 0])
    assert c.count == 0
    assert tree_lists(out)[1] == [2.0, 3.0] and tree_lists(out)[3][0] == [0.0, 1.0]
    before = inspector.compile_count()
    index(tree, [3, "3:5", None, 4])
    assert inspector.compile_count() == before


def test_out_of_range_is_refused_with_every_path():
    with pytest.raises(IndexOutOfRangeError) as info:
        index(s2_tree(), [4, slice(1, 3), None, 6])
    msg = str(info.value)
    assert msg.startswith("Cannot index the tree: 4 leaves do not fit the index.")
    for path in ("[0][0]", "[0][1]", "[0][2]"):
        assert f"{path}: index 4 is out of range for axis 0 of size 4" in msg
    assert "[3][0]: index 6 is out of range for axis 0 of size 6" in msg
    assert "JAX would clamp them silently" in msg


def test_too_many_indices_for_a_leaf():
    with pytest.raises(inspector.InspectorError, match=r"\[1\]: index '1, 2' has 2 entries for a "
                                                      r"leaf of rank 1"):
        index(s2_tree(), [":", "1, 2", None, ":"])


def test_index_tree_must_be_a_prefix():
    with pytest.raises(StructureMismatchError, match=r"\(root\): no index for \[2\], \[3\]"):
        index(s2_tree(), [1, 1])
    with pytest.raises(StructureMismatchError, match=r"\[0\]\[3\] not in the tree"):
        index(s2_tree(), [[1, 1, 1, 1], 1, None, 1])


def test_bad_text_names_the_path_and_column():
    with pytest.raises(IndexParseError, match=r"\[1\]: Cannot parse index '1:x': unexpected "
                                              r"character 'x' \(at column 3\)"):
        index(s2_tree(), [1, "1:x", None, -1])


def test_tuple_facing_an_array_is_a_multi_axis_index():
    x = np.arange(24).reshape(2, 3, 4)
    assert np.array_equal(index({"x": x}, {"x": (1, slice(None), -1)})["x"], x[1, :, -1])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", (1,)), ("-1", (-1,)), (":", (slice(None),)), ("::2", (slice(None, None, 2),)),
        ("1:3, ..., 0", (slice(1, 3), Ellipsis, 0)), (" 2 : : -1 ", (slice(2, None, -1),)),
        ("None, 0", (None, 0)), ("1,", (1,)),
    ],
)
def test_parse_index(text, expected):
    assert parse_index(text) == expected
    assert parse_index(format_index(expected)) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "The index is empty"),
        ("1:3:0", "a slice step cannot be zero (at column 5)"),
        ("1 2", "two numbers in a row"),
        ("__import__('os')", "unexpected character '_' (at column 1)"),
        ("..., ...", "only have a single ellipsis"),
        ("1:2:3:4", "at most two ':'"),
        ("1,,2", "an index entry is missing before ','"),
    ],
)
def test_parse_errors_say_where(text, problem):
    with pytest.raises(IndexParseError) as info:
        parse_index(text)
    assert problem in str(info.value)


def test_any_whitespace_inside_a_number_is_ignored_like_spaces():
    assert parse_index("-\t1") == (-1,)
    assert parse_index("1 :\u00a03, -\n2") == (slice(1, 3), -2)


def test_a_number_too_long_for_python_is_a_parse_error():
    with pytest.raises(IndexParseError) as info:
        parse_index("1:" + "9" * 5000)
    assert str(info.value).startswith(
        "Cannot parse index '1:999")
    assert "a number of 5,000 digits is too long (at column 3)" in str(info.value)
    assert parse_index("9" * 4000) == (int("9" * 4000),)  # long, but Python reads it


_INDEX_TEXT = st.text(alphabet=st.sampled_from(list("0123456789+-:,. \t\n\u00a0\u0663Nonewaxis")))


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(st.text(), _INDEX_TEXT))
def test_parse_index_of_any_text_returns_an_index_or_raises_index_parse_error(text):
    try:
        index_ = parse_index(text)
    except IndexParseError as e:
        assert "Cannot parse index" in str(e) or "The index is empty" in str(e)
        return
    assert isinstance(index_, tuple) and index_
    for item in index_:
        assert item is None or item is Ellipsis or type(item) in (int, slice)
    assert parse_index(format_index(index_)) == index_


_ENTRY = st.one_of(
    st.integers(-6, 5),
    st.builds(slice, st.none() | st.integers(-7, 7), st.none() | st.integers(-7, 7),
              st.none() | st.sampled_from([-3, -2, -1, 1, 2, 3])),
)


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
       entries=st.lists(_ENTRY, min_size=1, max_size=3), ellipsis_at=st.none() | st.integers(0, 3))
def test_matches_numpy_basic_indexing(shape, entries, ellipsis_at):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    idx = list(entries[: len(shape)])
    if ellipsis_at is not None:
        idx.insert(min(ellipsis_at, len(idx)), Ellipsis)
    idx = tuple(idx)
    try:
        expected = x[idx]
    except IndexError:
        with pytest.raises(IndexOutOfRangeError):
            index(x, format_index(idx))
        return
    got = index(x, format_index(idx))
    assert np.array_equal(np.asarray(got), expected)
