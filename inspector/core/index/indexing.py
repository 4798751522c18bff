"""`index(tree, index_tree)`: a different NumPy-style index for each subtree, compiled once.

Integer positions (an int, a slice's start) are traced arguments, so moving an index (`1` to
`2`, `1:3` to `2:4`) reuses the compiled kernel; only a new result shape compiles again.
JAX clamps out-of-range dynamic indices silently, so every index is checked against its
leaf's shape first.
"""

from __future__ import annotations

import jax
import numpy as np

from inspector.core import nodes, placement
from inspector.core.devices import resolve_device
from inspector.core.errors import IndexOutOfRangeError, InspectorError
from inspector.core.index.packed import plan_packed_index
from inspector.core.index.rules import (
    index_kernel,
    index_pairs,
    normalize_index,
    raise_misfits,
    result_size,
    result_spec,
)
from inspector.core.leaves import dtype_name, leaf_info, unsupported_dtype
from inspector.core.op import Op, register
from inspector.core.opaque import Opaque
from inspector.core.out_buffers import output_buffer, worth_donating
from inspector.core.packed import PackedTree, unpacked
from inspector.core.plan import Call, Plan


def plan_index(tree, index_tree, device=None) -> Plan:
    """Validates the index against every leaf's shape and returns the `Plan` that applies it.

    Raises:
        StructureMismatchError: `index_tree` is not a prefix of `tree` (every such path listed).
        IndexParseError: an index string cannot be parsed (its path is named).
        IndexOutOfRangeError / InspectorError: an index does not fit a leaf (every leaf listed).
    """
    device = resolve_device(device)
    if isinstance(tree, PackedTree) and tree.layout.lead:
        # An index on the leading buffer axes alone is one kernel per dtype, planned once
        # per (layout, index); one reaching inside the leaves goes leaf by leaf.
        plan = plan_packed_index(tree, index_tree, device)
        return plan if plan is not None else plan_index(tree.unpack(), index_tree, device)
    source = unpacked(tree)
    nodes.flatten(source)  # a cyclic or too deep tree fails here, with its key path
    pairs = index_pairs(index_tree, source)
    calls: list[Call] = []
    leaf_slots: dict[str, int | None] = {}  # leaf path -> position in calls (None: unchanged)
    problems, kinds = [], set()
    read = written = 0
    for path, idx, subtree in pairs:
        for leaf_path, leaf in nodes.flatten(subtree, with_path=True)[0]:
            full = path + jax.tree_util.keystr(leaf_path)
            shape, dtype, nbytes, _ = leaf_info(leaf)
            if shape is None:
                problems.append(f"{full}: Opaque {leaf.type} ({leaf.summary()}), an object, "
                                "cannot be indexed" if isinstance(leaf, Opaque) else
                                f"{full}: a {type(leaf).__name__} leaf cannot be indexed")
                continue
            why = unsupported_dtype(dtype) if hasattr(leaf, "dtype") else None
            if why is not None:
                problems.append(f"{full}: {np.dtype(leaf.dtype).str}, {why}")
                continue
            try:
                pattern, starts = normalize_index(idx, shape)
            except (IndexOutOfRangeError, InspectorError) as e:
                kinds.add(type(e))
                problems.append(f"{full}: {e}")
                continue
            if all(p[0] == "f" for p in pattern):
                leaf_slots[full] = None
                continue
            array = leaf if hasattr(leaf, "shape") else np.asarray(leaf, dtype=dtype)
            dt = jax.dtypes.canonicalize_dtype(dtype)
            key = ("index", tuple(shape), dtype_name(dt), pattern)
            args = [array, np.asarray(starts or [0], dtype=np.int32)]
            leaf_slots[full] = len(calls)
            out_bytes = result_size(pattern, shape) * np.dtype(dt).itemsize
            sharding = placement.first([array])
            if sharding is None and worth_donating(out_bytes, [array]):
                # written into a reused buffer, like the packed index
                out = jax.eval_shape(index_kernel(pattern), jax.ShapeDtypeStruct(shape, dt),
                                     args[1])
                call = Call(("index_donated", *key[1:]),
                            lambda pattern=pattern: _donated(index_kernel(pattern)),
                            [output_buffer(out.shape, dt, device), *args], donate=(0,),
                            carry=True)
            else:
                call = Call(key, lambda pattern=pattern: index_kernel(pattern), args)
            if sharding is not None:  # SPMD over the mesh; kept axes keep their layout
                call.shardings = (sharding, placement.replicated(sharding.mesh))
                call.out_shardings = placement.with_spec(
                    sharding, result_spec(pattern, sharding, len(shape)))
            calls.append(call)
            read += out_bytes  # a slice reads only what it keeps
            written += out_bytes
    if problems:
        raise_misfits(problems, kinds)

    # Where each leaf of the result comes from, found once (not at every timed execution)
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(source)
    slots = [leaf_slots.get(jax.tree_util.keystr(path)) for path, _ in with_paths]
    kept = [leaf for _, leaf in with_paths]

    def assemble(outputs):
        return treedef.unflatten([leaf if where is None else outputs[where]
                                  for leaf, where in zip(kept, slots, strict=True)])

    return Plan("index", device, calls, assemble, read, written)


def _donated(kernel):
    def donated(out, x, starts):
        del out  # donated: XLA writes the indexed leaf into it instead of fresh pages
        return kernel(x, starts)

    return donated


INDEX = Op("index", plan_index)


def index(tree, index_tree, device=None):
    """Returns `tree` with each subtree's leaves indexed by its entry in `index_tree`.

    `index_tree` is a prefix of `tree`: where it has an index (an int, a slice, `...`, a tuple
    of those facing an array, or text like `"1:3, ..., 0"` read by `parse_index`), every leaf
    below is indexed with it, NumPy-style; where it has `None` or `":"`, the subtree is kept.
    `None` subtrees of `tree` stay `None`. Leaves left whole are returned as they are.

    Raises:
        StructureMismatchError: `index_tree` is not a prefix of `tree`.
        IndexParseError: an index string is not an index.
        IndexOutOfRangeError: an index is out of range for a leaf (all such leaves listed).

    >>> tree = [np.arange(6.0).reshape(2, 3), (np.arange(4), None)]
    >>> out = index(tree, ["1", ":2"])
    >>> out[0].tolist(), out[1][0].tolist(), out[1][1]
    ([3.0, 4.0, 5.0], [0, 1], None)
    """
    return INDEX(tree, index_tree, device=device)


register(index, INDEX)
