"""The runs of a packed float8 buffer: stretches of codes that share one scale.

A packed tree holds every float8 leaf of one dtype in one flat buffer, each leaf a contiguous
run of it (`Slot.offset`), and the FP8 scales in another (float32). Dequantizing the buffer is
then `out[i] = float(codes[i]) * scales[scale_index[r]]` for every element `i` of run `r`:
one pass over the flat buffers, whatever the leaf count. A run is
`[starts[r], starts[r + 1])`; per-tensor scales give one run per leaf, per-channel scales one
per row, (br, bc) block scales `ceil(C / bc)` per row of a (R, C) weight (merged where
neighbours share a scale). Stretches of the buffer no group covers (an orphan float8 weight
that keeps its codes) are runs too, with scale 0: their output is never read.

`starts` (int64, R + 1) and `scale_index` (int64, R) are in exactly the form a CPU loop
`fp8_runs(codes, starts, scale_index, scales, out, out_kind, code_kind)` takes. The XLA
kernel takes them split into pieces of one width (`width`: the largest length dividing every
run, 128 for 128-wide blocks) with one scale index each (`pieces`): `codes.reshape(-1,
width) * scales[pieces][:, None]`, one fusion.

Everything here is NumPy on the layout's slots, vectorised per (shape, block) signature,
and computed once per layout (`dequantize_packed` caches it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class FlatRuns:
    """The runs of one float8 buffer (`code_group`) whose scales lie in `scale_group`.

    Attributes:
        starts: int64 (R + 1,): run r is elements `[starts[r], starts[r + 1])`; `starts[0]`
            is 0 and `starts[R]` the buffer's length.
        scale_index: int64 (R,): the element of the scale buffer run r is multiplied by.
        width: the largest length dividing every run (the XLA kernel's row length).
        pieces: int32 (n // width,): the scale index of each `width`-long piece.
    """

    code_group: str
    scale_group: str
    starts: np.ndarray
    scale_index: np.ndarray
    width: int
    pieces: np.ndarray
    placed: dict = field(default_factory=dict, repr=False)  # device -> `pieces` there

    @property
    def size(self) -> int:
        return int(self.starts[-1])


def template(shape: tuple[int, ...], block: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The runs of one weight of `shape` tiled by scales of `block` (ceil tiling), relative
    to the weight and its scale: `(starts, scale_index)`, both int64 of one length, adjacent
    runs of one scale merged (a per-tensor weight is one run)."""
    size = math.prod(shape)
    if size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if not shape:
        return np.zeros(1, np.int64), np.zeros(1, np.int64)
    grid = tuple(-(-n // b) for n, b in zip(shape, block, strict=True))
    cols, bc, nc = shape[-1], block[-1], grid[-1]
    lead = shape[:-1]
    rows = math.prod(lead)
    if lead:
        index = np.unravel_index(np.arange(rows, dtype=np.int64), lead)
        row_scale = np.ravel_multi_index(
            tuple(i // b for i, b in zip(index, block[:-1], strict=True)), grid[:-1])
    else:
        row_scale = np.zeros(1, np.int64)
    starts = (np.arange(rows, dtype=np.int64)[:, None] * cols
              + np.arange(nc, dtype=np.int64)[None, :] * bc).reshape(-1)
    scale = (row_scale[:, None] * nc + np.arange(nc, dtype=np.int64)[None, :]).reshape(-1)
    keep = np.ones(len(scale), bool)
    keep[1:] = scale[1:] != scale[:-1]
    return starts[keep], scale[keep]


def build(size: int, groups: list[tuple[int, int, tuple, tuple]]) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    """The runs of a float8 buffer of `size` elements holding `groups`: `(code offset,
    scale offset, shape, block)` each, the weights not overlapping. Returns `(starts,
    scale_index)`; what no group covers is runs of scale 0 (output never read).

    Vectorised per distinct (shape, block): a 100,000-leaf layout of a handful of shapes is a
    few NumPy calls per shape, not a Python loop per run.

    >>> s, i = build(10, [(0, 4, (2, 3), (1, 3)), (7, 6, (3,), (3,))])
    >>> s.tolist(), i.tolist()
    ([0, 3, 6, 7, 10], [4, 5, 0, 6])
    """
    if size == 0:
        return np.zeros(1, np.int64), np.zeros(0, np.int64)
    by_sig: dict[tuple, list[int]] = {}
    for k, (_, _, shape, block) in enumerate(groups):
        by_sig.setdefault((shape, block), []).append(k)
    code_off = np.fromiter((g[0] for g in groups), np.int64, len(groups))
    scale_off = np.fromiter((g[1] for g in groups), np.int64, len(groups))
    sizes = np.fromiter((math.prod(g[2]) for g in groups), np.int64, len(groups))
    temps = {sig: template(*sig) for sig in by_sig}
    n_runs = np.zeros(len(groups), np.int64)
    for sig, members in by_sig.items():
        n_runs[members] = len(temps[sig][0])
    # the gaps: stretches between the weights (sorted by offset) that none covers
    order = np.argsort(code_off, kind="stable")
    lo, hi = code_off[order], code_off[order] + sizes[order]
    if np.any(lo[1:] < hi[:-1]) or (len(hi) and (hi[-1] > size or lo[0] < 0)):
        raise ValueError("float8 weights overlap or lie outside their buffer")
    gap_lo = np.concatenate([[0], hi])
    gap_hi = np.concatenate([lo, [size]])
    gaps = gap_hi > gap_lo
    gap_lo = gap_lo[gaps]
    # every item (weight or gap) in buffer order, and where its runs go
    item_off = np.concatenate([code_off, gap_lo])
    item_runs = np.concatenate([n_runs, np.ones(len(gap_lo), np.int64)])
    item_order = np.argsort(item_off, kind="stable")
    first = np.zeros(len(item_off), np.int64)
    first[item_order] = np.cumsum(item_runs[item_order]) - item_runs[item_order]
    total = int(item_runs.sum())
    starts = np.empty(total + 1, np.int64)
    scale = np.empty(total, np.int64)
    starts[total] = size
    for sig, members in by_sig.items():
        t_start, t_scale = temps[sig]
        if not len(t_start):
            continue
        m = np.asarray(members, np.int64)
        at = (first[m][:, None] + np.arange(len(t_start))[None, :]).reshape(-1)
        starts[at] = (code_off[m][:, None] + t_start[None, :]).reshape(-1)
        scale[at] = (scale_off[m][:, None] + t_scale[None, :]).reshape(-1)
    at = first[len(groups):]
    starts[at] = gap_lo
    scale[at] = 0
    # runs of one scale side by side (a gap beside a run of scale 0 too) become one
    keep = np.ones(total, bool)
    keep[1:] = scale[1:] != scale[:-1]
    return np.append(starts[:-1][keep], size), scale[keep]


def pieces(starts: np.ndarray, scale_index: np.ndarray) -> tuple[int, np.ndarray]:
    """`(width, piece scale index)`: the runs cut into pieces of the largest length dividing
    them all, the scale index of each piece (int32)."""
    lengths = np.diff(starts)
    if not len(lengths):
        return 1, np.zeros(0, np.int32)
    width = int(np.gcd.reduce(lengths))
    return width, np.repeat(scale_index.astype(np.int32), lengths // width)
