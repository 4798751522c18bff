"""`inspector.convert`: the port of a checkpoint, in memory or streamed into a file (`out=`).

The core plans and runs the conversion (`inspector.core.port.convert`); io writes
(`inspector.io.streaming.write_streamed`, leaf by leaf). This module joins the two for the
public API, as `inspector/streaming.py` does for the other ops.
"""

from __future__ import annotations

import os

from inspector.core.lazy_result import lazy_result
from inspector.core.op import register
from inspector.core.port import convert as _convert
from inspector.core.port.alignment import Alignment
from inspector.io.streaming import write_streamed


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
