"""Public ops that can stream their result into a file (`out=`): larger-than-memory results.

The core computes (`inspector.core.lazy_result`: one output leaf at a time, on read); io writes
(`inspector.io.streaming.write_streamed`: leaf by leaf, atomically). This module joins the two
for the public API, the one layer that sees both.
"""

from __future__ import annotations

import os

from inspector.core import merge as _merge
from inspector.core import weighted_sum as _ws
from inspector.core.lazy_result import lazy_result
from inspector.core.op import register
from inspector.core.packed import PackedTree
from inspector.core.quant import dequantize as _dq
from inspector.io.streaming import write_streamed


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
    trees = [t.unpack() if isinstance(t, PackedTree) else t for t in trees]
    plan = _ws.plan_weighted_sum(trees, weights, device)
    return write_streamed(lazy_result(plan, progress), out)


register(weighted_sum, _ws.WEIGHTED_SUM)


def merge(method: str, trees, *, base=None, weights=None, device=None,
          out: str | os.PathLike | None = None, **params):
    """Returns `trees` merged by `method`; with `out=`, streamed into that file.

    Without `out`, this is `inspector.core.merge.merge` (the methods, their parameters and
    defaults are documented there). With `out="merged.safetensors"` (or `.npz`), each output
    leaf is computed from its input leaves (read once) and written before the next is read:
    checkpoints larger than memory merge with one leaf of each input in memory at a time. Every
    check runs before anything is read or written.

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
    unpack = lambda t: t.unpack() if isinstance(t, PackedTree) else t  # noqa: E731
    plan = _merge.plan_merge(method, [unpack(t) for t in trees],
                             base=None if base is None else unpack(base), weights=weights,
                             device=device, **params)
    return write_streamed(lazy_result(plan), out)


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
    plan = _dq.plan_dequantize(tree.unpack() if isinstance(tree, PackedTree) else tree,
                               dtype, device)
    return write_streamed(lazy_result(plan, progress), out)


register(dequantize, _dq.DEQUANTIZE)
