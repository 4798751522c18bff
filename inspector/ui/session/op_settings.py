"""`OpSettings`: one class per operation holds its settings and everything special about its op.

Each op's settings class (a `param.Parameterized` in `inspector/ui/session/ops/`) knows its own
params and the trees they name (`uses`), the call they describe (`describe`: the call record
and a summary; `job()` makes the `Job`), the library call that runs it (`arguments`), how big
its output is (`output_bytes`), whether it streams into a file when it does not fit in memory
(`streams`, `stream`), the trees a result keeps as (`results`), a `preview()` cheap enough for
every keystroke, its copy-as-code expression (`code`) and its eager reference (`eager`).
Registered by name with `@register`, it is found by the session state, the runner, the
operation panel (tabs, one form each) and the snippet writer alike, none of which names an op:
adding an op is a core module, a settings class and a form.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import numpy as np
import param

from inspector.ui.session.loaded import LoadedTree, pick
from inspector.ui.session.records import CallRecord, Job

_REGISTRY: dict[str, type[OpSettings]] = {}


class Preview(NamedTuple):
    """What the settings will do: `text` (result dtypes, shapes), `error` ('' when they can
    run) and `field_errors` (a message per form field, by field id)."""

    text: str
    error: str
    field_errors: dict = {}


class OpSettings(param.Parameterized):
    """The settings of one op in one session (subclass per op, registered with `@register`).

    Class attributes:
        op: the op's name (`weighted_sum`): the registry key and `CallRecord.op`.
        title: its name in the app (`Weighted sum`).
        position: where its tab goes among the others (smaller first).
        follows_selection: its `tree` param is the session's selected input tree.
        live: params whose change re-runs the op at once (when the state's `auto_run` is on
            and the last run was this op on these trees), e.g. weights moved by a slider.
        streams: the library's op takes `out=`: a run too big for the memory budget is
            streamed into a file (`stream`) and its result opens lazily from there.
        structure_only: positions in `uses()` of trees whose structure alone the op reads
            (a conversion's target): the runner never reads their data.
        reads_in_place: the op's CPU kernels read a checkpoint's large float32 groups where
            they lie in its file (`mapped_groups.py`): the runner holds its inputs mapped.
    """

    op: ClassVar[str] = ""
    title: ClassVar[str] = ""
    position: ClassVar[int] = 100
    follows_selection: ClassVar[bool] = False
    live: ClassVar[tuple[str, ...]] = ()
    streams: ClassVar[bool] = False
    structure_only: ClassVar[tuple[int, ...]] = ()
    reads_in_place: ClassVar[bool] = False

    def job(self, trees: dict) -> Job:
        """The job these settings describe, over the session's loaded trees (by name): the op,
        the names it takes (`uses`), a copy of these settings, the call record and summary.

        Raises:
            InspectorError: the settings are incomplete, or an input cannot be parsed.
        """
        names = self.uses()
        call, summary = self.describe(pick(trees, names))
        return Job(self.op, tuple(names), self.copy(), call, summary)

    def describe(self, loaded: list[LoadedTree]) -> tuple[CallRecord, str]:
        """`(call, summary)` of a run on `loaded` (the `uses()` trees, in order): the call as
        code (its options: every argument beyond the trees) and the history's one line.

        Raises:
            InspectorError: the settings are incomplete, or an input cannot be parsed.
        """
        raise NotImplementedError

    def arguments(self, trees: list, options) -> tuple[Callable, tuple, dict]:
        """`(fn, args, kwargs)`: the library call `fn(*args, **kwargs)` of a run on `trees`
        (the `uses()` trees, in order, as loaded or as held) with the call's `options`."""
        raise NotImplementedError

    def eager(self, trees: list, options) -> Callable | None:
        """`make(device) -> call`: the op as eager `jax.tree.map`s (the un-jitted reference
        the app can time beside the run), or None when it has none."""
        return None

    def output_bytes(self, trees: list) -> int:
        """The bytes of a run's output on `trees` (the working set budgets for it): by
        default as large as the largest input."""
        import inspector

        return max((inspector.describe(t)[0].nbytes for t in trees), default=0)

    def stream(self, trees: list, options, device, out: str, progress=None):
        """Runs the op with its result streamed into the file `out` (for `streams` ops: the
        library op's `out=` and `progress=`); returns the result, lazy over the file."""
        fn, args, kwargs = self.arguments(trees, options)
        return fn(*args, **kwargs, device=device, out=out, progress=progress)

    def results(self, result) -> list[tuple[str, object]]:
        """The trees a kept result adds, as `(suffix of the name, tree)`: one by default."""
        return [("", result)]

    def copy(self) -> OpSettings:
        """A copy of these settings of its own (a `Job` keeps one)."""
        values = {p: getattr(self, p) for p in self.param if p != "name"
                  and not isinstance(self.param[p], param.Event)}
        return type(self)(**values)

    def preview(self, trees: dict) -> Preview:
        """What the job will produce, or why it cannot run, from the trees' rows alone."""
        raise NotImplementedError

    @classmethod
    def code(cls, call: CallRecord, names: list[str], writer) -> str:
        """The public-API expression of `call`, the trees given as the variables `names`."""
        raise NotImplementedError

    def uses(self) -> list[str]:
        """The names of the trees these settings take, in the order the op takes them."""
        return [self.tree] if "tree" in self.param else []

    def forget(self, name: str) -> None:
        """Drops a removed tree from the settings."""

    def apply(self, values: dict, names: dict, trees: dict) -> list[str]:
        """Applies an example's settings for this op (`names` maps an example's tree names to
        the names used); returns the trees to select for it (first one wins), if any."""
        self.param.update(**values)
        return []

    def watched(self) -> list[str]:
        """The params whose change changes the preview."""
        return [p for p in self.param if p != "name"
                and not isinstance(self.param[p], param.Event)]


def register(cls: type[OpSettings]) -> type[OpSettings]:
    """Class decorator: makes `cls` the settings of the op `cls.op`."""
    if not cls.op:
        raise TypeError(f"{cls.__name__} names no op (set `op = 'name'`).")
    _REGISTRY[cls.op] = cls
    return cls


def settings_classes() -> dict[str, type[OpSettings]]:
    """Every op's settings class by op name, in tab order (imports `session/ops/` once)."""
    from inspector.ui.session import ops

    for module in pkgutil.iter_modules(ops.__path__):
        importlib.import_module(f"{ops.__name__}.{module.name}")
    return dict(sorted(_REGISTRY.items(), key=lambda kv: (kv[1].position, kv[0])))


def settings_class(op: str) -> type[OpSettings]:
    """The settings class of `op`; raises KeyError naming the ops there are."""
    classes = settings_classes()
    if op not in classes:
        raise KeyError(f"No op named {op!r}; ops: {', '.join(classes)}.")
    return classes[op]


def run_weights(values) -> list:
    """Weights as the core should see them, exactly as typed: integers stay `int` (so int32
    trees stay int32, as in S1), anything else is the `float` it is, unrounded (an SGD step of
    `-1e-7` is `-1e-7`); `1.0` is a float, so int32 trees weighted by it give float32.

    >>> run_weights([1, 0.5, 2.0, -1e-7])
    [1, 0.5, 2.0, -1e-07]
    """
    return [int(v) if isinstance(v, int | np.integer) else float(v) for v in values]


PREVIEW_LINES = 8


def clip(head: str, lines: list, total: int | None = None) -> str:
    """`head` and the first `PREVIEW_LINES` lines, with a count of the rest.

    >>> print(clip("Shapes:", [f"x{i}" for i in range(10)]))
    Shapes:
    x0
    x1
    x2
    x3
    x4
    x5
    x6
    x7
    … and 2 more
    """
    total = len(lines) if total is None else total
    shown = lines[:PREVIEW_LINES]
    more = total - len(shown)
    return "\n".join([head, *shown] + ([f"… and {more:,} more"] if more > 0 else []))


def structure_error(trees: list, fn, *extra) -> str:
    """The core's own validation message for running `fn` on these trees, or '' when they
    match (planning validates the inputs without running anything)."""
    import inspector

    if all(isinstance(t, inspector.PackedTree) for t in trees) and all(
            t.layout == trees[0].layout for t in trees[1:]):
        return ""  # planning would allocate the output buffer: too dear on every keystroke
    try:
        inspector.Op.of(fn).plan(trees, *extra)
    except inspector.InspectorError as e:
        return str(e)
    return ""
