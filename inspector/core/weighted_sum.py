"""`weighted_sum(trees, weights)`: sum_k w_k * tree_k, leaf by leaf, as compiled kernels.

Covers model soups and averaging, task arithmetic, an SGD step (`[1, -lr]`) and an EMA
(`[1 - a, a]`).
"""

from __future__ import annotations

import math
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core import caches, host_outputs, placement, validate, weighted_sum_host
from inspector.core.chunked_stream import Elementwise
from inspector.core.devices import resolve_device
from inspector.core.errors import InspectorError, UnsupportedLeafError, bullet_list
from inspector.core.leaves import dtype_name
from inspector.core.op import Op, register
from inspector.core.out_buffers import (
    DONATE_BYTES,
    output_buffer,
    pooled,
    warm_fill,
    worth_donating,
)
from inspector.core.output_slots import OutputSlot
from inspector.core.packed import Layout, same_layout
from inspector.core.plan import Call, Plan


def _integral(weights) -> bool:
    return all(isinstance(w, int | np.integer | np.bool_) for w in weights)


def weighted_sum_dtype(dtype, weights) -> np.dtype:
    """Returns the result dtype of `weighted_sum` for leaves of `dtype` and these weights.

    The rule, stated once:

    - floating and complex leaves keep their dtype; bfloat16/float16 are accumulated in
      float32 and cast back once at the end;
    - integer (and bool) leaves stay integer when every weight is an integer (Python `int` or a
      NumPy integer), computed in 32 bits (64 for int64) and cast back, wrapping like the leaf
      dtype; bool leaves become int32;
    - integer leaves with any float weight give JAX's default float (float32).

    >>> weighted_sum_dtype("int32", [1, 2, 3]), weighted_sum_dtype("int32", [0.5, 0.5])
    (dtype('int32'), dtype('float32'))
    >>> weighted_sum_dtype("bfloat16", [0.5, 0.5])
    dtype(bfloat16)
    """
    return _dtypes(np.dtype(dtype), _integral(weights))[1]


@lru_cache(maxsize=64)
def _dtypes(dtype: np.dtype, integral: bool) -> tuple[np.dtype, np.dtype, np.dtype]:
    """Returns `(accumulator, result, weight)` dtypes for one leaf dtype (as JAX holds it).
    Cached: NumPy's dtype tests cost ~10 us, asked once per leaf of a plain tree."""
    dtype = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
    if jnp.issubdtype(dtype, jnp.inexact):
        # narrower than 32 bits (bfloat16, float16, float8): accumulate in float32; float32,
        # float64 and complex already are. Stated, not left to promotion (strict in the tests).
        acc = dtype if dtype.itemsize >= 4 else f32
        weight = np.dtype(jnp.finfo(acc).dtype)  # the real part's dtype for complex
        return acc, dtype, weight
    if dtype == np.bool_:
        return (i32, i32, i32) if integral else (f32, f32, f32)
    if jnp.issubdtype(dtype, jnp.integer):
        if integral:
            acc = np.dtype(jax.dtypes.canonicalize_dtype(np.int64 if dtype.itemsize == 8 else i32))
            return acc, dtype, acc
        return f32, f32, f32
    raise TypeError(dtype)


def _leaf_kernel(k: int, acc, out):
    def kernel(w, *xs):
        ws = [w[i] for i in range(k)]  # read each weight once, outside the elementwise loop
        total = ws[0] * xs[0].astype(acc)
        for i in range(1, k):
            total = total + ws[i] * xs[i].astype(acc)
        return total.astype(out)

    return kernel


def _donated_kernel(k: int, acc, out):
    leaf = _leaf_kernel(k, acc, out)

    def kernel(buffer, w, *xs):
        del buffer  # donated: XLA writes the result into it instead of a fresh allocation
        return leaf(w, *xs)

    return kernel


def plan_weighted_sum(trees, weights, device=None, stream: bool = False) -> Plan:
    """Validates the inputs and returns the `Plan` that computes the weighted sum.

    `stream=True` plans for `lazy_result` (an `out=` file): large outputs of plain leaves
    take an `OutputSlot`, filled with a buffer reused along the stream.

    Raises:
        InspectorError: no trees, or not one weight per tree.
        StructureMismatchError: the trees differ (every differing key path is listed).
        UnsupportedLeafError: some leaves are not numeric arrays.
    """
    trees = list(trees)
    weights = list(np.asarray(weights).tolist()) if isinstance(weights, np.ndarray | jax.Array) \
        else list(weights)
    if not trees:
        raise InspectorError("Cannot take a weighted sum of no trees: give at least one tree.")
    if len(weights) != len(trees):
        raise InspectorError(
            f"Cannot take a weighted sum: got {len(trees)} trees and {len(weights)} weights. "
            "Give exactly one weight per tree."
        )
    bad = [i for i, w in enumerate(weights) if isinstance(w, complex) or not np.isscalar(w)]
    if bad:
        raise InspectorError(
            "Weights must be real numbers; not: "
            + ", ".join(f"weights[{i}] = {weights[i]!r}" for i in bad)
        )
    action = f"Cannot take a weighted sum of {len(trees)} trees"
    validate.check_same_structure(trees, action)
    placement.check_one_mesh(trees, action)
    device = resolve_device(device)
    integral = _integral(weights)
    if same_layout(trees):
        return _packed_plan(trees, weights, integral, device, action)
    return _leaf_plan(trees, weights, integral, device, action, stream)


def _weight_array(weights, integral: bool, dtype) -> np.ndarray:
    # A traced argument in one canonical dtype per leaf dtype: Python floats and np.float32
    # would otherwise compile twice, and weights baked into the kernel recompile on every change.
    return np.asarray(weights, dtype=_dtypes(np.dtype(dtype), integral)[2])


def _numeric(dtype) -> bool:
    return dtype == np.bool_ or bool(jnp.issubdtype(dtype, jnp.number))  # bfloat16 included


def _check_numeric(dtypes_by_path: dict[str, str], action: str) -> None:
    bad = {p: d for p, d in dtypes_by_path.items() if not _numeric(np.dtype(d))}
    if bad:
        raise UnsupportedLeafError(
            f"{action}: {len(bad)} leaves are not numeric.\n"
            + bullet_list(f"{p}: {d}" for p, d in bad.items())
        )


def _leaf_plan(trees, weights, integral, device, action, stream=False) -> Plan:
    flat = [validate.flatten(t) for t in trees]
    treedef = flat[0][1]
    columns = [validate.check_array_leaves(t, leaves, action) for t, (leaves, _) in
               zip(trees, flat, strict=True)]
    first = columns[0]
    dtypes = {dtype_name(jax.dtypes.canonicalize_dtype(x.dtype)) for x in first}
    if not all(_numeric(np.dtype(d)) for d in dtypes):
        paths = validate.key_paths(trees[0])
        _check_numeric({p: str(np.dtype(x.dtype)) for p, x in zip(paths, first, strict=True)},
                       action)
    w_by_dtype = {d: _weight_array(weights, integral, d) for d in dtypes}
    k = len(trees)
    calls, elementwise = [], []
    read = written = 0
    for i, x in enumerate(first):
        dtype = np.dtype(jax.dtypes.canonicalize_dtype(x.dtype))
        acc, out, _ = _dtypes(dtype, integral)
        shape = tuple(x.shape)
        name = dtype_name(dtype)
        key = ("weighted_sum", k, shape, name, dtype_name(acc), dtype_name(out))
        args = [w_by_dtype[name], *(col[i] for col in columns)]
        sharding = placement.first(args[1:])
        nbytes = math.prod(shape) * out.itemsize
        if sharding is None and stream and nbytes >= DONATE_BYTES:
            # streamed (`lazy_result`): into one of a few buffers reused along the stream
            call = Call(("weighted_sum_donated", *key[1:]),
                        lambda k=k, acc=acc, out=out: _donated_kernel(k, acc, out),
                        [OutputSlot(shape, out), *args], donate=(0,))
        elif sharding is None and worth_donating(nbytes, args[1:]):
            # written into a reused buffer (the previous result's, inside `donating`)
            call = Call(("weighted_sum_donated", *key[1:]),
                        lambda k=k, acc=acc, out=out: _donated_kernel(k, acc, out),
                        [output_buffer(shape, out, device), *args], donate=(0,), carry=True)
        else:
            call = Call(key, lambda k=k, acc=acc, out=out: _leaf_kernel(k, acc, out), args)
        if sharding is not None:  # SPMD over the mesh; the sum keeps the leaf's layout
            call.shardings = (placement.replicated(sharding.mesh),
                              *placement.like(sharding, args[1:]))
            call.out_shardings = sharding
        calls.append(call)
        elementwise.append(Elementwise(
            ("weighted_sum", k, *key[3:], *(dtype_name(np.dtype(col[i].dtype)) for col in columns)),
            lambda k=k, acc=acc, out=out: _leaf_kernel(k, acc, out), (w_by_dtype[name],),
            tuple(col[i] for col in columns), out))
        read += k * math.prod(shape) * dtype.itemsize
        written += math.prod(shape) * out.itemsize
    return Plan("weighted_sum", device, calls, treedef.unflatten, read, written,
                elementwise=elementwise if stream else None)


def _packed_plan(trees, weights, integral, device, action) -> Plan:
    layout: Layout = trees[0].layout
    if not all(_numeric(np.dtype(b.dtype)) for b in trees[0].buffers.values()):
        paths = validate.key_paths(trees[0])
        _check_numeric({p: s.dtype for p, s in zip(paths, layout.slots, strict=True)}, action)
    k = len(trees)
    calls = []
    read = written = 0
    for group in layout.sizes:
        dtype = trees[0].buffers[group].dtype
        acc, out, _ = _dtypes(np.dtype(dtype), integral)
        buffers = [t.buffers[group] for t in trees]
        sharding = placement.first(buffers)
        shape = tuple(buffers[0].shape)  # layout.lead + (size,)
        w = _weight_array(weights, integral, dtype)
        if sharding is None and weighted_sum_host.usable(dtype, acc, out, shape, device):
            # float32 on the CPU: the streaming-store loop, into its own memory or the last
            # result's (no zero fill)
            buffer = pooled(shape, out, device)
            call = weighted_sum_host.host_call(k, shape, device, [
                host_outputs.placeholder(np.float32, device) if buffer is None else buffer, w,
                *buffers])
        else:
            buffer = output_buffer(shape, out, device if sharding is None else sharding)
            call = _packed_call(k, shape, dtype, acc, out, [buffer, w, *buffers])
        if sharding is not None:  # buffers laid out over a mesh: so is the result
            call.shardings = (sharding, placement.replicated(sharding.mesh),
                              *placement.like(sharding, buffers))
            call.out_shardings = sharding
        calls.append(call)
        read += k * math.prod(shape) * np.dtype(dtype).itemsize
        written += math.prod(shape) * out.itemsize
    groups = list(layout.sizes)

    def assemble(outputs):
        return trees[0].with_dtypes(dict(zip(groups, outputs, strict=True)))

    return Plan("weighted_sum", device, calls, assemble, read, written)


def _packed_call(k: int, shape: tuple, dtype, acc, out, args: list) -> Call:
    """The call of one dtype group of a packed sum: `args` = [output buffer (donated), the
    weights, the k trees' buffers of that group]."""
    key = ("weighted_sum_packed", k, shape, str(dtype), str(acc), str(out))
    return Call(key, lambda k=k, acc=acc, out=out: _donated_kernel(k, acc, out), args,
                donate=(0,), carry=True)


def precompile_packed(layout: Layout, k: int, device=None, integral: bool = False) -> int:
    """Compiles the kernels a weighted sum of `k` packed trees of `layout` runs on `device`
    (one per dtype; float weights unless `integral`), reading and allocating nothing: the
    app's server warms the sum its launcher's checkpoints are opened for, so the first run
    finds it compiled. Returns how many kernels were compiled now (0: all were cached).

    >>> from inspector.core.packed import plan_layout
    >>> layout, _ = plan_layout({"w": np.zeros(3, np.float32)})
    >>> precompile_packed(layout, 2) in (0, 1), precompile_packed(layout, 2)
    (True, 0)
    """
    from inspector.core import compile_cache

    compile_cache.enable()  # before the fills compile too: an earlier process stored them
    device = resolve_device(device)
    calls = []
    for group, size in layout.sizes.items():
        dtype = np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(group)))
        acc, out, weight = _dtypes(dtype, integral)
        shape = (*layout.lead, size)
        if weighted_sum_host.usable(dtype, acc, out, shape, device):
            weighted_sum_host.warm(k)  # nothing of XLA's: the loop, loaded or compiled
            continue
        warm_fill(shape, out, device)  # the output's buffer, when no earlier one is given
        calls.append(_packed_call(k, shape, dtype, acc, out, [
            jax.ShapeDtypeStruct(shape, out), np.zeros(k, weight),
            *[jax.ShapeDtypeStruct(shape, dtype)] * k]))
    return Plan("weighted_sum", device, calls, lambda outs: outs, 0, 0).compile()[1]


WEIGHTED_SUM = Op("weighted_sum", plan_weighted_sum)


def weighted_sum(trees, weights, device=None):
    """Returns `sum_k weights[k] * trees[k]`, leaf by leaf, computed by compiled kernels.

    Works for any leaf rank (it contracts over the tree axis; the popular `weights @ stacked`
    trick fails for rank >= 2). Result dtypes follow `weighted_sum_dtype`. Kernels compile once
    per leaf shape (one per dtype for packed trees); weights are traced, so new weights never
    recompile.

    Args:
        trees: a sequence of pytrees with identical structure, shapes and dtypes; or packed
            trees (`inspector.pack`), which give a packed result in one kernel per dtype.
        weights: one real number per tree.
        device: a `jax.Device`, a name like `"cpu:1"`, or None for the default device.

    Returns:
        A pytree like `trees[0]` (JAX array leaves on `device`), or a `PackedTree`.

    Raises:
        StructureMismatchError: the trees differ; every differing key path is listed.
        InspectorError: not one weight per tree.

    >>> t1, t2 = {"w": np.array([1, 2])}, {"w": np.array([10, 20])}
    >>> weighted_sum([t1, t2], [1, 2])["w"].tolist()
    [21, 42]
    """
    return WEIGHTED_SUM(trees, weights, device=device)


register(weighted_sum, WEIGHTED_SUM)


caches.register_function("weighted-sum dtypes", _dtypes)
