"""Kernel calls: what one is, and which run together as one kernel.

A `Plan` (plan.py) holds `Call`s. Before it runs them, `schedule` groups the independent
calls into batches (one kernel for up to `_BATCH` calls, so a 10,000-leaf tree makes a few
hundred dispatches, not 10,000) and `batch_call` makes the call that runs a batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from inspector.core.lazy import LazyArray


@dataclass
class Call:
    """One kernel invocation.

    Attributes:
        key: the static signature (hashable); equal keys share one compiled kernel.
        make: builds the Python function to jit for this key. It must close over static
            values only: anything that varies between runs (weights, index starts) is an arg.
        args: the arguments: arrays (placed on the device by `Plan.place`) or lazy leaves
            (read and placed when the call executes, so big checkpoints stream).
        donate: positions of args whose buffers the kernel may reuse for its output.
        carry: when true, the output replaces args[0] after each execution (a tuple of n
            outputs replaces args[:n]), so donated output buffers are reused from one timed
            run to the next (no fresh page faults). On the head of a chain, the chain's last
            output replaces it.
        shardings: where each arg goes when the inputs are sharded over a mesh (one
            `jax.sharding.Sharding` per arg); None places every arg on the plan's device.
        out_shardings: the kernel's output shardings (as `jax.jit` takes them) when the
            inputs are sharded, so an op keeps its inputs' layout; None lets JAX choose.
        chain: when true, args[0] is the previous call's output (a donated buffer threaded
            through the calls, each writing its own slice of it: per-leaf kernels over a
            packed tree). Only the last output of a chain is meaningful.
        options: XLA compiler options for this kernel, as `(name, value)` pairs (`jax.jit`'s
            `compiler_options`): code-generation preferences that leave results unchanged
            (e.g. the CPU's vector width). The key must tell them apart; a batch compiles
            with every option of its calls (the first call's value where two differ).
        host: when true, the kernel is the function `make()` returns, run as it is on the
            host (a CPU loop outside XLA: `quant/dequantize_host.py`): never lowered,
            compiled, stored or batched. It must honour `donate` as XLA does (a donated
            buffer is gone after the call).
            A `mapped_groups.MappedGroup` arg reaches it as it is (`np.asarray` of it is
            its packed copy; the weighted sum's loop reads it where it lies in its file);
            an XLA call gets its packed copy, placed.
    """

    key: tuple
    make: Callable[[], Callable]
    args: list
    donate: tuple[int, ...] = ()
    carry: bool = False
    shardings: tuple | None = None
    out_shardings: object = None
    chain: bool = False
    options: tuple = ()
    host: bool = False

    def target(self, i: int, device):
        """Where args[i] must live: its sharding over the mesh, else the plan's device."""
        return device if self.shardings is None else self.shardings[i]


_BATCH = 32
"""Calls per batched kernel; a key's last batch takes the calls left over (fewer)."""


def carry(call: Call, out) -> None:
    """The output of a carried call replaces its first argument(s): the next run writes into
    the same buffer(s)."""
    if isinstance(out, tuple | list):
        call.args[: len(out)] = out
    else:
        call.args[0] = out


def _batchable(call: Call) -> bool:
    """Whether a call may run inside a batch: it reads placed arrays only (lazy leaves stream
    one by one), is not part of a chain and is not sharded. Donated and carried outputs batch
    too (each member keeps its own buffer). A host call runs alone."""
    return not (call.chain or call.host or call.shardings is not None
                or call.out_shardings is not None
                or any(isinstance(a, LazyArray) for a in call.args))


def _independent(calls: list[Call], i: int) -> bool:
    """Whether calls[i] may run at any moment of the plan, in a batch: it is batchable and no
    chained call reads its output."""
    return _batchable(calls[i]) and not (i + 1 < len(calls) and calls[i + 1].chain)


def schedule(calls: list[Call]) -> list[list[int]]:
    """The order calls run in: lists of call indices, one kernel each. Batchable calls of one
    key go in batches of `_BATCH`; those left over, of every key, share batches of up to
    `_BATCH` (a 10,000-leaf plain tree makes ~300 dispatches instead of 10,000, ~0.1 ms each
    here, with one kernel per key and a few shared ones to compile); the others run alone, in
    order (a chain's head stays alone: its next call reads its output)."""
    steps, groups = [], {}
    for i, call in enumerate(calls):
        if _independent(calls, i):
            groups.setdefault(call.key, []).append(i)
        else:
            steps.append([i])
    rest = []
    for members in groups.values():
        full = len(members) - len(members) % _BATCH
        steps.extend(members[start:start + _BATCH] for start in range(0, full, _BATCH))
        rest.extend(members[full:])
    rest.sort()
    steps.extend(rest[start:start + _BATCH] for start in range(0, len(rest), _BATCH))
    return sorted(steps, key=lambda step: step[0])


def batch_call(calls: list[Call]) -> Call:
    """One call running `calls` (independent; of one key or of several) as a single kernel."""
    makes = [call.make for call in calls]
    ends = list(itertools.accumulate(len(call.args) for call in calls))
    starts = [0, *ends[:-1]]

    def make_batch():
        kernels = [make() for make in makes]
        return lambda *flat: tuple(kernel(*flat[start:end])
                                   for kernel, start, end in zip(kernels, starts, ends,
                                                                 strict=True))

    key = ("batch", tuple(call.key for call in calls))
    donate = tuple(start + d for call, start in zip(calls, starts, strict=True)
                   for d in call.donate)
    options: dict = {}
    for call in calls:
        for name, value in call.options:
            options.setdefault(name, value)
    return Call(key, make_batch, [a for call in calls for a in call.args], donate=donate,
                options=tuple(options.items()))

