"""`dequantize` of a packed tree: each float8 buffer dequantized in one pass, one kernel.

`plan_dequantize` of a `PackedTree` whose quantized weights are all FP8 comes here: per
float8 buffer, one XLA fusion over the flat buffers (`codes.reshape(-1, width)` decoded,
times `scales[pieces][:, None]`, cast, written into a donated buffer of the float8 buffer's
length), whatever the number of weights; the runs (`flat_runs`) are computed once per layout.
The result is a `PackedTree`: each FP8 weight becomes a slot of the new buffer at its codes'
offset (dtype bfloat16, float16 or float32), its scale is dropped, every other leaf keeps its
slot in its buffer (shared, not copied). Key paths and order are those of
`dequantize(tree.unpack())`, and `result.unpack()` equals it bit for bit.

Layouts this does not cover (other schemes among the groups, scales of one float8 buffer in
several buffers, leading dimensions, runs narrower than `MIN_WIDTH`) go the per-group way.
"""

from __future__ import annotations

import gc
import math
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core.out_buffers import output_buffer, worth_donating
from inspector.core.packed import Layout, PackedTree, Slot, interned
from inspector.core.plan import Call, Plan
from inspector.core.quant import dequantize_host, flat_runs, kernels
from inspector.core.quant import schemes as S
from inspector.core.quant.groups import quant_groups
from inspector.core.quant.rebuild import edits_of, holder, rebuild_tree

HOST_LOOP = True
"""Whether the CPU dequantizes a float8 buffer with the numba loop (`dequantize_host.py`)
where it takes the dtypes; False: the XLA kernel everywhere (tests compare the two)."""
MIN_WIDTH = 4
"""Runs of a float8 buffer are cut into pieces of one width, each with a scale index (int32):
4 / width bytes read per parameter beyond the op's own. Below this width (odd shapes beside
each other) the per-group kernels are used instead."""

_FLAT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # layout -> {dtype: _Flat}


class _Flat:
    """What a layout's flat dequantization needs, per output dtype: the runs of each float8
    buffer, the result's layout and which input buffers it keeps."""

    def __init__(self, runs: list[flat_runs.FlatRuns], out_groups: dict, layout: Layout,
                 kept: list[str], read: int, written: int):
        self.runs, self.out_groups, self.layout = runs, out_groups, layout
        self.kept, self.read, self.written = kept, read, written


def flat_layout(layout: Layout, dtype: str) -> _Flat | None:
    """The flat dequantization of `layout` to `dtype` (cached per layout), or None when the
    layout must go the per-group way."""
    per_layout = _FLAT.get(layout)
    if per_layout is None:
        per_layout = _FLAT[layout] = {}
    if dtype not in per_layout:
        collecting = gc.isenabled()
        gc.disable()  # ~10^5 small acyclic objects made: no cycles to collect (as quant_groups)
        try:
            per_layout[dtype] = _analyse(layout, dtype)
        finally:
            if collecting:
                gc.enable()
    return per_layout[dtype]


def _analyse(layout: Layout, dtype: str) -> _Flat | None:
    if layout.lead:
        return None
    structure, ordinals, slots = layout.structure, layout.ordinals, layout.slots
    groups = [g for g in quant_groups(_probe(layout)) if g.usable]
    if not groups or any(g.scheme != S.FP8 for g in groups):
        return None
    # the structure's leaves in new containers: edited in place into the result's structure
    fresh = layout.treedef.unflatten(jax.tree_util.tree_leaves(structure))
    holders = []
    by_buffer: dict[str, list] = {}  # float8 group -> [(code offset, scale offset, shape, block)]
    scale_of: dict[str, str] = {}
    read = written = 0
    out_size = np.dtype(jnp.dtype(dtype)).itemsize
    code_slot = {}  # id of each group's marker in the rebuilt structure -> its codes' slot
    markers = {}
    kinds: dict[tuple, tuple | None] = {}  # per (dtypes, shapes): (block, bytes read, written)
    steps_of = [g.steps for g in groups]  # made from links at each read: once here
    for g, steps in zip(groups, steps_of, strict=True):
        node = holder(fresh, steps)
        holders.append(node)
        code = slots[ordinals[id(node[g.names["weight"]])]]
        scale = slots[ordinals[id(node[g.names["scale"]])]]
        sig = (code.dtype, scale.dtype, code.shape, scale.shape, g.block)
        kind = kinds.get(sig, False)
        if kind is False:
            kind = kinds[sig] = _kind(code, scale, g, out_size)
        if kind is None or scale_of.setdefault(code.group, scale.group) != scale.group:
            return None  # not float8 codes with float scales, or scales in two buffers
        by_buffer.setdefault(code.group, []).append((code.offset, scale.offset, code.shape,
                                                     kind[0]))
        read += kind[1]
        written += kind[2]
        marker = markers[id(g)] = _Marker()
        code_slot[id(marker)] = code
    runs = []
    for group, members in by_buffer.items():
        starts, index = flat_runs.build(layout.sizes[group], members)
        width, pieces = flat_runs.pieces(starts, index)
        if width < MIN_WIDTH:
            return None
        runs.append(flat_runs.FlatRuns(group, scale_of[group], starts, index, width, pieces))
    # the result's structure, as the per-group path's `rebuild_tree` makes it (a marker where each
    # group's output goes): holders that are plain dicts are edited in place as it edits
    # them (members dropped, the logical key added last), 0.3-0.8 s less for 50,000 groups
    if all(type(node) is dict for node in holders):
        for g, node in zip(groups, holders, strict=True):
            names = g.names
            for role, key in names.items():
                if role != "logical":
                    node.pop(key, None)
            node[names["logical"]] = markers[id(g)]
        rebuilt = fresh
    else:
        rebuilt = rebuild_tree(structure, (), edits_of(groups, steps_of), markers)
    leaves, treedef = jax.tree_util.tree_flatten(rebuilt)
    new_slots = [s for s in slots if s.group not in by_buffer]  # the groups kept
    taken = {s.group for s in new_slots}
    out_groups = {}
    for group in by_buffer:
        name = dtype if dtype not in taken and len(by_buffer) == 1 else f"{dtype}:{group}"
        out_groups[group] = name
    out = []
    for leaf in leaves:
        code = code_slot.get(id(leaf))
        if code is not None:
            out.append(Slot(out_groups[code.group], dtype, code.shape, code.offset))
        else:
            out.append(slots[ordinals[id(leaf)]])
    kept = sorted({s.group for s in out} - set(out_groups.values()))
    sizes = {g: layout.sizes[g] for g in kept}
    sizes.update({out_groups[g]: layout.sizes[g] for g in by_buffer})
    result = interned(Layout(treedef, tuple(out), sizes, ()))
    return _Flat(runs, out_groups, result, kept, read, written)


def _probe(layout: Layout):
    """The layout's tree with a read-only NumPy placeholder per leaf of its shape and dtype
    (one per shape and dtype, no data): `quant_groups` walks NumPy leaves along its fast
    path (0.1-0.2 s for 100,000 leaves, against 0.5-0.7 s for the structure's
    `ShapeDtypeStruct`s). The groups' steps are the structure's."""
    made: dict[tuple, np.ndarray] = {}
    leaves = []
    for slot in layout.slots:
        key = (slot.shape, slot.dtype)
        leaf = made.get(key)
        if leaf is None:
            leaf = made[key] = np.broadcast_to(np.zeros((), np.dtype(slot.dtype)), slot.shape)
        leaves.append(leaf)
    return layout.treedef.unflatten(leaves)


class _Marker:
    """Where a group's output goes in the rebuilt structure (a leaf to JAX)."""

    __slots__ = ()


def _kind(code: Slot, scale: Slot, group, out_size: int) -> tuple | None:
    """`(block, bytes read, bytes written)` of an FP8 group of these slots; None when its
    codes are not float8 or its scale not a float."""
    if np.dtype(code.dtype).type not in S.FP8_TYPES or \
            np.dtype(scale.dtype) not in S.FLOAT_SCALE:
        return None
    block = tuple(group.shape if math.prod(scale.shape) == 1 else group.block)
    return (block, code.size * np.dtype(code.dtype).itemsize
            + scale.size * np.dtype(scale.dtype).itemsize, code.size * out_size)


def make_flat_fp8(width: int, code_dtype, out_dtype: str, bits: bool):
    """The kernel over one float8 buffer: `out = cast(float(codes) * scales[piece])`, the
    codes seen as rows of `width` (one piece each). With `bits` (the CPU) codes are decoded
    from their bits and bfloat16 rounded by integer ops, as `kernels.make_fp8` does."""

    def cast(w):
        return kernels.bf16_bits(w) if bits and out_dtype == "bfloat16" else \
            w.astype(out_dtype)

    def kernel(out, codes, scales, pieces):
        del out  # donated: the result is written into its memory
        x = kernels.fp8_bits(codes, code_dtype) if bits else codes.astype(jnp.float32)
        s = scales.astype(jnp.float32).at[pieces].get(mode="promise_in_bounds")
        return cast(x.reshape(-1, width) * s[:, None]).reshape(-1)

    return kernel


def _placed_pieces(runs: flat_runs.FlatRuns, device) -> jax.Array:
    """The runs' piece indices on `device`, moved there once per layout."""
    found = runs.placed.get(device)
    if found is None:
        found = runs.placed[device] = jax.device_put(runs.pieces, device)
    return found


def flat_call(runs: flat_runs.FlatRuns, codes, scales, dtype: str, device) -> Call:
    """The call that dequantizes one float8 buffer (`codes`) with `scales` (the buffer of its
    scales) into a new buffer of `dtype`.

    The one place the kernel is chosen: on the CPU, a host call running the numba loop
    `dequant_loops.fp8_runs` over `runs.starts` / `runs.scale_index` where it takes the
    dtypes (`dequantize_host.py`: streaming stores, 0.49-0.89 of the copy against the XLA
    kernel's 0.31-0.46); else the XLA kernel."""
    if HOST_LOOP and dequantize_host.usable(codes, scales, dtype, device):
        return dequantize_host.host_call(runs, codes, scales, dtype, device)
    code_dtype = np.dtype(codes.dtype)
    bits = device.platform == "cpu"
    options = kernels.cpu_options() if bits else ()
    n = int(codes.size)
    key = ("dequantize-flat", n, runs.width, int(scales.size), str(code_dtype),
           str(np.dtype(scales.dtype)), dtype, bits, options)
    make = lambda: make_flat_fp8(runs.width, code_dtype, dtype, bits)  # noqa: E731
    pieces = _placed_pieces(runs, device)
    if worth_donating(n * np.dtype(jnp.dtype(dtype)).itemsize, [codes, scales]):
        out = output_buffer((n,), jnp.dtype(dtype), device)
        return Call(key, make, [out, codes, scales, pieces], donate=(0,), carry=True,
                    options=options)
    return Call(("fresh", *key), lambda: _no_out(make()), [codes, scales, pieces],
                options=options)


def _no_out(kernel):
    return lambda *args: kernel(None, *args)


def plan_packed(tree: PackedTree, dtype: str, device) -> Plan | None:
    """The flat `Plan` dequantizing `tree` to `dtype`, or None when its layout must go the
    per-group way (see the module's docstring)."""
    flat = flat_layout(tree.layout, dtype)
    if flat is None:
        return None
    calls = [flat_call(r, tree.buffers[r.code_group], tree.buffers[r.scale_group], dtype,
                       device) for r in flat.runs]
    kept = {g: tree.buffers[g] for g in flat.kept}
    names = [flat.out_groups[r.code_group] for r in flat.runs]

    def assemble(outputs):
        return PackedTree(flat.layout, {**kept, **dict(zip(names, outputs, strict=True))})

    return Plan("dequantize", device, calls, assemble, flat.read, flat.written)
