"""`convert(source, alignment)`: the target tree made from the source by jitted kernels.

Each target leaf is one kernel call: its source leaf transposed or reshaped as its pair says,
cast to the target's dtype. Kernels are keyed by (source shape, dtype, transform, output
dtype): a 100-layer model compiles a handful, and in-memory leaves of one key run 32 to a
kernel (`calls.schedule`). Lazy (checkpoint) leaves are read once, when their call runs, so a
checkpoint streams through; with `inspector.convert(..., out=path)` the result streams into a
file too (the public wrapper in `inspector/ops.py`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core.devices import resolve_device
from inspector.core.errors import InspectorError, StructureMismatchError, bullet_list
from inspector.core.leaves import dtype_name
from inspector.core.op import Op, register
from inspector.core.out_buffers import output_buffer, worth_donating
from inspector.core.packed import PackedTree
from inspector.core.plan import Call, Plan
from inspector.core.port.alignment import Alignment
from inspector.core.port.paths import build, leaves, parse_keystr
from inspector.core.port.transforms import RESHAPE, TRANSPOSE, Transform


def _kernel(transform: Transform, dtype):
    def kernel(x):
        if transform.kind == TRANSPOSE:
            x = jnp.transpose(x, transform.perm)
        elif transform.kind == RESHAPE:
            x = jnp.reshape(x, transform.shape)
        return x.astype(dtype)

    return kernel


def _donated(transform: Transform, dtype):
    inner = _kernel(transform, dtype)

    def kernel(out, x):
        del out  # donated: the result lands in its buffer (no fresh pages on repeats)
        return inner(x)

    return kernel


def plan_convert(source, alignment: Alignment, allow_missing: bool = False, target=None,
                 device=None) -> Plan:
    """Validates the source against the alignment and returns the conversion `Plan`.

    Raises:
        InspectorError: targets are unmatched or ambiguous (every path listed) and
            `allow_missing` is false; `alignment` is no `Alignment`.
        StructureMismatchError: source leaves the alignment names are missing or of another
            shape than it was made for (every path listed).
    """
    if not isinstance(alignment, Alignment):
        raise InspectorError(f"convert needs an Alignment (from inspector.align), got "
                             f"{type(alignment).__name__}.")
    action = "Cannot convert"
    if not alignment.complete and not allow_missing:
        raise InspectorError(alignment.refusal(action))
    device = resolve_device(device)
    paths, _, specs, values = leaves(source)
    index = {p: i for i, p in enumerate(paths)}
    sources = {p: (tuple(s), d) for p, s, d in alignment.sources}
    problems = []
    for pair in alignment.pairs:
        i = index.get(pair.source)
        if i is None:
            problems.append(f"{pair.source}: missing from the source (feeds {pair.target})")
        elif specs[i] is None:
            problems.append(f"{pair.source}: a {type(values[i]).__name__}, not an array")
        elif tuple(specs[i][0]) != sources.get(pair.source, (specs[i][0],))[0]:
            problems.append(f"{pair.source}: shape {tuple(specs[i][0])}, the alignment was "
                            f"made for {sources[pair.source][0]}")
    if problems:
        raise StructureMismatchError(
            f"{action}: {len(problems)} source {'leaf does' if len(problems) == 1 else 'leaves do'}"
            " not fit the alignment.\n" + bullet_list(problems)
            + "\nAlign this source again (`inspector.align(source, target)`).")
    kept = _kept(target, alignment, allow_missing)
    calls, slots, read, written = [], [], 0, 0
    for path, shape, dtype in alignment.targets:
        pair = alignment.pair(path)
        if pair is None:
            slots.append((path, kept.get(path, _OMIT)))
            continue
        x = values[index[pair.source]]
        if not hasattr(x, "shape"):
            x = np.asarray(x)
        in_dtype = np.dtype(jax.dtypes.canonicalize_dtype(x.dtype))
        out_dtype = np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(dtype)))
        key = ("convert", tuple(x.shape), dtype_name(in_dtype), pair.transform.kind,
               pair.transform.perm, pair.transform.shape, dtype_name(out_dtype))
        nbytes = math.prod(shape) * out_dtype.itemsize
        if worth_donating(nbytes, [x]):
            call = Call(("convert_donated", *key[1:]),
                        lambda t=pair.transform, d=out_dtype: _donated(t, d),
                        [output_buffer(tuple(shape), out_dtype, device), x], donate=(0,),
                        carry=True)
        else:
            call = Call(key, lambda t=pair.transform, d=out_dtype: _kernel(t, d), [x])
        slots.append((path, len(calls)))
        calls.append(call)
        read += math.prod(x.shape) * in_dtype.itemsize
        written += nbytes
    treedef = _treedef(target, alignment)
    complete = all(not isinstance(v, _Omit) for _, v in slots)

    def assemble(outputs):
        values_out = [outputs[v] if isinstance(v, int) else v for _, v in slots]
        if complete and treedef is not None:
            return treedef.unflatten(values_out)
        return build([(parse_keystr(p), v) for (p, _), v in zip(slots, values_out, strict=True)
                      if not isinstance(v, _Omit)])

    return Plan("convert", device, calls, assemble, read, written)


class _Omit:
    """Marks a target leaf left out of the result (unmatched, `allow_missing`)."""


_OMIT = _Omit()


def _kept(target, alignment: Alignment, allow_missing: bool) -> dict:
    """The target's own leaves for the paths no pair fills (kept where `target=` is given)."""
    if target is None or not allow_missing:
        return {}
    paths, _, _, values = leaves(target)
    missing = {*alignment.unmatched_target, *(a.target for a in alignment.ambiguous)}
    return {p: v for p, v in zip(paths, values, strict=True) if p in missing}


def _treedef(target, alignment: Alignment):
    """The structure to build: the given target's, else the one `align` saw (if the alignment
    was not read from JSON), else None (nested dicts and lists from the key paths)."""
    if target is not None:
        from inspector.core import nodes

        paths, _, _, _ = leaves(target)
        if paths != [p for p, _, _ in alignment.targets]:
            raise StructureMismatchError(
                "Cannot convert: `target` is not the tree the alignment was made for (its "
                f"{len(paths)} leaf paths differ from the alignment's "
                f"{len(alignment.targets)}). Align with this target.")
        return target.treedef if isinstance(target, PackedTree) else nodes.flatten(target)[1]
    return alignment.treedef


CONVERT = Op("convert", plan_convert)


def convert(source, alignment: Alignment, allow_missing: bool = False, device=None,
            target=None):
    """Returns the target tree made from `source` as `alignment` says (in memory).

    Each target leaf is its source leaf transposed or reshaped by its pair's transform and
    cast to the target's dtype, by compiled kernels on `device`. The result has the target's
    structure (the tree given to `align`, or `target`; after `Alignment.from_json`, nested
    dicts and lists rebuilt from the key paths).

    Args:
        source: the source tree (or a flat state dict), as given to `align`; lazy leaves are
            read once, each when its kernel runs.
        alignment: from `inspector.align` (overridden as needed).
        allow_missing: with unmatched or ambiguous targets, leave those paths out (or, with
            `target`, keep the target's own values there) instead of refusing.
        device: where the kernels run (a `jax.Device`, a name like "cpu:0", None: default).
        target: the target tree itself: its structure is used, and its values fill the
            paths no pair fills when `allow_missing` is true.

    Raises:
        InspectorError: targets unmatched or ambiguous (each listed) without `allow_missing`.
        StructureMismatchError: the source lacks leaves the alignment names, or their shapes
            changed.

    >>> from inspector.core.port.align import align
    >>> src = {"fc.weight": np.arange(6.0).reshape(3, 2)}
    >>> dst = {"Dense_0": {"kernel": np.zeros((2, 3))}}
    >>> convert(src, align(src, dst))["Dense_0"]["kernel"].tolist()
    [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]
    """
    return CONVERT(source, alignment, allow_missing=allow_missing, target=target,
                   device=device)


register(convert, CONVERT)
