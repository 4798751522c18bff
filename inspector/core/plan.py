"""Plans: the compiled kernel calls an operation makes, compiled once per static signature.

An op (`weighted_sum`, `index`, ...) validates its inputs in Python, then returns a `Plan`: a
list of `Call`s, each naming a kernel by a static key (leaf shape, dtype, static index pattern,
device) plus the traced arguments (arrays, weights, index starts). Kernels are compiled ahead of
time and cached by key (`kernel_cache`), so:

- a 10,000-leaf tree compiles one kernel per distinct leaf shape (or per dtype when packed),
  never one fusion per leaf;
- new weights or new index starts are new *arguments*, never new keys: no recompile;
- `run` can time compilation (`compile_count`) apart from placing the inputs (`transfer`)
  and execution.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import jax
import numpy as np

from inspector.core import executable_cache
from inspector.core.calls import Call, batch_call, carry, schedule
from inspector.core.kernel_cache import compile_missing, compiled_kernel, kernel_counts, load_stored
from inspector.core.lazy import LazyArray
from inspector.core.transfer import place

__all__ = ["Call", "Plan"]

_IN_FLIGHT = 1  # kernels fed from lazy leaves that may run while the next leaf is read


@dataclass
class Plan:
    """An op ready to compile and execute on one device, or SPMD over a mesh when its calls
    carry shardings (inputs sharded with `inspector.shard`)."""

    op: str
    device: jax.Device
    calls: list[Call]
    assemble: Callable[[list], object]
    bytes_read: int
    bytes_written: int
    elementwise: list | None = field(default=None, repr=False)
    """Per call, its `chunked_stream.Elementwise` where the op is elementwise over leaves read
    from files (a streamed op may then run in chunks across leaves); else None."""
    _compiled: list = field(default_factory=list, repr=False)
    _steps: list | None = field(default=None, repr=False)  # (call indices, kernel), in order

    @property
    def mesh(self):
        """The `jax.sharding.Mesh` the op runs on (SPMD), or None for one device."""
        for call in self.calls:
            for sharding in call.shardings or ():
                if isinstance(sharding, jax.sharding.NamedSharding):
                    return sharding.mesh
        return None

    def _kernels(self) -> list[tuple[list[int], Call]]:
        return [(step, self.calls[step[0]] if len(step) == 1
                 else batch_call([self.calls[i] for i in step]))
                for step in schedule(self.calls)]

    def preload(self) -> float:
        """Loads the kernels an earlier process stored (`executable_cache`), tracing nothing;
        returns the seconds (0.0 when none was loaded). `run` calls it before its reads start."""
        if executable_cache.folder() is None:  # off: not even the schedule is made
            return 0.0
        start = time.perf_counter()
        n = load_stored([call for _, call in self._kernels()], self.device)
        return time.perf_counter() - start if n else 0.0

    def compile(self) -> tuple[float, int]:
        """Compiles every kernel not yet cached; returns `(seconds, number compiled now)`.

        Independent calls that share a key run as one kernel over a batch of them (see
        `calls.schedule`): a tree of many leaves makes a few dispatches, not one per leaf."""
        start, loaded = time.perf_counter(), kernel_counts()["loaded"]
        kernels = self._kernels()
        n_new = compile_missing([call for _, call in kernels], self.device)
        self._compiled = [None] * len(self.calls)
        self._steps = []
        for step, call in kernels:
            compiled, new = compiled_kernel(call, self.device)
            if len(step) == 1:
                self._compiled[step[0]] = compiled
            n_new += new
            self._steps.append((step, compiled))
        # kernels loaded from the inspector's files (`executable_cache`) are not compiled now,
        # but their loading is this figure's time
        busy = n_new or kernel_counts()["loaded"] != loaded
        return (time.perf_counter() - start if busy else 0.0), n_new

    @property
    def dispatches(self) -> int:
        """Kernel calls per execution (batches of calls count once)."""
        if self._steps is None:
            self.compile()
        return len(self._steps)

    @property
    def compiled(self) -> list:
        """The compiled kernel of each call alone, in order (for running calls one by one)."""
        if self._steps is None:
            self.compile()
        for i, compiled in enumerate(self._compiled):
            if compiled is None:  # the call runs in a batch; compiled alone when asked
                self._compiled[i] = compiled_kernel(self.calls[i], self.device)[0]
        return self._compiled

    def place(self) -> float:
        """Moves array arguments onto the device or mesh (lazy leaves wait); returns the seconds."""
        return place(self.calls, self.device)

    def execute(self):
        """Runs every call once and returns the assembled result (not yet blocked on)."""
        if self._steps is None:
            self.compile()
        outputs: list = [None] * len(self.calls)
        streaming: list = []  # outputs of calls fed from lazy leaves, still maybe computing
        head = None
        for step, compiled in self._steps:
            if len(step) > 1:  # a batch of independent calls of one key
                flat = [a for i in step for a in self.calls[i].args]
                for i, out in zip(step, compiled(*flat), strict=True):
                    outputs[i] = out
                    if self.calls[i].carry:
                        carry(self.calls[i], out)
                continue
            i = step[0]
            call = self.calls[i]
            lazy = any(isinstance(a, LazyArray) for a in call.args)
            if lazy and len(streaming) >= _IN_FLIGHT:
                # Dispatch is asynchronous: without this wait the loop would read leaf after
                # leaf while earlier kernels still hold theirs, and memory would not stay bounded.
                jax.block_until_ready(streaming.pop(0))
            # may_alias: a memory-mapped leaf 64-byte aligned in its file is used in place on
            # the CPU (no copy; kernels never write their inputs unless donated)
            args = [
                jax.device_put(np.asarray(a), call.target(j, self.device), may_alias=True)
                if isinstance(a, LazyArray) else a
                for j, a in enumerate(call.args)
            ]
            if call.chain:
                args[0] = outputs[i - 1]
            else:
                head = call
            out = compiled(*args)
            if lazy:
                streaming.append(out)
            if head is not None and head.carry:
                carry(head, out)
            outputs[i] = out
        return self.assemble(outputs)

    def cost(self) -> dict[str, float]:
        """XLA's cost analysis summed over the calls (`flops`, `bytes accessed`), if given."""
        if self._steps is None:
            self.compile()
        total: dict[str, float] = {}
        for _, compiled in self._steps:
            if not hasattr(compiled, "cost_analysis"):  # a host call (`Call.host`) may give
                continue  # its own figures as XLA's do (`weighted_sum_host.py`), or none
            try:
                analysis = compiled.cost_analysis()
            except Exception:  # some backends give none; the figure is optional
                return {}
            if isinstance(analysis, list):
                analysis = analysis[0] if analysis else {}
            for name in ("flops", "bytes accessed"):
                if name in (analysis or {}):
                    total[name] = total.get(name, 0.0) + float(analysis[name])
        return total
