"""Skipping a GGUF string array (a tokenizer's vocabulary or merges) without a Python step
per string.

A GGUF string is a little-endian uint64 length and that many bytes; an array of them has no
index, so where it ends is known only by following the lengths one after another (128k tokens
and 280k merges: about 0.25 µs each in a Python loop, 100 ms). Nearly every token is shorter
than 256 bytes, so its length field is a byte followed by seven zero bytes. NumPy finds every
position of a window where such a field *could* start (a candidate: its bytes 1 to 7 are
zero), and each candidate's successor (`c + 8 + length`). Where the successor of a candidate is
the next candidate, the link is sure: following the chain from a known string start, every
sure link is one string. The chain is followed in C (runs of sure links between the breaks),
and at a break (a string of 256 bytes or more, a candidate inside a string's text, the window's
end) one string is stepped with the cursor's checked reads, which also name a string the file
cannot hold. The positions reached are exactly those of the string-by-string walk.
"""

from __future__ import annotations

import numpy as np

_MIN_WINDOW = 1 << 16
_PER_ITEM = 24  # bytes per string guessed for the first window (8 + a 16-byte token)
_PIECE = 1 << 18


def skip_strings(cursor, n: int, what: str, plain) -> None:
    """Moves `cursor` past `n` strings (lengths checked against the file as it goes);
    `plain(cursor, n)` steps strings one by one, for windows of mostly long strings."""
    window, first, total = max(_MIN_WINDOW, n * _PER_ITEM), cursor.pos, n
    while n > 0:
        start = cursor.pos
        if start > first:  # later windows: the bytes per string seen so far, and a margin
            window = max(_MIN_WINDOW, (start - first) * n // (total - n) * 9 // 8)
        end = min(len(cursor.buffer), cursor.size, start + window)
        if end - start < _MIN_WINDOW // 4:  # little left in the buffer: it grows as it goes
            batch = min(n, 1024)
            plain(cursor, batch)
            n -= batch
            continue
        c, succ, breaks = _links(cursor.buffer, start, end)
        cursor.seen = max(cursor.seen, end)
        i, broken, ran = 0, 0, 0
        while n > 0:
            if broken > 1024 and broken * 4 > ran:  # mostly long strings: the loop is cheaper
                batch = min(n, 1 << 16)
                plain(cursor, batch)
                n -= batch
                break
            pos = cursor.pos
            if i >= len(c) or c[i] != pos:
                i = int(np.searchsorted(c, pos))
                if i >= len(c) or c[i] != pos:
                    # a string of 256 bytes or more, or past the window's candidates: one
                    # checked step (then a fresh window, if it left this one)
                    _step(cursor, what)
                    n -= 1
                    broken += 1
                    if cursor.pos >= end - 8:
                        break
                    continue
            k = int(breaks[np.searchsorted(breaks, i)])  # the first break at or after i
            run = min(k - i, n)
            n -= run
            ran += run
            i += run
            cursor.pos = int(c[i])
            if not n:
                break
            # c[i] is a string start whose link is broken: its successor is still sure
            # (its length is its low byte), unless it lies past the window
            after = int(succ[i])
            if after <= end:
                cursor.pos = after
                n -= 1
            else:
                _step(cursor, what)
                n -= 1
            broken += 1


def _links(buffer, start: int, end: int):
    """The candidates of `buffer[start:end]` (absolute positions, sorted), their successors,
    and the indices of the candidates whose successor is not the next candidate (the last
    candidate's always counts as one)."""
    data = np.frombuffer(buffer, np.uint8, count=end - start, offset=start)
    # in pieces that stay in the CPU's cache (1.8x faster than whole 10 MB windows)
    found = [_fields(data[at : at + _PIECE + 7]) + at for at in range(0, len(data) - 7, _PIECE)]
    c = np.concatenate(found) if found else np.zeros(0, np.int64)
    succ = c + 8 + data[c]
    c += start
    succ += start
    breaks = np.flatnonzero(succ[:-1] != c[1:])
    breaks = np.append(breaks, len(c) - 1) if len(c) else breaks
    return c, succ, breaks


def _fields(data):
    """Where in `data` a length below 256 may start: a byte, then seven zero bytes (runs of
    zeros found by doubling: pairs, fours, sevens)."""
    zero = np.equal(data, 0)
    run = np.logical_and(zero[:-1], zero[1:])
    np.logical_and(run[:-2], run[2:], out=run[:-2])
    run = run[:-2]
    np.logical_and(run[:-3], run[3:], out=run[:-3])
    run = run[:-3]  # run[q]: bytes q .. q + 6 are zero
    return np.flatnonzero(run[1:])


def _step(cursor, what: str) -> None:
    """One string, with checked reads."""
    cursor.need(cursor.u64(what), what)
