"""Merges as plans: one compiled kernel per distinct leaf shape (or per dtype, or per leaf size
over packed buffers), with every numeric parameter a traced argument."""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core import placement, validate
from inspector.core.devices import resolve_device
from inspector.core.merge import checks, kernels
from inspector.core.merge.methods import Method
from inspector.core.op import Op, register
from inspector.core.out_buffers import DONATE_BYTES
from inspector.core.output_slots import OutputSlot
from inspector.core.packed import PackedTree
from inspector.core.plan import Call, Plan

_F32 = np.dtype(np.float32)


def plan_merge(method: str, trees, *, base=None, weights=None, device=None, stream=False,
               **params) -> Plan:
    """Validates everything, then returns the `Plan` that computes `merge(...)`.

    `stream=True` plans for `lazy_result` (an `out=` file): large outputs of plain leaves
    take an `OutputSlot`, filled with a buffer reused along the stream.

    Raises:
        InspectorError: unknown method or parameter, wrong tree count, missing base, bad
            weights or density.
        StructureMismatchError: the trees (and base) differ; every key path is listed.
        UnsupportedLeafError: some leaves are not floating-point arrays.
    """
    spec = checks.check_method(method)
    trees = list(trees)
    values = checks.check_call(spec, trees, base, weights, params)
    checks.check_trees(spec, trees, base)
    device = resolve_device(device)
    inputs = ([base] if spec.needs_base else []) + trees
    placement.check_one_mesh(inputs, f"Cannot merge with {spec.name!r}")
    k = len(trees)
    statics = _statics(spec, values)
    fparams = _float_params(spec, values, k)
    key = partial(_leaf_key, values.get("seed", 0))
    compute = partial(_compute, spec.name, k, statics)
    if all(isinstance(t, PackedTree) for t in inputs):
        return _packed_plan(spec, inputs, compute, statics, fparams, key, values, device)
    return _leaf_plan(spec, inputs, compute, statics, fparams, key, values, device, stream)


def merge(method: str, trees, *, base=None, weights=None, device=None, **params):
    """Returns the merge of `trees` by `method`, defined exactly as mergekit defines it.

    The models being merged are `trees`; the tree they were fine-tuned from is `base` (needed by
    `task_arithmetic`, `ties`, `dare_linear`, `dare_ties`, `model_stock`; not taken by `linear`
    and `slerp`). Every leaf is computed in float32 and cast back once to its dtype (mergekit
    works in the base's dtype, so bfloat16 results may differ from it by a rounding).

    Methods and parameters (defaults are mergekit's; `merge_methods/registry.py`):

    - `linear` (`normalize=True`): `sum_i w_i x_i / sum_i w_i`.
    - `task_arithmetic` (`normalize=False`, `lam=1`): `base + lam * sum_i w_i (x_i - base)`.
    - `ties` (`density=1`, `normalize=True`, `rescale=False`, `lam=1`): each task vector keeps
      its `int(density * size)` largest magnitudes per leaf; per element the sign of the
      weighted sum is elected and only agreeing weighted deltas are summed, divided by the sum
      of their weights (Yadav et al. 2023; mergekit's `get_mask(method="sum")`).
    - `dare_linear`, `dare_ties` (`density=1`, `normalize=False`, `rescale=True`, `lam=1`,
      `seed=0`): each task-vector element is kept with probability `density` (Yu et al. 2023);
      `rescale` scales the kept values so each leaf's L1 norm is unchanged (mergekit's rule,
      `RescaleNorm.l1`); `dare_ties` adds TIES' sign election. The mask is drawn from `seed`,
      per leaf and per model: the same seed gives the same result.
    - `slerp` (`t`, required; exactly two trees): spherical interpolation of each leaf as one
      vector, from `trees[0]` (t = 0) to `trees[1]` (t = 1); linear where the two are
      (anti)parallel (|cos| > 0.9995), as mergekit's `slerp`.
    - `model_stock` (two or more trees and a base): per leaf, `t = N cos / (1 + (N-1) cos)`
      from the mean pairwise cosine of the task vectors, result `t * mean_i x_i + (1-t) base`
      (Jang et al. 2024; mergekit's `filter_wise=False`).

    Weights, density, `t`, `lam` and `seed` are traced: changing them never recompiles. Kernels
    compile once per distinct leaf shape, or, for packed trees (`inspector.pack`), once per
    dtype (`linear`, `task_arithmetic`) or per distinct leaf size.

    Args:
        method: one of the names above.
        trees: the models to merge: pytrees (or packed trees, or lazy checkpoints).
        base: the base model, for the methods that need one.
        weights: one weight per tree, or one number for all (default 1.0 each).
        device: where to compute (`"cpu:0"`, a `jax.Device`, or None for the default).
        **params: the method's parameters above.

    Returns:
        A pytree like `trees[0]` (a `PackedTree` when every input is packed).

    Raises:
        InspectorError: unknown method or parameter, wrong number of trees, base missing (the
            message names the methods that need one), bad weights or density.
        StructureMismatchError: structure, shape or dtype differences between any of the trees
            and the base, every key path at once.
        UnsupportedLeafError: non-float leaves.

    >>> base = {"w": np.zeros(4, np.float32)}
    >>> a = {"w": np.array([1.0, -2, 3, 0], np.float32)}
    >>> b = {"w": np.array([3.0, 2, -1, 1], np.float32)}
    >>> merge("ties", [a, b], base=base, density=0.5)["w"].tolist()
    [3.0, 2.0, 3.0, 0.0]
    >>> merge("linear", [a, b], weights=[1, 3])["w"].tolist()
    [2.5, 1.0, 0.0, 0.75]
    """
    return MERGE(method, trees, base=base, weights=weights, device=device, **params)


MERGE = Op("merge", plan_merge)
register(merge, MERGE)


def _statics(spec: Method, values: dict) -> tuple:
    return tuple((p, values[p]) for p in ("normalize", "rescale") if p in values)


def _float_params(spec: Method, values: dict, k: int) -> np.ndarray:
    """`[w_0..w_{k-1}, density_0..density_{k-1}, lam, t]` as one traced float32 array."""
    weights = values.get("weights", [1.0] * k)
    density = values.get("density", [1.0] * k)
    return np.asarray([*weights, *density, values.get("lam", 1.0), values.get("t", 0.0)],
                      _F32)


def _leaf_key(seed: int, leaf_id: int) -> np.ndarray:
    """The random state of one leaf's DARE masks (`kernels.uniform`): the seed and the leaf's
    index, so packed and plain trees draw the same masks; a traced argument, so a new seed
    never recompiles."""
    return np.array([(seed >> 32) & 0xFFFFFFFF, seed & 0xFFFFFFFF, leaf_id, 0x6D657267],
                    np.uint32)


def _int_params(counts, leaf_id: int, offset: int) -> np.ndarray:
    """`[kept_0..kept_{k-1}, leaf index, offset]` as one traced int32 array."""
    return np.asarray([*counts, leaf_id, offset], np.int32)


def _compute(name: str, k: int, statics: tuple, flat: list, fp, ip, key):
    """The merged float32 vector of one leaf from its flattened float32 inputs."""
    flags = dict(statics)
    weights, density, lam, t = fp[:k], fp[k:2 * k], fp[2 * k], fp[2 * k + 1]
    if name == "linear":
        return kernels.linear(flat, weights, normalize=flags["normalize"])
    if name == "slerp":
        return kernels.slerp(flat[0], flat[1], t)
    base, xs = flat[0], flat[1:]
    if name == "model_stock":
        return kernels.model_stock(base, xs)
    if name == "task_arithmetic":
        return kernels.task_arithmetic(base, xs, weights, lam, normalize=flags["normalize"])
    return kernels.general_task_arithmetic(
        base, xs, weights, density, ip[:k], lam, key,
        sparsify="magnitude" if name == "ties" else "random",
        consensus=name in ("ties", "dare_ties"),
        normalize=flags["normalize"], rescale=flags["rescale"])


def _leaf_kernel(compute, shape, dtype):
    def kernel(fp, ip, key, *arrays):
        flat = [a.reshape(-1).astype(jnp.float32) for a in arrays]
        return compute(flat, fp, ip, key).reshape(shape).astype(dtype)

    return kernel


def _donated_leaf_kernel(compute, shape, dtype):
    leaf = _leaf_kernel(compute, shape, dtype)

    def kernel(buffer, fp, ip, key, *arrays):
        del buffer  # donated: the result is written into it (a stream's reused buffer)
        return leaf(fp, ip, key, *arrays)

    return kernel


def _whole_kernel(compute, dtype):
    def kernel(buffer, fp, ip, key, *arrays):
        del buffer  # donated: the result is written into it, no fresh pages
        return compute([a.astype(jnp.float32) for a in arrays], fp, ip, key).astype(dtype)

    return kernel


def _slice_kernel(compute, size: int, dtype):
    def kernel(buffer, fp, ip, key, *arrays):
        offset = ip[-1]
        flat = [jax.lax.dynamic_slice_in_dim(a, offset, size).astype(jnp.float32)
                for a in arrays]
        merged = compute(flat, fp, ip, key).astype(dtype)
        return jax.lax.dynamic_update_slice_in_dim(buffer, merged, offset, 0)

    return kernel


def _slices_kernel(compute, size: int, dtype):
    """`_slice_kernel` over every leaf of one size in a packed buffer, in one loop: a row of
    `ips` and of `keys` per leaf (its counts and offset, its random state). One call per
    distinct leaf size instead of one per leaf: a kernel call costs ~0.1 ms here, most of a
    small leaf's merge."""
    one = _slice_kernel(compute, size, dtype)

    def kernel(buffer, fp, ips, keys, *arrays):
        return jax.lax.fori_loop(0, ips.shape[0],
                                 lambda j, out: one(out, fp, ips[j], keys[j], *arrays), buffer)

    return kernel


def _counts(spec, values, sizes):
    if spec.name == "ties":
        return checks.keep_counts(sizes, values["density"])
    return [[n] * len(values.get("density", [0])) for n in sizes]


def _leaf_plan(spec, inputs, compute, statics, fparams, key, values, device,
               stream=False) -> Plan:
    action = f"Cannot merge with {spec.name!r}"
    flat = [validate.flatten(t) for t in inputs]
    treedef = flat[0][1]
    columns = [validate.check_array_leaves(t, leaves, action)
               for t, (leaves, _) in zip(inputs, flat, strict=True)]
    first = columns[0]
    sizes = [math.prod(x.shape) for x in first]
    counts = _counts(spec, values, sizes)
    n_in = len(inputs)
    calls = []
    read = written = 0
    for i, x in enumerate(first):
        dtype = np.dtype(jax.dtypes.canonicalize_dtype(x.dtype))
        shape = tuple(x.shape)
        call_key = ("merge", spec.name, n_in, statics, shape, str(dtype))
        args = [fparams, _int_params(counts[i], i, 0), key(i), *(col[i] for col in columns)]
        sharding = placement.first(args[3:])
        if sharding is None and stream and sizes[i] * dtype.itemsize >= DONATE_BYTES:
            call = Call(("merge_donated", *call_key[1:]),
                        partial(_donated_leaf_kernel, compute, shape, dtype),
                        [OutputSlot(shape, dtype), *args], donate=(0,))
        else:
            call = Call(call_key, partial(_leaf_kernel, compute, shape, dtype), args)
        if sharding is not None:  # SPMD over the mesh; the merged leaf keeps the layout
            call.shardings = ((placement.replicated(sharding.mesh),) * 3
                              + placement.like(sharding, args[3:]))
            call.out_shardings = sharding
        calls.append(call)
        read += n_in * sizes[i] * dtype.itemsize
        written += sizes[i] * dtype.itemsize
    return Plan("merge", device, calls, treedef.unflatten, read, written)


def _packed_plan(spec, inputs, compute, statics, fparams, key, values, device) -> Plan:
    layout = inputs[0].layout
    slots = layout.slots
    counts = _counts(spec, values, [s.size for s in slots])
    n_in = len(inputs)
    calls = []
    read = written = 0
    ends: list[int] = []  # the index of each group's last call: its output is the group
    for group, size in layout.sizes.items():
        dtype = np.dtype(inputs[0].buffers[group].dtype)
        buffers = [t.buffers[group] for t in inputs]
        out = jnp.zeros((size,), dtype, device=device)
        read += n_in * size * dtype.itemsize
        written += size * dtype.itemsize
        if spec.elementwise:
            call_key = ("merge_packed", spec.name, n_in, statics, size, str(dtype))
            args = [out, fparams, _int_params(counts[0] if counts else [], 0, 0), key(0),
                    *buffers]
            calls.append(Call(call_key, partial(_whole_kernel, compute, dtype), args,
                              donate=(0,), carry=True))
        else:
            members = [(i, s) for i, s in enumerate(slots) if s.group == group and s.size]
            by_size: dict[object, list] = {}
            for i, s in members:
                # TIES alone keeps a call per leaf: its top-k search (a while loop) inside
                # the loop over leaves ran twice as slow (208 ms against 104 on 1e7 params).
                by_size.setdefault(s.size if spec.name != "ties" else (s.size, i), []).append(
                    (i, s))
            for j, same in enumerate(by_size.values()):
                leaf_size = same[0][1].size
                call_key = ("merge_slices", spec.name, n_in, statics, leaf_size, len(same),
                            size, str(dtype))
                ips = np.stack([_int_params(counts[i], i, s.offset) for i, s in same])
                keys = np.stack([key(i) for i, _ in same])
                calls.append(Call(call_key, partial(_slices_kernel, compute, leaf_size, dtype),
                                  [out, fparams, ips, keys, *buffers], donate=(0,),
                                  carry=j == 0, chain=j > 0))
            if not members:  # a group of empty leaves: nothing to compute
                calls.append(Call(("merge_empty", size, str(dtype)),
                                  lambda: (lambda b: b), [out]))
        ends.append(len(calls) - 1)
    groups = list(layout.sizes)

    def assemble(outputs):
        return inputs[0].with_dtypes({g: outputs[e] for g, e in zip(groups, ends, strict=True)})

    return Plan("merge", device, calls, assemble, read, written)
