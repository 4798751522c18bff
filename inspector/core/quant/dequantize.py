"""`dequantize(tree, dtype)`: each quantized weight replaced by its values, as a jitted op.

One kernel per (scheme, shapes, output dtype), every member a traced argument; the calls
batch like any op's (a 60-layer model of one layer layout compiles a handful of kernels).
Lazy checkpoints stream: each group's members are read when its call runs (and with
`inspector.dequantize(..., out=path)`, written leaf by leaf).
"""

from __future__ import annotations

import math
from collections import Counter

import jax
import numpy as np

from inspector.core import nodes
from inspector.core.devices import resolve_device
from inspector.core.errors import InspectorError
from inspector.core.lazy import LazyArray, stored_as
from inspector.core.op import Op, register
from inspector.core.out_buffers import output_buffer, worth_donating
from inspector.core.packed import PackedTree
from inspector.core.plan import Call, Plan
from inspector.core.quant import kernels
from inspector.core.quant import schemes as S
from inspector.core.quant.dequantize_packed import plan_packed
from inspector.core.quant.groups import QuantGroup, quant_groups
from inspector.core.quant.rebuild import edits_of, holder, rebuild_tree

_OUT_DTYPES = ("bfloat16", "float16", "float32")


def _out_dtype(dtype, group: QuantGroup) -> str:
    return _checked(group.dtype if dtype is None else str(np.dtype(dtype)))


def _checked(name: str) -> str:
    if name not in _OUT_DTYPES:
        raise InspectorError(
            f"Cannot dequantize to {name}: give dtype 'bfloat16', 'float16' or 'float32'.")
    return name


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


def stored_quantized(tree) -> list[LazyArray]:
    """The leaves a file holds quantized, one tensor each, that its reader dequantizes when
    read (a GGUF `Q4_K` or `Q8_0` tensor: a float32 `LazyArray` whose `quant` says how it is
    stored). `dequantize` writes them in its dtype (as it does the slots of a packed tree
    that held such leaves: `Slot.stored`)."""
    leaves, _ = nodes.flatten(tree)  # guarded: a cycle or a too-deep tree is named
    return [x for x in leaves if stored_as(x)]


def stored_counts(tree) -> Counter:
    """How many leaves `stored_quantized` finds, by stored type (`{'Q4_0': 30, 'Q8_0': 13}`)."""
    return Counter(stored_as(x) for x in stored_quantized(tree))


def _stored_call(leaf: LazyArray, dtype: str) -> Call:
    """The cast of a stored-quantized leaf's values (read and dequantized by its reader) to
    `dtype`: one kernel per shape and dtype."""
    key = ("dequantize-stored", tuple(leaf.shape), dtype)
    return Call(key, lambda: lambda x: x.astype(dtype), [leaf])


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
        name = _checked("bfloat16" if dtype is None else str(np.dtype(dtype)))
        plan = plan_packed(tree, name, device)
        if plan is not None:
            return plan
        packed, tree = tree, tree.unpack()
        layout = packed.layout  # its slots in the order of the unpacked tree's leaves
        stored = [leaf for leaf, slot in zip(layout.treedef.flatten_up_to(tree), layout.slots,
                                             strict=True) if slot.stored]
    else:
        stored = None
    groups = [g for g in quant_groups(tree) if g.usable]
    if stored is None:
        stored = stored_quantized(tree)
    calls, read, written = [], 0, 0
    for group in groups:
        call = _call(group, holder(tree, group.steps), _out_dtype(dtype, group), device)
        calls.append(call)
        members = call.args[1:] if call.donate else call.args
        read += sum(math.prod(m.shape) * np.dtype(m.dtype).itemsize for m in members)
        written += math.prod(group.shape) * np.dtype(_out_dtype(dtype, group)).itemsize
    edits = edits_of(groups)
    stored_dtype = "float32" if dtype is None else _checked(str(np.dtype(dtype)))
    for leaf in stored:  # float32 as their reader decodes them
        calls.append(_stored_call(leaf, stored_dtype))
        read += math.prod(leaf.shape) * 4
        written += math.prod(leaf.shape) * np.dtype(stored_dtype).itemsize

    def assemble(outputs):
        outputs = list(outputs)
        rest = outputs[len(groups):]
        out = rebuild_tree(tree, (), edits, dict(zip((id(g) for g in groups),
                                                     outputs[:len(groups)], strict=True)))
        if not stored:
            return out
        swap = {id(leaf): value for leaf, value in zip(stored, rest, strict=True)}
        return jax.tree_util.tree_map(lambda x: swap.get(id(x), x), out)

    return Plan("dequantize", device, calls, assemble, read, written)


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
