"""A packed buffer filled on a device through a small host staging buffer (`read_packed` off
the CPU): the device copy plus a few MiB of host memory in flight, not two whole copies.

Lazy leaves that lie in a local file are read with `preadv` straight into the staging buffer;
each full staging buffer is sent and written in place into the (donated) device buffer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core.host_read import read_into, readable_in_place
from inspector.core.lazy import read_ahead

_STAGING_BYTES = 64 * 2**20  # host bytes in flight while `read_packed` fills a device buffer


def upload(items: list, size: int, dtype: np.dtype, device) -> jax.Array:
    dtype = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    buffer = jnp.zeros((size,), dtype, device=device)
    chunk = max(1, min(size, _STAGING_BYTES // dtype.itemsize))
    staging = np.empty(chunk, dtype)
    filled, start = 0, 0  # elements in staging; where staging[0] goes in the buffer

    def flush(n):
        nonlocal buffer
        piece = jax.device_put(staging[:n], device)
        buffer = _write(buffer, piece, np.int32(start))
        piece.block_until_ready()  # staging is refilled next: its copy must be done

    direct = {id(leaf) for leaf, slot in items
              if readable_in_place(leaf) and leaf.dtype == dtype and slot.size <= chunk}
    values = read_ahead(leaf for leaf, _ in items if id(leaf) not in direct)
    for leaf, slot in items:
        if id(leaf) in direct:  # read with preadv into the staging buffer: no other copy
            if filled + slot.size > chunk:
                flush(filled)
                start += filled
                filled = 0
            read_into(leaf, staging[filled : filled + slot.size])
            filled += slot.size
            continue
        data = np.asarray(next(values)).reshape(-1)
        done = 0
        while done < slot.size:
            n = min(chunk - filled, slot.size - done)
            staging[filled : filled + n] = data[done : done + n]
            filled += n
            done += n
            if filled == chunk:
                flush(filled)
                start += filled
                filled = 0
        del data
    if filled:
        flush(filled)
    return buffer


def _write_piece(buffer, piece, start):
    return jax.lax.dynamic_update_slice_in_dim(buffer, piece, start, axis=0)


# The buffer is donated: each piece is written in place (one compile per piece length).
_write = jax.jit(_write_piece, donate_argnums=0)
