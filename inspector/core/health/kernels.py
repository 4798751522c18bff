"""The scan's device kernel: ten partial figures per row of a flat buffer, in one pass.

A buffer is cut into rows of `block` elements. Each row reduces to `(n, shift, sum d, sum d^2,
min, max, zeros, nan, +inf, -inf)`, where `d = x - shift` over the row's finite elements and
`shift` is the row's first element: shifted sums keep the variance sound when the mean is far
from zero (a layer-norm scale of ones), and rows are combined on the host in float64
(`partials.py`). A leaf is a run of whole rows plus at most two masked "pieces" (its first and
last partial rows), so one kernel serves every leaf of a packed buffer.

XLA's CPU backend runs a reduction with an elementwise producer fused into it several times
slower than a plain one (sum of x*x: 170 ms against 20 ms for sum of x over 1e8 float32 here),
and a variadic reduction slower still. So the fast path materialises each operand (the
optimization barriers) within a chunk of rows that stays in cache, and reduces it alone; a chunk
whose sums are not finite is reduced again by the careful (masked) path, which counts NaN and
Inf and leaves them out of the moments.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_bar = jax.lax.optimization_barrier
CHUNK = 1 << 14
"""Elements per step of the loop over whole rows (64 KiB of float32: its operands stay in the
L2 cache; 1 << 16 measured 2x slower on the 2-core CI machine)."""
N_FIGURES = 10


def _fast(y):
    """The ten figures of rows with no NaN/Inf (checked by the caller afterwards)."""
    c = y[:, 0]
    d = _bar(y - c[:, None])
    sd = jnp.sum(d, axis=1)
    dd = _bar(d * d)
    sdd = jnp.sum(dd, axis=1)
    y = _bar(y)
    lo = jnp.min(y, axis=1)
    y = _bar(y)
    hi = jnp.max(y, axis=1)
    zero = _bar((y == 0).astype(y.dtype))
    zeros = jnp.sum(zero, axis=1)
    n = jnp.full_like(sd, y.shape[1])
    nothing = jnp.zeros_like(sd)
    return jnp.stack([n, c, sd, sdd, lo, hi, zeros, nothing, nothing, nothing], axis=1)


def _careful(y, mask, first=None):
    """The ten figures of rows where only `mask` counts (from column `first` of each row on);
    NaN and Inf are counted and left out of the moments. One variadic reduction: slower to run
    than the fast path, but it only meets pieces and rows with NaN/Inf, and it compiles as one
    loop (ten separate masked reductions took seconds to compile)."""
    finite = jnp.isfinite(y) & mask
    if first is None:
        c = jnp.where(finite[:, 0], y[:, 0], 0)
    else:  # shift by the piece's own first value, not a neighbour's (it may be far off)
        c = jnp.take_along_axis(y, first[:, None], axis=1)[:, 0]
        c = jnp.where(jnp.isfinite(c), c, 0)
    d = jnp.where(finite, y - c[:, None], 0)
    f = y.dtype
    inf = jnp.asarray(np.inf, f)

    def count(flags):
        return (flags & mask).astype(f)

    operands = (finite.astype(f), d, d * d, jnp.where(finite, y, inf), jnp.where(finite, y, -inf),
                count(y == 0), count(jnp.isnan(y)), count(y == inf), count(y == -inf))
    zero = jnp.zeros((), f)
    init = (zero, zero, zero, inf, -inf, zero, zero, zero, zero)

    def combine(u, v):
        return (u[0] + v[0], u[1] + v[1], u[2] + v[2], jnp.minimum(u[3], v[3]),
                jnp.maximum(u[4], v[4]), u[5] + v[5], u[6] + v[6], u[7] + v[7], u[8] + v[8])

    n, sd, sdd, lo, hi, zeros, nan, pos, neg = jax.lax.reduce(operands, init, combine, (1,))
    return jnp.stack([n, c, sd, sdd, lo, hi, zeros, nan, pos, neg], axis=1)


ONE_PASS_FORM = "fast"
"""How `one_pass` reduces whole rows: "fast" (`_fast_fused`: five fused reductions, the rows
with NaN/Inf reduced again by the careful path, as on the CPU) or "variadic" (`_careful`: one
`lax.reduce` of nine operands, every row exact at once). `benchmarks/bench_health.py` times
both on an accelerator: on an H100, 1e8 float32, kernels alone back to back, 2400 / 1101 GB/s
against a 2834 GB/s copy (0.85 / 0.39; nine sibling reductions, tried too, 0.39)."""


def _fast_fused(y):
    """`_fast` without its barriers (on a GPU they would write each operand out)."""
    c = y[:, 0]
    d = y - c[:, None]
    sd = jnp.sum(d, axis=1)
    nothing = jnp.zeros_like(sd)
    return jnp.stack([jnp.full_like(sd, y.shape[1]), c, sd, jnp.sum(d * d, axis=1),
                      jnp.min(y, axis=1), jnp.max(y, axis=1),
                      jnp.sum((y == 0).astype(y.dtype), axis=1), nothing, nothing, nothing],
                     axis=1)


def buffer_kernel(size: int, block: int, n_pieces: int, work: str, one_pass: str = ""):
    """Returns `f(x, piece_rows, lo, hi) -> (grid (G, 10), pieces (n_pieces, 10))` for a flat
    buffer of `size` elements: every whole row `[k * block, (k + 1) * block)` (G of them), then
    each piece: row `piece_rows[i]` (G is the zero-padded tail) masked to `[lo[i], hi[i])`.

    `one_pass` (accelerators: a form of `ONE_PASS_FORM`): every whole row at once, one fused
    kernel over the buffer (a GPU runs a loop of cache-sized steps as thousands of launches:
    5.9 GB/s on an H100 against 2.8 TB/s for a copy); "" (the CPU): that loop.

    Everything that varies between trees of one buffer size (the pieces) is traced."""
    dtype = np.dtype(work)
    n_grid = size // block
    per_step = max(1, CHUNK // block)

    def kernel(x, piece_rows, lo, hi):
        x = x.reshape(-1)
        if x.dtype != dtype:
            x = x.astype(dtype)
        # small buffers: one pass over all rows; big ones: a loop over cache-sized chunks, the
        # rows left over reduced by the careful path (one copy of each path to compile)
        full = n_grid - n_grid % per_step if n_grid > 4 * per_step and not one_pass else 0
        parts = []
        if full:
            def step(i, acc):
                y = jax.lax.dynamic_slice(x, (i * per_step * block,), (per_step * block,))
                return jax.lax.dynamic_update_slice(
                    acc, _fast(y.reshape(per_step, block)), (i * per_step, 0))

            parts.append(jax.lax.fori_loop(0, full // per_step, step,
                                           jnp.zeros((full, N_FIGURES), dtype)))
        if n_grid > full:
            rest = x[full * block:n_grid * block].reshape(-1, block)
            if one_pass == "fast":
                parts.append(_fast_fused(rest))
            elif full or one_pass:
                parts.append(_careful(rest, jnp.ones(rest.shape, bool)))
            else:
                parts.append(_fast(rest))
        grid = (jnp.concatenate(parts) if len(parts) > 1 else parts[0]) if parts \
            else jnp.zeros((0, N_FIGURES), dtype)
        if not n_pieces:
            return grid, jnp.zeros((0, N_FIGURES), dtype)
        return grid, _pieces(x, piece_rows, lo, hi, size, block)

    return kernel


def _pieces(x, piece_rows, lo, hi, size: int, block: int):
    """The careful figures of rows `piece_rows` of flat `x` (row `size // block`: the padded
    tail), each masked to `[lo, hi)`."""
    n_grid = size // block
    tail = jnp.pad(x[n_grid * block:], (0, block - (size - n_grid * block)))[None, :]
    if n_grid:
        whole = x[:n_grid * block].reshape(n_grid, block)
        rows = jnp.take(whole, jnp.minimum(piece_rows, n_grid - 1), axis=0)
        rows = jnp.where((piece_rows == n_grid)[:, None], tail, rows)
    else:
        rows = jnp.broadcast_to(tail, (piece_rows.shape[0], block))
    col = jnp.arange(block, dtype=jnp.int32)[None, :]
    mask = (col >= lo[:, None]) & (col < hi[:, None])
    return _careful(rows, mask, lo)


def pieces_kernel(size: int, block: int, work: str):
    """Returns `f(x, piece_rows, lo, hi) -> (n, 10)`: the careful figures of chosen rows of a
    flat buffer of `size` elements (the whole rows whose fast figures came out non-finite are
    reduced again by it: the fast path cannot tell NaN from Inf)."""
    dtype = np.dtype(work)

    def kernel(x, piece_rows, lo, hi):
        x = x.reshape(-1)
        if x.dtype != dtype:
            x = x.astype(dtype)
        return _pieces(x, piece_rows, lo, hi, size, block)

    return kernel


def work_dtype(dtype) -> str | None:
    """The dtype a leaf is scanned in, or None when it is not scanned (complex, strings,
    opaque objects): float64 stays float64 (when JAX has x64 on), integers wider than 16 bits
    go to float64 (exact below 2^53) where JAX allows it, everything else to float32."""
    dt = np.dtype(dtype)
    wide = jax.config.jax_enable_x64
    if jnp.issubdtype(dt, jnp.floating):
        return "float64" if dt.itemsize == 8 and wide else "float32"
    if jnp.issubdtype(dt, jnp.integer) and dt.itemsize > 2:
        return "float64" if wide else "float32"
    if jnp.issubdtype(dt, jnp.integer) or dt.kind == "b":
        return "float32"
    return None
