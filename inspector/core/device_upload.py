"""A packed buffer filled on a device through a few host staging buffers (`read_packed` off
the CPU): the device copy plus a few staging buffers of host memory, not two whole copies.

A pipeline: while one staging buffer's bytes travel to the device, the next is read. Lazy
leaves that lie in a local file are read with `preadv` straight into a staging buffer, in
parallel pieces of at most `_PIECE_BYTES` (a leaf larger than a staging buffer is read part by
part); other leaves are read once by their own reader and copied. Each full staging buffer is
sent with `jax.device_put` and written in place into the (donated) device buffer.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core.host_read import THREADS, host_buffer, read_into, readable_in_place
from inspector.core.lazy import read_ahead

_STAGING_BYTES = 32 * 2**20  # host bytes in one staging buffer
_DEPTH = 4  # staging buffers: two being read while the others travel to the device
_PIECE_BYTES = 4 * 2**20  # a direct read's part, so one large leaf is read by several threads


def upload(items: list, size: int, dtype: np.dtype, device) -> jax.Array:
    """The device buffer of `size` elements of `dtype` holding each `(leaf, slot)` of `items`
    at its slot (slots in order, back to back, as `plan_layout` makes them)."""
    dtype = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    buffer = jnp.zeros((size,), dtype, device=device)
    if size == 0:
        return buffer
    chunk = max(1, min(size, _STAGING_BYTES // dtype.itemsize))
    n_chunks = -(-size // chunk)
    raw = _take_staging(min(_DEPTH, n_chunks))
    staging = [b[: chunk * dtype.itemsize].view(dtype) for b in raw]
    last: list = [None] * len(staging)  # each staging buffer's piece last sent
    filled: queue.Queue = queue.Queue()  # (chunk number, staging index) or an exception
    free: queue.Queue = queue.Queue()  # (staging index, the piece still reading from it)
    for s in range(len(staging)):
        free.put((s, None))
    stop = threading.Event()
    reader = threading.Thread(
        target=_read_chunks, args=(items, dtype, chunk, n_chunks, staging, free, filled, stop),
        name="inspector-upload", daemon=True)
    reader.start()
    alias = None if device.platform != "cpu" else False  # a CPU piece must not share staging
    try:
        for _ in range(n_chunks):
            got = filled.get()
            if isinstance(got, BaseException):
                raise got
            k, s = got
            n = min(chunk, size - k * chunk)
            piece = last[s] = jax.device_put(staging[s][:n], device, may_alias=alias)
            buffer = _write(buffer, piece, np.int32(k * chunk))
            free.put((s, piece))  # the reader waits for the copy before refilling it
    finally:
        stop.set()
        free.put((None, None))  # wakes a reader waiting for a staging buffer
        reader.join()
        jax.block_until_ready([p for p in last if p is not None])
        _give_staging(raw)
    return buffer


_POOL: list[np.ndarray] = []  # staging buffers kept for the next upload (faulted in once)
_POOL_LOCK = threading.Lock()


def _take_staging(n: int) -> list[np.ndarray]:
    """`n` staging buffers of `_STAGING_BYTES`: kept ones first (a fresh one faults its pages
    in: 0.3 s a GB on a lent GPU machine, where the whole upload of a GB takes 0.2 s)."""
    with _POOL_LOCK:
        kept = [b for b in _POOL if b.size == _STAGING_BYTES]
        _POOL.clear()
        taken, rest = kept[:n], kept[n:]
        _POOL.extend(rest)
    return taken + [host_buffer(_STAGING_BYTES) for _ in range(n - len(taken))]


def _give_staging(buffers: list[np.ndarray]) -> None:
    with _POOL_LOCK:
        _POOL.extend(buffers)
        del _POOL[: max(0, len(_POOL) - _DEPTH)]  # at most one upload's worth kept


def _read_chunks(items, dtype, chunk, n_chunks, staging, free, filled, stop) -> None:
    """The reader thread: fills staging buffers chunk after chunk (each leaf read once); the
    next chunk's reads are under way while the last one's finish."""
    try:
        direct = {id(leaf) for leaf, _ in items
                  if readable_in_place(leaf) and np.dtype(leaf.dtype) == dtype}
        values = read_ahead(leaf for leaf, slot in items
                            if id(leaf) not in direct and slot.size)
        segments = iter(_segments(items, chunk))
        pending = next(segments, None)
        with ThreadPoolExecutor(THREADS, "inspector-upload-read") as pool:
            held = None  # (item number, its value): a leaf read by its reader, spanning chunks
            reading: list = []  # (chunk number, staging index, its reads) not yet handed over
            for k in range(n_chunks):
                s, piece = free.get()
                if stop.is_set() or s is None:
                    return
                if piece is not None:
                    piece.block_until_ready()  # its bytes left this staging buffer
                dest = staging[s]
                reads = []
                while pending is not None and pending[0] == k:
                    _, item, leaf, first, n, at = pending
                    target = dest[at : at + n]
                    if id(leaf) in direct:
                        reads += [pool.submit(read_into, leaf, target[p : p + step], first + p)
                                  for p, step in _pieces(n, dtype.itemsize)]
                    else:
                        if held is None or held[0] != item:
                            held = (item, np.asarray(next(values)).reshape(-1))
                        target[...] = held[1][first : first + n]
                    pending = next(segments, None)
                reading.append((k, s, reads))
                if len(reading) > 1:
                    _hand_over(reading.pop(0), filled)
            for done in reading:
                _hand_over(done, filled)
    except BaseException as exc:  # handed to the caller, which raises it
        filled.put(exc)


def _hand_over(chunk_reads, filled) -> None:
    k, s, reads = chunk_reads
    for r in reads:
        r.result()
    filled.put((k, s))


def _segments(items, chunk: int):
    """`(chunk number, item number, leaf, first element, count, position in the staging
    buffer)` for each part of each leaf, in buffer order."""
    for item, (leaf, slot) in enumerate(items):
        done = 0
        while done < slot.size:
            at = slot.offset + done
            k, pos = divmod(at, chunk)
            n = min(chunk - pos, slot.size - done)
            yield k, item, leaf, done, n, pos
            done += n


def _pieces(n: int, itemsize: int):
    step = max(1, _PIECE_BYTES // itemsize)
    for p in range(0, n, step):
        yield p, min(step, n - p)


def _write_piece(buffer, piece, start):
    return jax.lax.dynamic_update_slice_in_dim(buffer, piece, start, axis=0)


# The buffer is donated: each piece is written in place (one compile per piece length).
_write = jax.jit(_write_piece, donate_argnums=0)
