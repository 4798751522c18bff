"""How the leaves of one flat buffer map onto rows of `block` elements: each leaf's run of
whole rows and its (at most two) masked pieces, computed for all leaves at once with NumPy."""

from __future__ import annotations

import numpy as np


def block_for(size: int, n_leaves: int, long_rows: bool = False,
              tree_sums: bool = False) -> int:
    """The row length for a buffer of `size` elements holding `n_leaves` leaves: long rows for
    big leaves (fewer partials), short rows for many small leaves (pieces are masked rows, so
    their cost grows with the row length).

    `long_rows`: an accelerator's one pass, which reduces every row at once; its pieces cost
    it little, the rows it sends back to be combined on the host cost more. `tree_sums`: the
    device sums a row as a tree (a GPU, not XLA's CPU loop), so a long row keeps float32
    sums as exact as a short one: small leaves then get rows of >= 4x their mean size, and
    most leaves are one piece, a row whose figures are the leaf's (100k leaves of ~270
    elements: rows of 32 left 940k rows to combine, 136-159 ms on the host; rows of 2048,
    112k rows, 88k leaves of one row)."""
    mean = size / max(1, n_leaves)
    if long_rows and (mean >= 8 * 16384 or tree_sums and mean >= 4096):
        return 16384
    if long_rows and tree_sums:
        return max(256, 1 << (int(4 * mean) - 1).bit_length())
    # 100k leaves of ~270 elements: rows of 32 scanned in 0.29-0.44 s, of 64 in 0.43-0.47 s
    return 1024 if mean >= 16 * 1024 else 256 if mean >= 2048 else 64 if mean >= 512 else 32


def leaf_rows(offsets: np.ndarray, sizes: np.ndarray, size: int, block: int):
    """Returns `(start, stop, piece_row, piece_lo, piece_hi, pieces)` for leaves at `offsets`
    of `sizes` in a buffer of `size` elements.

    `[start, stop)`: each leaf's whole rows of the grid (`size // block` rows). Pieces are
    rows masked to `[lo, hi)`; row `size // block` is the buffer's zero-padded tail.
    `pieces` is (n_leaves, 2): the index of each leaf's pieces in the piece list, -1 for none.
    """
    offsets = np.asarray(offsets, np.int64)
    sizes = np.asarray(sizes, np.int64)
    ends = offsets + sizes
    n_grid = size // block
    first_whole = -(-offsets // block)
    start = np.minimum(first_whole, n_grid)
    stop = np.maximum(np.minimum(ends // block, n_grid), start)
    has_whole = stop > start
    nonempty = sizes > 0
    # head: the partial row before the whole rows (or the leaf's first row if it has none)
    head_row = offsets // block
    head_hi = np.where(has_whole, block, np.minimum(block, ends - head_row * block))
    head = nonempty & (~has_whole | (offsets < start * block))
    # tail: the partial row after the whole rows (or the leaf's second row if it has none)
    tail_row = np.where(has_whole, stop, head_row + 1)
    tail = nonempty & (ends > tail_row * block)
    n_head, n_tail = int(head.sum()), int(tail.sum())
    piece_row = np.concatenate([head_row[head], tail_row[tail]]).astype(np.int32)
    piece_lo = np.concatenate([(offsets - head_row * block)[head],
                               np.zeros(n_tail, np.int64)]).astype(np.int32)
    piece_hi = np.concatenate([head_hi[head], (ends - tail_row * block)[tail]]).astype(np.int32)
    pieces = np.full((len(offsets), 2), -1, np.int64)
    pieces[head, 0] = np.arange(n_head)
    pieces[tail, 1] = n_head + np.arange(n_tail)
    start = np.where(has_whole, start, 0)
    stop = np.where(has_whole, stop, 0)
    return start, stop, piece_row, piece_lo, piece_hi, pieces


def leaf_order(start: np.ndarray, stop: np.ndarray, pieces: np.ndarray):
    """Returns `(order, is_piece, first, end)` for `leaf_rows`' leaves: every leaf's rows one
    after the other (its head piece, its whole rows, its tail piece) as indices into the
    grid's rows (where not `is_piece`) or into the pieces (where `is_piece`), and each leaf's
    run `[first, end)` of that order: the form `host_scan.host_figures` combines (a leaf of
    one row straight from it, without a reduction)."""
    start, stop = np.asarray(start, np.int64), np.asarray(stop, np.int64)
    head, tail = pieces[:, 0] >= 0, pieces[:, 1] >= 0
    whole = stop - start
    counts = head + whole + tail
    end = np.cumsum(counts)
    first = end - counts
    order = np.empty(int(end[-1]) if len(end) else 0, np.int64)
    is_piece = np.zeros(len(order), bool)
    order[first[head]], is_piece[first[head]] = pieces[head, 0], True
    leaf = np.repeat(np.arange(len(start)), whole)
    k = np.arange(len(leaf)) - np.repeat(np.cumsum(whole) - whole, whole)  # row in its leaf
    order[first[leaf] + head[leaf] + k] = start[leaf] + k
    at = (end - 1)[tail]
    order[at], is_piece[at] = pieces[tail, 1], True
    return order, is_piece, first, end
