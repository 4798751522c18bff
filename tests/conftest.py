"""Test configuration: strict dtype promotion, hypothesis profiles, the compile counter."""

from __future__ import annotations

import os

# Strict promotion: an op that mixes dtypes without saying so (int32 + float32, bfloat16 *
# float32) raises instead of promoting. The product states every result dtype up front; the
# environment variable carries the setting into the apps and kernels the tests start.
os.environ["JAX_NUMPY_DTYPE_PROMOTION"] = "strict"
# Compile counts are asserted: kernels must not come from an earlier run's disk cache
# (tests/core/test_compile_cache.py turns it on in a process of its own).
os.environ.setdefault("INSPECTOR_COMPILATION_CACHE", "0")

import jax  # noqa: E402  (after the setting above: JAX reads it at import)
import jax.monitoring
import pytest
from hypothesis import settings

jax.config.update("jax_numpy_dtype_promotion", "strict")  # if a plugin imported jax first

# CI replays the same examples every run (a landing is not a lottery); locally each run explores
# new ones, and what they find becomes an @example.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

_BACKEND_COMPILES = {"n": 0}


def _on_event(name: str, duration: float, **kwargs) -> None:
    if name == "/jax/core/compile/backend_compile_duration":
        _BACKEND_COMPILES["n"] += 1


jax.monitoring.register_event_duration_secs_listener(_on_event)


class CompileCounter:
    """Counts XLA backend compilations (JAX's own monitoring events) inside a `with` block."""

    def __enter__(self):
        self.start = _BACKEND_COMPILES["n"]
        return self

    def __exit__(self, *exc):
        self.count = _BACKEND_COMPILES["n"] - self.start

    @property
    def so_far(self) -> int:
        return _BACKEND_COMPILES["n"] - self.start


@pytest.fixture
def compiles():
    return CompileCounter
