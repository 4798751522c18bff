"""Shared test helpers."""

from __future__ import annotations

import jax
import jax.monitoring
import pytest

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
