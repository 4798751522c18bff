"""`dequantize(tree, dtype)`: each quantized weight replaced by its values, as a jitted op.

One kernel per (scheme, shapes, output dtype), every member a traced argument; the calls
batch like any op's (a 60-layer model of one layer layout compiles a handful of kernels).
Lazy checkpoints stream: each group's members are read when its call runs (and with
`inspector.dequantize(..., out=path)`, written leaf by leaf).
"""

from __future__ import annotations

import math

import jax
import numpy as np

from inspector.core import nodes
from inspector.core.devices import resolve_device
from inspector.core.errors import InspectorError
from inspector.core.op import Op, register
from inspector.core.out_buffers import output_buffer, worth_donating
from inspector.core.packed import PackedTree
from inspector.core.plan import Call, Plan
from inspector.core.quant import kernels
from inspector.core.quant import schemes as S
from inspector.core.quant.dequantize_packed import plan_packed
from inspector.core.quant.groups import QuantGroup, quant_groups

_OUT_DTYPES = ("bfloat16", "float16", "float32")


def _out_dtype(dtype, group: QuantGroup) -> str:
    name = group.dtype if dtype is None else str(np.dtype(dtype))
    if name not in _OUT_DTYPES:
        raise InspectorError(
            f"Cannot dequantize to {name}: give dtype 'bfloat16', 'float16' or 'float32'.")
    return name


def holder(tree, steps: tuple):
    """The dict that holds a group's members, found by its steps from the root."""
    node = tree
    for step in steps:
        if type(step) is tuple:  # a keystr step through a list, tuple or custom node
            _, kids = nodes.children(node)
            node = dict(kids)[step[0]]
        else:
            node = node[step]
    return node


def _call(group: QuantGroup, node, dtype: str, device) -> Call:
    names = group.names
    members = [node[names[r]] for r in _ROLES[group.scheme] if r in names]
    shapes = tuple(tuple(m.shape) for m in members)
    dtypes = tuple(str(np.dtype(m.dtype)) for m in members)
    shape = group.shape
    options = ()  # XLA compiler options (the CPU's fp8 kernels: 512-bit vectors)
    if group.scheme == S.FP8:
        kind = "per-tensor" if math.prod(shapes[1]) == 1 else "block"
        block = group.block if kind == "block" else shape
        bits = device.platform == "cpu"
        code_dtype = np.dtype(members[0].dtype)
        make = lambda: kernels.make_fp8(shape, block, kind, dtype,  # noqa: E731
                                        code_dtype, bits)
        options = kernels.cpu_options() if bits else ()
        static = (kind, block, bits, options)
    elif group.scheme == S.MXFP4:
        make = lambda: kernels.make_mxfp4(shapes[0], dtype)  # noqa: E731
        static = ()
    elif group.scheme == S.GPTQ:
        n_out, n_in = shape
        groups, has = shapes[2][0], "g_idx" in names
        make = lambda: kernels.make_gptq(n_in, n_out, groups, has, dtype)  # noqa: E731
        static = (groups, has)
    else:
        n_out, n_in = shape
        groups = shapes[2][0]
        make = lambda: kernels.make_awq(n_in, n_out, groups, dtype)  # noqa: E731
        static = (groups,)
    key = ("dequantize", group.scheme, shapes, dtypes, static, dtype)
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if worth_donating(nbytes, members):  # into a reused buffer: no fresh pages to fault
        out = output_buffer(shape, dtype, device)
        return Call(key, make, [out, *members], donate=(0,), carry=True, options=options)
    return Call(("streamed", *key), lambda: _no_out(make()), members, options=options)


def _no_out(kernel):
    return lambda *members: kernel(None, *members)


_ROLES = {
    S.FP8: ("weight", "scale"),
    S.MXFP4: ("blocks", "scales"),
    S.GPTQ: ("qweight", "qzeros", "scales", "g_idx"),
    S.AWQ: ("qweight", "qzeros", "scales"),
}


def plan_dequantize(tree, dtype="bfloat16", device=None) -> Plan:
    """Finds the tree's quantized weights and returns the `Plan` that dequantizes them.

    Groups with a problem that stops dequantization (no scale, shapes that do not tile) are
    left as they are, members and all: see `quant_groups(tree)` for what is wrong. A packed
    tree whose quantized weights are all FP8 is dequantized one float8 buffer at a time, and
    its result is a packed tree (`dequantize_packed`); other packed trees are unpacked.

    Raises:
        InspectorError: `dtype` is not bfloat16, float16 or float32.
    """
    device = resolve_device(device)
    if isinstance(tree, PackedTree):
        # FP8 weights: one pass over each float8 buffer, a packed result (dequantize_packed)
        name = "bfloat16" if dtype is None else str(np.dtype(dtype))
        if name not in _OUT_DTYPES:
            raise InspectorError(
                f"Cannot dequantize to {name}: give dtype 'bfloat16', 'float16' or 'float32'.")
        plan = plan_packed(tree, name, device)
        if plan is not None:
            return plan
        tree = tree.unpack()
    groups = [g for g in quant_groups(tree) if g.usable]
    calls, read, written = [], 0, 0
    for group in groups:
        call = _call(group, holder(tree, group.steps), _out_dtype(dtype, group), device)
        calls.append(call)
        members = call.args[1:] if call.donate else call.args
        read += sum(math.prod(m.shape) * np.dtype(m.dtype).itemsize for m in members)
        written += math.prod(group.shape) * np.dtype(_out_dtype(dtype, group)).itemsize
    edits = _edits(groups)

    def assemble(outputs):
        return _rebuild(tree, (), edits, dict(zip((id(g) for g in groups), outputs,
                                                   strict=True)))

    return Plan("dequantize", device, calls, assemble, read, written)


def _edits(groups: list[QuantGroup], steps_of: list | None = None) -> dict:
    """Per holder (its steps): the members to drop and the logical weights to add; and under
    the key `_BELOW`, per steps from the root, the next steps towards a holder (so each
    execution's rebuild walks only those paths: scanning every holder at every node cost
    25-100 ms an execution for 420 groups). `steps_of`: each group's steps, if known (a
    group makes them from its links at each read)."""
    edits: dict = {}
    below: dict = {}
    for n, g in enumerate(groups):
        steps = g.steps if steps_of is None else steps_of[n]
        here = edits.get(steps)
        if here is None:
            here = edits[steps] = (set(), [])
        here[0].update([v for k, v in g.names.items() if k != "logical"])
        here[1].append(g)
        for i in range(len(steps) - 1, -1, -1):  # upwards, until a known link
            kids = below.get(steps[:i])
            if kids is None:
                below[steps[:i]] = {steps[i]}
            elif steps[i] in kids:
                break  # the path above is there already
            else:
                kids.add(steps[i])
    edits[_BELOW] = below
    return edits


_BELOW = object()  # never a tuple of steps


def _rebuild(node, steps: tuple, edits: dict, outputs: dict):
    """The tree with each group's members replaced by its output (other leaves as they are)."""
    nexts = edits[_BELOW].get(steps, ())
    here = edits.get(steps)
    if here is None and not nexts:
        return node
    if isinstance(node, dict) or (here is not None and hasattr(node, "items")):
        items = dict(node.items())
        if here is not None:
            drop, add = here
            items = {k: v for k, v in items.items() if k not in drop}
            for g in add:
                items[g.names["logical"]] = outputs[id(g)]
        for k in nexts:
            if type(k) is not tuple:
                items[k] = _rebuild(items[k], (*steps, k), edits, outputs)
        if type(node) is dict:
            return items
        try:
            return type(node)(items)
        except Exception:  # a mapping that cannot be built from a dict: give a plain dict
            return items
    keyed, treedef = jax.tree_util.tree_flatten_with_path(
        node, is_leaf=lambda x: x is not node)
    kids = [(jax.tree_util.keystr(p), c) for p, c in keyed]
    rebuilt = [_rebuild(c, (*steps, (k,)), edits, outputs) if (k,) in nexts else c
               for k, c in kids]
    return jax.tree_util.tree_unflatten(treedef, rebuilt)


DEQUANTIZE = Op("dequantize", plan_dequantize)


def dequantize(tree, dtype="bfloat16", device=None):
    """Returns `tree` with each quantized weight replaced by its dequantized values.

    Every group `quant_groups(tree)` finds whole becomes one array at its logical key path
    (`['up_proj']['weight']`, the MXFP4 name without `_blocks`, the GPTQ / AWQ `['weight']`
    of shape (out, in)); its scales, zero points and group indices are removed; every other
    leaf is kept as it is. `dtype` is the output dtype ("bfloat16", "float16", "float32", or
    None for each group's own: bf16 for fp8 and mxfp4, the scales' dtype for gptq / awq).
    One jitted kernel per scheme and shape, on `device`; `inspector.run(inspector.dequantize,
    tree)` times it. A `PackedTree` whose quantized weights are all FP8 is dequantized in one
    pass over each float8 buffer and gives a `PackedTree` (the weights in a new buffer, the
    other leaves shared; `result.unpack()` is what the unpacked tree gives); other packed
    trees are unpacked and give a plain tree.

    Raises:
        InspectorError: an unknown `dtype`.

    >>> import ml_dtypes
    >>> tree = {"w": np.full((2, 2), 3, ml_dtypes.float8_e4m3fn),
    ...         "w_scale_inv": np.float32([0.5]), "b": np.ones(2)}
    >>> out = dequantize(tree, "float32")
    >>> sorted(out), np.asarray(out["w"]).tolist()
    (['b', 'w'], [[1.5, 1.5], [1.5, 1.5]])
    """
    return DEQUANTIZE(tree, dtype, device=device)


register(dequantize, DEQUANTIZE)
