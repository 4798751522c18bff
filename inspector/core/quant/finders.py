"""The members of each scheme among one dict's leaves, checked against each other by shape.

Each finder takes the dict (raw names -> leaves) and the set of names already taken by a
group, and gives `(scheme, logical name, members {role: name}, shape, dtype, problems,
layout, block)` tuples; `groups.py` turns them into `QuantGroup`s with key paths.
"""

from __future__ import annotations

import numpy as np

from inspector.core.quant import schemes as S

_UINT8, _INT32 = np.dtype("uint8"), np.dtype("int32")


def _leaf(node, name):
    v = node.get(name) if type(name) is str else None
    return v if v is not None and hasattr(v, "dtype") and hasattr(v, "shape") else None


def _shape(v) -> tuple[int, ...]:
    return tuple(v.shape)


def fp8_group(node, name: str, taken: set):
    """The float8 weight `name` and its scale (or the problem of having none)."""
    codes = node[name]
    shape = _shape(codes)
    taken.add(name)
    for scale_name in S.fp8_scale_names(name):
        scale = _leaf(node, scale_name)
        if scale is None:
            continue
        taken.add(scale_name)
        members = {"weight": name, "scale": scale_name}
        fit = S.fp8_blocks(shape, _shape(scale))
        if fit is None:
            return (S.FP8, name, members, shape, "bfloat16",
                    [f"scale shape {_shape(scale)} does not tile the weight {shape}"],
                    S.fp8_text(codes.dtype, "unknown", ()), None)
        problems = []
        if np.dtype(scale.dtype) not in S.FLOAT_SCALE:
            problems.append(f"unknown scale dtype {scale.dtype} (expected a float)")
        kind, block = fit
        return (S.FP8, name, members, shape, "bfloat16", problems,
                S.fp8_text(codes.dtype, kind, block), block)
    return (S.FP8, name, {"weight": name}, shape, "bfloat16",
            ["no scale: float8 codes with no weight_scale_inv / weight_scale / scale_weight "
             "beside them; their figures are off by the missing factor"],
            f"fp8 {S.FP8_TYPES[np.dtype(codes.dtype).type]} · unscaled", None)


def scale_orphans(node, taken: set) -> list:
    """Weight scales whose weight is missing, or not float8 (already dequantized?)."""
    out = []
    for name in node:
        if type(name) is not str or name in taken or not name.endswith(
                ("weight_scale_inv", "weight_scale", "scale_weight")):
            continue
        scale = _leaf(node, name)
        weight_name = S.fp8_weight_name(name)
        if scale is None or weight_name is None:
            continue
        weight = _leaf(node, weight_name)
        if weight is not None and np.dtype(weight.dtype).kind in "iu":
            continue  # an integer weight with its scale: int8 schemes are not handled here
        taken.add(name)
        if weight is None:
            problem = (f"no weight: the scale {name!r} has no float8 weight {weight_name!r} "
                       "beside it")
            shape = None
        else:
            problem = (f"no weight: the scale {name!r} is beside a {weight.dtype} weight, "
                       "not float8 codes (dequantized already? the scale would apply twice)")
            shape = None
        out.append((S.FP8, weight_name, {"scale": name}, shape, None, [problem],
                    "fp8 scale", None))
    return out


def mxfp4_groups(node, taken: set) -> list:
    """`X_blocks` uint8 (..., G, 16) with `X_scales` uint8 (..., G)."""
    out = []
    for name in node:
        if type(name) is not str or name in taken:
            continue
        if name.endswith("_blocks"):
            base, other = name[:-7], name[:-7] + "_scales"
        elif name.endswith("_scales"):
            base, other = name[:-7], name[:-7] + "_blocks"
            if _leaf(node, other) is not None:
                continue  # found from its blocks
        else:
            continue
        leaf = _leaf(node, name)
        if leaf is None or np.dtype(leaf.dtype) != _UINT8:
            continue
        taken.add(name)
        partner = _leaf(node, other)
        if partner is not None and np.dtype(partner.dtype) == _UINT8:
            taken.add(other)
        else:
            partner = None
        if name.endswith("_scales"):
            out.append((S.MXFP4, base, {"scales": name}, None, None,
                        [f"no codes: the scales {name!r} have no {other!r} beside them"],
                        "mxfp4 e2m1 · e8m0 scales per 32", None))
            continue
        blocks = _shape(leaf)
        shape = (*blocks[:-2], blocks[-2] * S.MX_BLOCK) if len(blocks) >= 2 else None
        members, problems = {"blocks": name}, []
        if partner is None:
            problems.append(f"no scale: the blocks {name!r} have no uint8 {other!r} beside "
                            "them; their figures are off by the missing factor")
        else:
            members["scales"] = other
            if len(blocks) < 2 or blocks[-1] != 16 or _shape(partner) != blocks[:-1]:
                problems.append(f"scale shape {_shape(partner)} does not tile the blocks "
                                f"{blocks} (expected {blocks[:-1]} for (..., G, 16) blocks)")
        out.append((S.MXFP4, base, members, shape, "bfloat16", problems,
                    "mxfp4 e2m1 · e8m0 scales per 32", (*(1,) * (len(blocks) - 2), 32)))
    return out


def int4_group(node, taken: set) -> list:
    """GPTQ or AWQ: `qweight`, `qzeros`, `scales` (and GPTQ's `g_idx`) told apart by shape."""
    if "qweight" not in node or "qweight" in taken:
        return []
    q = _leaf(node, "qweight")
    if q is None or np.dtype(q.dtype) != _INT32 or len(q.shape) != 2:
        return []
    names = {r: r for r in ("qweight", "qzeros", "scales", "g_idx") if _leaf(node, r) is not None}
    taken.update(names)
    rows, cols = _shape(q)
    scales = _leaf(node, "scales")
    scheme = S.GPTQ if "g_idx" in names else None
    if scheme is None and scales is not None and len(scales.shape) == 2:
        scheme = S.GPTQ if scales.shape[1] == cols else (
            S.AWQ if scales.shape[1] == cols * S.PACK else None)
    if scheme is None:
        scheme = S.GPTQ
        problems = ["unknown int4 layout: scales "
                    f"{None if scales is None else _shape(scales)} match neither GPTQ's "
                    f"(groups, {cols}) nor AWQ's (groups, {cols * S.PACK}) for qweight "
                    f"{rows, cols}"]
        return [(scheme, "weight", names, None, None, problems, "int4", None)]
    n_in, n_out = (rows * S.PACK, cols) if scheme == S.GPTQ else (rows, cols * S.PACK)
    problems = [f"missing {r}: {scheme} needs qweight, qzeros and scales" for r in
                ("qzeros", "scales") if r not in names]
    groups = _shape(scales)[0] if scales is not None and len(scales.shape) == 2 else 0
    if scales is not None and not problems:
        zeros = _shape(node["qzeros"])
        if _shape(scales) != (groups, n_out) or zeros != (groups, n_out // S.PACK) or \
                groups < 1 or (n_in % groups and "g_idx" not in names):
            problems.append(f"scales {_shape(scales)} / qzeros {zeros} do not tile the "
                            f"weight ({n_out}, {n_in}): expected (groups, {n_out}) and "
                            f"(groups, {n_out // S.PACK})")
        if np.dtype(node["qzeros"].dtype) != _INT32:
            problems.append(f"unknown qzeros dtype {node['qzeros'].dtype} (expected int32)")
        if "g_idx" in names and _shape(node["g_idx"]) != (n_in,):
            problems.append(f"g_idx shape {_shape(node['g_idx'])} does not tile the weight: "
                            f"expected ({n_in},)")
    dtype = str(np.dtype(scales.dtype)) if scales is not None else None
    size = n_in // groups if groups and not n_in % groups else None
    layout = f"{scheme} int4 · groups of {size}" if size else f"{scheme} int4"
    return [(scheme, "weight", names, (n_out, n_in), dtype, problems, layout,
             (1, size) if size else None)]
