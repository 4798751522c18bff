"""Every public op in one place: `weighted_sum`, `merge`, `index`, `stack`, `unstack`,
`dequantize`, `convert`.

`index`, `stack` and `unstack` are the core's own functions. `weighted_sum`, `merge`,
`dequantize` and `convert` add `out=`: the result streamed into a file, for results larger than
memory. The core computes
(`inspector.core.lazy_result`: one output leaf at a time, on read); io writes
(`inspector.io.streaming.write_streamed`: leaf by leaf, atomically). This module joins the two
for the public API, the one layer that sees both.
"""

from __future__ import annotations

import os

from inspector.core import merge as _merge
from inspector.core import weighted_sum as _ws
from inspector.core.chunked_stream import chunk_pieces
from inspector.core.index.indexing import index
from inspector.core.lazy_result import lazy_result
from inspector.core.op import register
from inspector.core.packed import unpacked
from inspector.core.port import convert as _convert
from inspector.core.port.alignment import Alignment
from inspector.core.quant import dequantize as _dq
from inspector.core.stacking import stack, unstack
from inspector.io.streaming import write_streamed

__all__ = ["convert", "dequantize", "index", "merge", "stack", "unstack", "weighted_sum"]


def weighted_sum(trees, weights, device=None, out: str | os.PathLike | None = None,
                 progress=None):
    """Returns `sum_k weights[k] * trees[k]`; with `out=`, streamed into that file.

    Without `out`, this is `inspector.core.weighted_sum.weighted_sum` (see it for the rules:
    dtypes, packed trees, devices). With `out="merged.safetensors"` (or `.npz`), the result
    is computed leaf by leaf straight into the file, never held whole in memory, each input
    leaf read once; the file is written under a temporary name and renamed on success.
    `progress` (with `out`) is called after each leaf with a `StreamProgress` (leaves and
    bytes done of the total, the rate).

    Returns:
        The result tree; with `out`, `inspector.load(out)` (lazy leaves over the file).

    Raises:
        StructureMismatchError, InspectorError: as the in-memory op, before anything is
            written; InspectorError from `inspector.save` (bad keys, dtypes, suffix).

    >>> import tempfile, numpy as np
    >>> path = tempfile.mkdtemp() + "/sum.safetensors"
    >>> merged = weighted_sum([{"w": np.ones(2)}, {"w": np.ones(2)}], [1, 2], out=path)
    >>> np.asarray(merged["w"]).tolist()
    [3.0, 3.0]
    """
    if out is None:
        return _ws.weighted_sum(trees, weights, device=device)
    # Packed inputs stream too: their leaves are views into the buffers.
    trees = [unpacked(t) for t in trees]
    plan = _ws.plan_weighted_sum(trees, weights, device, stream=True)
    return write_streamed(lazy_result(plan, progress), out,
                          pieces=chunk_pieces(plan, progress))


register(weighted_sum, _ws.WEIGHTED_SUM)


def merge(method: str, trees, *, base=None, weights=None, device=None,
          out: str | os.PathLike | None = None, progress=None, **params):
    """Returns `trees` merged by `method`; with `out=`, streamed into that file.

    Without `out`, this is `inspector.core.merge.merge` (the methods, their parameters and
    defaults are documented there). With `out="merged.safetensors"` (or `.npz`), each output
    leaf is computed from its input leaves (read once) and written before the next is read:
    checkpoints larger than memory merge with one leaf of each input in memory at a time. Every
    check runs before anything is read or written. `progress` (with `out`) is called after
    each leaf with a `StreamProgress`.

    Returns:
        The merged tree; with `out`, `inspector.load(out)` (lazy leaves over the file).

    >>> import tempfile, numpy as np
    >>> path = tempfile.mkdtemp() + "/soup.safetensors"
    >>> a, b = {"w": np.zeros(2, np.float32)}, {"w": np.ones(2, np.float32)}
    >>> np.asarray(merge("linear", [a, b], weights=[1, 3], out=path)["w"]).tolist()
    [0.75, 0.75]
    """
    if out is None:
        return _merge.merge(method, trees, base=base, weights=weights, device=device, **params)
    plan = _merge.plan_merge(method, [unpacked(t) for t in trees],
                             base=None if base is None else unpacked(base), weights=weights,
                             device=device, stream=True, **params)
    return write_streamed(lazy_result(plan, progress, ahead=True), out)


register(merge, _merge.MERGE)


def dequantize(tree, dtype="bfloat16", device=None, out: str | os.PathLike | None = None,
               progress=None):
    """Returns `tree` with each quantized weight dequantized; with `out=`, streamed into a file.

    Without `out`, this is `inspector.core.quant.dequantize.dequantize` (see it for the
    schemes, the logical key paths and the dtypes). With `out="model-bf16.safetensors"`,
    each group is read, dequantized and written before the next is read, and the other leaves
    are copied through: a checkpoint larger than memory converts with one weight in memory.

    Returns:
        The dequantized tree; with `out`, `inspector.load(out)` (lazy leaves over the file).

    >>> import tempfile, ml_dtypes, numpy as np
    >>> path = tempfile.mkdtemp() + "/bf16.safetensors"
    >>> tree = {"w": np.full((2, 2), 3, ml_dtypes.float8_e4m3fn), "w_scale": np.float32([2])}
    >>> np.asarray(dequantize(tree, "float32", out=path)["w"]).tolist()
    [[6.0, 6.0], [6.0, 6.0]]
    """
    if out is None:
        return _dq.dequantize(tree, dtype, device=device)
    # streamed group by group (a packed tree's flat plan makes one buffer: not streamable)
    plan = _dq.plan_dequantize(unpacked(tree), dtype, device)
    return write_streamed(lazy_result(plan, progress), out)


register(dequantize, _dq.DEQUANTIZE)


def convert(source, alignment: Alignment, allow_missing: bool = False, device=None,
            out: str | os.PathLike | None = None, target=None, progress=None):
    """Returns `source` converted to the target's structure, layouts and dtypes; with `out=`,
    streamed into that file.

    Without `out`, this is `inspector.core.port.convert.convert` (see it for the rules). With
    `out="ported.safetensors"` (or `.npz`) each target leaf is computed from its source leaf
    (read once) and written before the next is read: a checkpoint larger than memory ports
    with one leaf in memory at a time. Every check runs before anything is read or written.

    Returns:
        The converted tree; with `out`, `inspector.load(out)` (lazy leaves over the file).

    Raises:
        InspectorError: targets unmatched or ambiguous (every path listed), unless
            `allow_missing=True`.

    >>> import tempfile, numpy as np, inspector
    >>> src = {"fc.weight": np.arange(6, dtype=np.float32).reshape(3, 2)}
    >>> dst = {"fc": {"kernel": np.zeros((2, 3), np.float32)}}
    >>> path = tempfile.mkdtemp() + "/ported.safetensors"
    >>> ported = convert(src, inspector.align(src, dst), out=path)
    >>> np.asarray(ported["fc"]["kernel"]).tolist()
    [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]
    """
    if out is None:
        return _convert.convert(source, alignment, allow_missing=allow_missing, device=device,
                                target=target)
    plan = _convert.plan_convert(source, alignment, allow_missing=allow_missing,
                                 target=target, device=device)
    return write_streamed(lazy_result(plan, progress), out)


register(convert, _convert.CONVERT)
