"""Assertions shared by the format tests: trees equal to a reference, bad files refused."""

from __future__ import annotations

import time

import numpy as np
import pytest

from inspector.core.errors import LoadError
from inspector.core.lazy import LazyArray
from inspector.io import load


def assert_tree_equal(loaded, expected, path: str = "") -> None:
    """Asserts same nesting, and per leaf the same shape, dtype and bits as the reference."""
    if isinstance(expected, dict):
        assert isinstance(loaded, dict), f"{path}: {type(loaded).__name__} is not a dict"
        assert set(loaded) == set(expected), f"{path}: keys {sorted(loaded)} != {sorted(expected)}"
        for key in expected:
            assert_tree_equal(loaded[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(loaded, (list, tuple)) and len(loaded) == len(expected), path
        for i, (a, b) in enumerate(zip(loaded, expected, strict=True)):
            assert_tree_equal(a, b, f"{path}[{i}]")
    elif isinstance(expected, (np.ndarray, np.generic)) or hasattr(expected, "__array__"):
        assert isinstance(loaded, LazyArray), f"{path}: {type(loaded).__name__} is not lazy"
        want = np.asarray(expected)
        assert loaded.shape == want.shape, f"{path}: shape {loaded.shape} != {want.shape}"
        assert loaded.dtype == want.dtype, f"{path}: dtype {loaded.dtype} != {want.dtype}"
        got = np.asarray(loaded)
        assert got.dtype == want.dtype and got.shape == want.shape, path
        # compare bits, so NaN and -0.0 count and bfloat16 needs no float conversion
        assert got.tobytes() == np.ascontiguousarray(want).tobytes(), f"{path}: values differ"
    else:
        assert loaded == expected, f"{path}: {loaded!r} != {expected!r}"


def assert_load_error(path, *fragments: str) -> LoadError:
    """Asserts `load(path)` fails fast with a LoadError naming the file and each fragment."""
    start = time.perf_counter()
    with pytest.raises(LoadError) as info:
        load(path)
    elapsed = time.perf_counter() - start
    message = str(info.value)
    assert str(path) in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"
    assert elapsed < 1.0, f"took {elapsed:.2f} s to refuse {path}"
    return info.value
