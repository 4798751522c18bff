"""`Op(name, plan)`: an operation the runner can compile ahead of time and time.

An op is its name and a planner: `plan(*args, device=..., **kwargs) -> Plan` validates the
inputs in Python and lists the kernel calls. `inspector.run` takes an `Op` (or a public op
function, looked up here, or any JAX function); calling an `Op` runs it once.

    >>> import numpy as np
    >>> from inspector.core.weighted_sum import WEIGHTED_SUM
    >>> trees = [{"w": np.ones(2)}, {"w": np.ones(2)}]
    >>> WEIGHTED_SUM.name, WEIGHTED_SUM(trees, [1, 2])["w"].tolist()
    ('weighted_sum', [3.0, 3.0])

Adding an op: a core module with its planner, `OP = Op("name", plan_name)`, a public function
that calls `OP(...)`, and `register(function, OP)` so `run(function, ...)` finds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax

from inspector.core.errors import InspectorError
from inspector.core.packed import PackedTree
from inspector.core.plan import Plan


@dataclass(frozen=True)
class Op:
    """An operation: `name` for records, `plan(*args, device=None, **kwargs) -> Plan`."""

    name: str
    plan: Callable[..., Plan]

    @staticmethod
    def of(function) -> Op:
        """The `Op` behind a public op function (`Op.of(inspector.stack).name == "stack"`).

        Raises:
            InspectorError: `function` is not a registered op.
        """
        op = op_of(function)
        if op is None:
            raise InspectorError(
                f"{getattr(function, '__name__', function)!r} is not an inspector op. Ops: "
                f"{', '.join(sorted(_BY_NAME))}.")
        return op

    def __call__(self, *args, device=None, **kwargs):
        """Runs the op once on `device` and returns its result (not timed)."""
        return run_once(self.plan(*args, device=device, **kwargs))


_BY_FUNCTION: dict[Callable, Op] = {}
_BY_NAME: dict[str, Op] = {}


def register(function: Callable, op: Op) -> Callable:
    """Records that the public `function` is `op` (so `run(function, ...)` plans it as `op`)."""
    _BY_FUNCTION[function] = op
    _BY_NAME[op.name] = op
    return function


def op_of(function) -> Op | None:
    """The `Op` behind a registered public op function (or `function` itself if an `Op`)."""
    if isinstance(function, Op):
        return function
    try:
        return _BY_FUNCTION.get(function)
    except TypeError:  # unhashable callables are never registered
        return None


def registered() -> dict[str, Op]:
    """The registered ops by name (those whose modules have been imported)."""
    return dict(_BY_NAME)


def block(result):
    """Waits until every JAX array in `result` is computed: a tree, a packed tree, or a list of
    either (`unstack`'s result). A packed tree is no pytree node: `jax.block_until_ready` took
    one for a leaf and returned at once, so the unstack of packed trees was timed at dispatch
    (on a GPU, 9-29 TB/s for an H100's 3 TB/s; XLA's CPU backend happened to run those kernels
    before returning)."""
    parts = jax.tree.leaves(result, is_leaf=lambda x: isinstance(x, PackedTree))
    jax.block_until_ready([p.buffers if isinstance(p, PackedTree) else p for p in parts])
    return result


def run_once(plan: Plan):
    """Compiles (or fetches) the plan's kernels, places its inputs and returns its result."""
    plan.compile()
    plan.place()
    return plan.execute()
