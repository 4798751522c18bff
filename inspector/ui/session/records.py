"""What a run is made of and what it leaves: `CallRecord`, `Job`, `RunRecord` (all frozen)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import MappingProxyType


def _frozen(mapping) -> MappingProxyType:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class CallRecord:
    """A run as code reproduces it (`inspector.ui.session.snippet` writes it out).

    Attributes:
        op: the op's name (`weighted_sum`), the key of its settings class.
        label: the result's name (`weighted_sum(t1, t2, t3)`).
        trees: the names of the trees it takes, in order.
        options: the op's own arguments beyond the trees (`weights`, `index`), read-only.
        device, repeats: where and how often it was timed ('' / 5 until it runs).
    """

    op: str
    label: str
    trees: tuple[str, ...]
    options: MappingProxyType = field(default_factory=lambda: _frozen({}))
    device: str = ""
    repeats: int = 5

    def __post_init__(self):
        object.__setattr__(self, "trees", tuple(self.trees))
        object.__setattr__(self, "options", _frozen(self.options))

    def timed(self, device: str, repeats: int) -> CallRecord:
        """This call as it was timed on `device`, `repeats` times."""
        return replace(self, device=device, repeats=repeats)


@dataclass(frozen=True)
class Job:
    """One run to make: the op, the trees it takes and the op's settings.

    Attributes:
        op: the op's name (`weighted_sum`), the key of its settings class.
        trees: the names of the trees it takes, as the session holds them, in the order the
            op takes them (`OpSettings.uses`).
        settings: the op's settings (`OpSettings`) as they were when the job was made (a copy
            of their own, so a run keeps its settings while the form changes): everything
            special about the op (its arguments, output size, streaming, result trees, code).
        call: the call as code (op, label, tree names, options: what the op takes beyond the
            trees, read-only), fixed when the job was made.
        summary: a one-line summary for the history (`t1, t2, t3 · weights 1, 2, 3`).
    """

    op: str
    trees: tuple[str, ...]
    settings: object = field(repr=False)
    call: CallRecord
    summary: str

    def __post_init__(self):
        object.__setattr__(self, "trees", tuple(self.trees))

    @property
    def label(self) -> str:
        return self.call.label

    def arguments(self, trees: list) -> tuple[Callable, tuple, dict]:
        """`(fn, args, kwargs)` to run with `inspector.run(fn, *args, **kwargs)`, given the
        input trees (in `trees` order: the loaded ones, or the working set's copies)."""
        return self.settings.arguments(trees, self.call.options)


@dataclass(frozen=True)
class RunRecord:
    """One successful run, as the history table and chart show it (times in ms)."""

    run: int
    op: str
    inputs: str
    device: str
    compile_ms: float
    compiled: int
    kernels: int
    median_ms: float
    min_ms: float
    max_ms: float
    gbps: float
    eager_ms: float | None
    call: CallRecord

    COLUMNS = ("run", "op", "inputs", "device", "compile_ms", "compiled", "median_ms",
               "min_ms", "max_ms", "gbps", "eager_ms")

    @property
    def trees(self) -> tuple[str, ...]:
        return self.call.trees

    def row(self) -> dict:
        """The history table's columns of this run."""
        return {c: getattr(self, c) for c in self.COLUMNS}

    @classmethod
    def of(cls, number: int, job: Job, result, eager_seconds: float | None,
           device: str, repeats: int) -> RunRecord:
        """The record of run `number`: `job` gave the `RunResult` `result`."""
        return cls(
            run=number, op=result.op, inputs=job.summary, device=result.device,
            compile_ms=result.compile_seconds * 1e3, compiled=result.n_compiled,
            kernels=result.n_kernels, median_ms=result.median_seconds * 1e3,
            min_ms=result.min_seconds * 1e3, max_ms=result.max_seconds * 1e3, gbps=result.gbps,
            eager_ms=None if eager_seconds is None else eager_seconds * 1e3,
            call=job.call.timed(device, repeats))
