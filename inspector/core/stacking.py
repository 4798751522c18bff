"""`stack(trees)` / `unstack(tree)`: list-of-trees to tree-of-stacked-arrays, and back.

The vmap-ensemble move: `jax.vmap` cannot map over a Python list of parameter trees, but it
can over one tree whose leaves carry a leading model axis.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core import placement, validate
from inspector.core.devices import resolve_device
from inspector.core.errors import InspectorError, StructureMismatchError, bullet_list
from inspector.core.leaves import dtype_name, leaf_info
from inspector.core.op import Op, register
from inspector.core.out_buffers import output_buffer, worth_donating
from inspector.core.packed import PackedTree, same_layout
from inspector.core.plan import Call, Plan


def _stack_kernel(*xs):
    return jnp.stack(xs)


def _unstack_kernel(k: int):
    def kernel(x):
        return tuple(x[i] for i in range(k))

    return kernel


def _stack_donated(out, *xs):
    del out  # donated: XLA writes the stacked buffer into it instead of fresh pages
    return jnp.stack(xs)


def _unstack_donated(k: int):
    def kernel(*args):
        x = args[k]  # args[:k] are the donated output buffers
        return tuple(x[i] for i in range(k))

    return kernel


def _out_buffer(shape, dtype, device):
    return output_buffer(shape, jax.dtypes.canonicalize_dtype(dtype), device)


def _plan_stack_packed(trees: list[PackedTree], device) -> Plan:
    """Stacks packed trees of one layout: one kernel per dtype, buffers `(K, *lead, size)`."""
    layout, k = trees[0].layout, len(trees)
    calls, nbytes = [], 0
    for group in layout.sizes:
        buf = trees[0].buffers[group]
        shape = (k, *buf.shape)
        key = ("stack_packed", k, tuple(buf.shape), str(buf.dtype))
        args = [_out_buffer(shape, buf.dtype, device), *(t.buffers[group] for t in trees)]
        calls.append(Call(key, lambda: _stack_donated, args, donate=(0,), carry=True))
        nbytes += math.prod(shape) * np.dtype(buf.dtype).itemsize
    groups, stacked = list(layout.sizes), layout.with_lead((k, *layout.lead))

    def assemble(outputs):
        buffers = dict(zip(groups, outputs, strict=True))
        return PackedTree(stacked, buffers).with_dtypes(buffers)

    return Plan("stack", device, calls, assemble, nbytes, nbytes)


def _plan_unstack_packed(tree: PackedTree, device) -> Plan:
    """Splits a packed tree along its leading buffer axis: one kernel per dtype."""
    layout = tree.layout
    k = layout.lead[0]
    calls, nbytes = [], 0
    for group in layout.sizes:
        buf = tree.buffers[group]
        outs = [_out_buffer(buf.shape[1:], buf.dtype, device) for _ in range(k)]
        key = ("unstack_packed", k, tuple(buf.shape), str(buf.dtype))
        calls.append(Call(key, lambda k=k: _unstack_donated(k), [*outs, buf],
                          donate=tuple(range(k)), carry=True))
        nbytes += math.prod(buf.shape) * np.dtype(buf.dtype).itemsize
    groups, inner = list(layout.sizes), layout.with_lead(layout.lead[1:])

    def assemble(outputs):
        parts = [{g: out[i] for g, out in zip(groups, outputs, strict=True)} for i in range(k)]
        return [PackedTree(inner, part).with_dtypes(part) for part in parts]

    return Plan("unstack", device, calls, assemble, nbytes, nbytes)


def plan_stack(trees, device=None) -> Plan:
    """Validates the trees and returns the `Plan` that stacks them.

    Raises:
        InspectorError: no trees given.
        StructureMismatchError: the trees differ; every differing path with both shapes.
    """
    trees = list(trees)
    if not trees:
        raise InspectorError("Cannot stack no trees: give a list of one or more trees.")
    action = f"Cannot stack {len(trees)} trees"
    validate.check_same_structure(trees, action)
    placement.check_one_mesh(trees, action)
    device = resolve_device(device)
    if same_layout(trees):
        return _plan_stack_packed(trees, device)
    flat = [validate.flatten(t) for t in trees]
    treedef = flat[0][1]
    columns = [validate.check_array_leaves(t, leaves, action)
               for t, (leaves, _) in zip(trees, flat, strict=True)]
    k = len(trees)
    calls, nbytes = [], 0
    for i, x in enumerate(columns[0]):
        dtype = jax.dtypes.canonicalize_dtype(x.dtype)
        key = ("stack", k, tuple(x.shape), dtype_name(dtype))
        args = [col[i] for col in columns]
        size = k * math.prod(x.shape) * np.dtype(dtype).itemsize
        sharding = placement.first(args)
        if sharding is None and worth_donating(size, args):  # into a reused buffer
            call = Call(("stack_donated", *key[1:]), lambda: _stack_donated,
                        [_out_buffer((k, *x.shape), dtype, device), *args], donate=(0,),
                        carry=True)
        else:
            call = Call(key, lambda: _stack_kernel, args)
        if sharding is not None:  # the new leading axis is not split; the rest keep theirs
            call.shardings = placement.like(sharding, args)
            call.out_shardings = placement.with_spec(sharding, (None, *sharding.spec))
        calls.append(call)
        nbytes += size
    return Plan("stack", device, calls, treedef.unflatten, nbytes, nbytes)


def plan_unstack(tree, device=None) -> Plan:
    """Validates that every leaf has the same leading size and returns the unstacking `Plan`.

    Raises:
        StructureMismatchError: leaves have no leading axis or different leading sizes; every
            such key path is listed with its shape.
    """
    device = resolve_device(device)
    if isinstance(tree, PackedTree) and tree.layout.lead and tree.n_leaves:
        return _plan_unstack_packed(tree, device)
    leaves, treedef = validate.flatten(tree)
    action = "Cannot unstack the tree"
    leaves = validate.check_array_leaves(tree, leaves, action)
    paths = validate.key_paths(tree)
    shapes = [leaf_info(x)[0] for x in leaves]
    sizes = {s[0] for s in shapes if s}
    scalars = [(p, s) for p, s in zip(paths, shapes, strict=True) if not s]
    if scalars or len(sizes) > 1:
        raise StructureMismatchError(_unstack_problem(action, paths, shapes, scalars, sizes))
    if not leaves:
        raise InspectorError(f"{action}: it has no array leaves to split.")
    k = sizes.pop()
    calls, nbytes = [], 0
    for x in leaves:
        dtype = jax.dtypes.canonicalize_dtype(x.dtype)
        key = ("unstack", k, tuple(x.shape), dtype_name(dtype))
        size = math.prod(x.shape) * np.dtype(dtype).itemsize
        sharding = placement.first([x])
        if sharding is None and worth_donating(size, [x]):  # into k reused buffers
            outs = [_out_buffer(x.shape[1:], dtype, device) for _ in range(k)]
            call = Call(("unstack_donated", *key[1:]), lambda k=k: _unstack_donated(k),
                        [*outs, x], donate=tuple(range(k)), carry=True)
        else:
            call = Call(key, lambda k=k: _unstack_kernel(k), [x])
        if sharding is not None:  # each slice keeps the layout of the axes after the first
            call.shardings = (sharding,)
            call.out_shardings = (placement.with_spec(sharding, sharding.spec[1:]),) * k
        calls.append(call)
        nbytes += math.prod(x.shape) * np.dtype(dtype).itemsize

    def assemble(outputs):
        return [treedef.unflatten([out[i] for out in outputs]) for i in range(k)]

    return Plan("unstack", device, calls, assemble, nbytes, nbytes)


def _unstack_problem(action, paths, shapes, scalars, sizes) -> str:
    """Says, in sentences, which leaves cannot be split along axis 0, and why."""
    common = max(sizes, key=lambda n: sum(1 for s in shapes if s and s[0] == n)) \
        if sizes else None
    others = [(p, s) for p, s in zip(paths, shapes, strict=True) if s and s[0] != common]
    sentences = []
    if len(scalars) == 1 and not others:
        p, s = scalars[0]
        return (f"{action}: the leaf {p} has shape {s}, so it has no leading axis to split. "
                "Unstacking splits every leaf along axis 0; index or drop that leaf first.")
    if scalars:
        sentences.append(f"{plural(len(scalars), 'leaf has', 'leaves have')} no leading axis "
                         "to split (shape ())")
    if others:
        sentences.append(f"{plural(len(others), 'leaf has', 'leaves have')} a leading size "
                         f"other than {common}, the size the other leaves share")
    lines = [f"{p}: shape {s}, no leading axis" for p, s in scalars]
    lines += [f"{p}: shape {s}, leading size {s[0]}" for p, s in others]
    return (f"{action}: {' and '.join(sentences)}.\n" + bullet_list(lines)
            + "\nUnstacking splits every leaf along axis 0, so all leaves need the same size "
            "there.")


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


STACK = Op("stack", plan_stack)
UNSTACK = Op("unstack", plan_unstack)


def stack(trees, device=None):
    """Returns one tree whose leaves stack the trees' leaves along a new leading axis.

    `stack([t0, t1, t2])` has leaves `jnp.stack([t0_leaf, t1_leaf, t2_leaf])`: a list of K model
    parameter trees becomes the struct-of-arrays that `jax.vmap(..., in_axes=0)` maps over.
    Packed trees of one layout stack in one kernel per dtype into a packed tree whose buffers
    keep the new axis first (`layout.lead`), so `unstack` and `index(stacked, i)` of it are
    one kernel per dtype too.

    Raises:
        StructureMismatchError: the trees differ; every differing key path is listed with the
            shapes (or dtypes, or types) on both sides.

    >>> out = stack([{"w": np.zeros(2)}, {"w": np.ones(2)}])
    >>> out["w"].shape, out["w"].tolist()
    ((2, 2), [[0.0, 0.0], [1.0, 1.0]])
    """
    return STACK(trees, device=device)


def unstack(tree, device=None) -> list:
    """Returns the list of trees that `stack` would turn into `tree` (its exact inverse).

    A packed tree with leading buffer dimensions (`stack` of packed trees, or
    `pack(tree, lead_dims=1)`) splits in one kernel per dtype into packed trees.

    Raises:
        StructureMismatchError: some leaves lack a leading axis or differ in its size.

    >>> [t["w"].tolist() for t in unstack({"w": np.arange(4).reshape(2, 2)})]
    [[0, 1], [2, 3]]
    """
    return UNSTACK(tree, device=device)


register(stack, STACK)
register(unstack, UNSTACK)
