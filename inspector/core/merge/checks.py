"""Validation before a merge: every problem with the method, the parameters and the trees is
reported before any data is read (a long merge should not fail at its last leaf)."""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core import validate
from inspector.core.describe import leaf_info
from inspector.core.errors import InspectorError, UnsupportedLeafError, bullet_list
from inspector.core.merge.methods import METHODS, REQUIRED, Method

NEEDS_BASE = sorted(name for name, m in METHODS.items() if m.needs_base)


def check_method(method) -> Method:
    """Returns the `Method` named `method`, or raises naming the ones there are."""
    spec = METHODS.get(method) if isinstance(method, str) else None
    if spec is None:
        raise InspectorError(
            f"Unknown merge method {method!r}. Methods: {', '.join(METHODS)}."
        )
    return spec


def check_call(spec: Method, trees: list, base, weights, params: dict) -> dict:
    """Checks everything but the trees' contents; returns the full parameter dict.

    Returned keys: each of `spec.params` (defaults filled in), plus `weights` and `density` as
    float lists of one value per tree where the method has them.
    """
    name = spec.name
    k = len(trees)
    if k < spec.min_trees or (spec.max_trees is not None and k > spec.max_trees):
        want = (f"exactly {spec.min_trees}" if spec.min_trees == spec.max_trees
                else f"at least {spec.min_trees}")
        extra = " fine-tuned trees and a base" if spec.needs_base else " trees"
        raise InspectorError(f"{name!r} merges {want}{extra}; got {k} trees.")
    if spec.needs_base and base is None:
        raise InspectorError(
            f"{name!r} needs base=: the tree the others were fine-tuned from (its deltas "
            f"x_i - base are merged). Methods that need a base: {', '.join(NEEDS_BASE)}."
        )
    if not spec.needs_base and base is not None:
        raise InspectorError(
            f"{name!r} takes no base (it merges the trees themselves); drop base=, or use one "
            f"of {', '.join(NEEDS_BASE)}."
        )
    unknown = sorted(set(params) - set(spec.params))
    if unknown:
        raise InspectorError(
            f"{name!r} has no parameter {', '.join(map(repr, unknown))}. "
            f"It accepts: {', '.join(spec.accepts) or 'nothing but the trees'}."
        )
    if weights is not None and not spec.weighted:
        raise InspectorError(f"{name!r} takes no weights (mergekit's {name} has none).")
    missing = [p for p, d in spec.params.items() if d is REQUIRED and p not in params]
    if missing:
        raise InspectorError(f"{name!r} needs {', '.join(f'{p}=' for p in missing)}.")
    out = {p: params.get(p, d) for p, d in spec.params.items()}
    for p in ("normalize", "rescale"):
        if p in out and not isinstance(out[p], bool | np.bool_):
            raise InspectorError(f"{p} must be True or False, got {out[p]!r}.")
    for p in ("lam", "t"):
        if p in out:
            out[p] = _real(out[p], p)
    if "seed" in out:
        seed = out["seed"]
        if not isinstance(seed, numbers.Integral) or not 0 <= int(seed) < 2**63:
            raise InspectorError(f"seed must be an integer in [0, 2**63), got {seed!r}.")
        out["seed"] = int(seed)
    if spec.weighted:
        out["weights"] = _per_model(1.0 if weights is None else weights, k, "weights")
        if name == "linear" and out["normalize"] and sum(out["weights"]) == 0:
            raise InspectorError(
                "linear with normalize=True divides by the sum of the weights, which is 0. "
                "Change a weight or pass normalize=False."
            )
    if "density" in out:
        out["density"] = _per_model(out["density"], k, "density")
        bad = [f"density[{i}] = {d}" for i, d in enumerate(out["density"]) if not 0 <= d <= 1]
        if bad:
            raise InspectorError(f"density must lie in [0, 1]; not: {', '.join(bad)}.")
    return out


def _real(value, name: str) -> float:
    if isinstance(value, bool | complex) or not isinstance(value, numbers.Real):
        if not (isinstance(value, np.ndarray | jax.Array) and np.ndim(value) == 0):
            raise InspectorError(f"{name} must be a real number, got {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise InspectorError(f"{name} must be finite, got {value}.")
    return value


def _per_model(value, k: int, name: str) -> list[float]:
    if isinstance(value, np.ndarray | jax.Array):
        value = np.asarray(value).tolist()
    if isinstance(value, list | tuple):
        if len(value) != k:
            raise InspectorError(
                f"Got {k} trees and {len(value)} {name}: give one value per tree (the base "
                "not counted), or a single number for all."
            )
        return [_real(v, f"{name}[{i}]") for i, v in enumerate(value)]
    return [_real(value, name)] * k


def check_trees(spec: Method, trees: list, base) -> None:
    """Checks structure, shapes and dtypes of all trees (and the base) at once, then that every
    leaf is a real floating array.

    Raises:
        StructureMismatchError: every differing key path, naming the trees.
        UnsupportedLeafError: non-float leaves, every key path listed.
    """
    everything = ([base] if base is not None else []) + trees
    names = (["base"] if base is not None else []) + [f"tree {i}" for i in range(len(trees))]
    action = f"Cannot merge {len(trees)} trees with {spec.name!r}"
    validate.check_same_structure(everything, action, names=names)
    ref = everything[0]
    leaves, _ = validate.flatten(ref)
    infos = [leaf_info(x) for x in leaves]
    bad = [i for i, (shape, dtype, _, _) in enumerate(infos)
           if shape is None or not _real_float(dtype)]
    if bad:
        paths = validate.key_paths(ref)
        raise UnsupportedLeafError(
            f"{action}: {len(bad)} leaves are not real floating-point arrays.\n"
            + bullet_list(f"{paths[i]}: {infos[i][1] or type(leaves[i]).__name__}" for i in bad)
            + "\nMerge methods work on float leaves (float32, bfloat16, float16, float64); "
            "drop the others from the trees (or set them to None) and merge the rest."
        )


def _real_float(dtype) -> bool:
    try:
        return bool(jnp.issubdtype(np.dtype(dtype), jnp.floating))
    except TypeError:
        return False


def keep_counts(sizes: list[int], density: list[float]) -> list[list[int]]:
    """TIES' per-leaf, per-model number of kept elements as mergekit 0.1.5's
    `sparsify.magnitude` computes it: all for density >= 1, none for density <= 0, else
    `max(1, int(density * size))` (a positive density keeps at least one element)."""
    return [[n if d >= 1 else 0 if d <= 0 else max(1, int(d * n)) for d in density]
            for n in sizes]
