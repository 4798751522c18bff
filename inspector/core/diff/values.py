"""How much two trees' values differ, leaf by leaf, as compiled reductions.

`leaf_value_stats(pairs)` reduces each pair of same-shape leaves to a few numbers (max |a-b|,
relative L2, cosine similarity, fraction of elements changed beyond a tolerance) with one kernel
per distinct (shape, dtypes): the leaves are read once, in float32 (complex64 for complex), and
lazy checkpoint leaves are read as their kernel runs, a few at a time, so two checkpoints larger
than memory can be compared. `diff(a, b, values=True)`, the app's Compare view (one leaf
selected, and `value_table`: every leaf and subtree) and `pytree-inspector diff --values` all
use it: one implementation of max |a-b| and relative L2.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from inspector.core.devices import resolve_device
from inspector.core.packed import unpacked
from inspector.core.plan import Call, Plan
from inspector.core.tolerance import ATOL, RTOL

_CHUNK = 64  # leaves per plan: the progress callback is told after each chunk
_CHUNK_BYTES = 256 << 20  # ... and after at most this many bytes of both leaves


@dataclass(frozen=True, slots=True)
class ValueStats:
    """How one pair of leaves differs.

    Attributes:
        max_abs: max |a - b| (NaN when NaNs sit in different places).
        rel_l2: ||a - b|| / ||a|| (inf when `a` is all zeros and `b` is not; NaN as above).
        cosine: <a, b> / (||a|| ||b||) (1.0 for two all-zero leaves, 0.0 when one is; NaN as
            above). Computed in float32: about 7 significant digits.
        frac_changed: the fraction of elements with |a - b| > atol + rtol * |b| (np.isclose's
            rule; NaN against a number counts as changed, NaN against NaN does not).
        size: the number of elements.
        norm_a, norm_b, norm_diff, dot: ||a||, ||b||, ||a - b||, <a, b> (float32 sums; what
            subtree figures are aggregated from, see `subtree_value_stats`).
    """

    max_abs: float
    rel_l2: float
    cosine: float
    frac_changed: float
    size: int
    norm_a: float = 0.0
    norm_b: float = 0.0
    norm_diff: float = 0.0
    dot: float = 0.0


def _stats_kernel(complex_: bool, size: int = 0):
    if not complex_ and size:
        return partial(_real_stats, careful=_careful_kernel(False))
    return _careful_kernel(True)


_BLOCK = 1 << 19
"""Elements of each leaf per step of the real kernel: both blocks (4 MiB in float32) stay in
cache while its six reductions read them, so memory is read once."""


def _real_stats(tol, a, b, *, careful):
    """The seven figures of two real leaves, fast when every value is finite.

    Each figure is its own reduction, kept apart by optimization barriers: XLA's CPU backend
    fuses sibling reductions into one multi-output loop that runs ~5x slower than a single one
    (measured here on 2^26 float32 pairs: max |d| alone 22 ms, with sum d^2 105 ms), and would
    materialise the difference. Six passes over the whole leaf would read memory six times, so
    a leaf of two blocks or more is reduced block by block (a loop over `_BLOCK` elements, the
    passes reading the block from cache): 2^26 pairs in ~80 ms, against 240-300 ms for the
    fused kernel. The dot products use XLA's threaded dot; counts are exact (each block's
    count < 2^24 is summed in float32, then in int32). NaN or Inf anywhere makes some figure
    non-finite; then the leaf is reduced again by the careful kernel, which knows which NaNs
    and Infs match (and is exact where they do)."""
    x, y = a.reshape(-1), b.reshape(-1)
    size = x.shape[0]
    blocks = size // _BLOCK
    if blocks < 2:
        acc = _block_figures(tol, x, y)
    else:
        def step(i, acc):
            start = (i * _BLOCK,)
            return _add(acc, _block_figures(tol, jax.lax.dynamic_slice(x, start, (_BLOCK,)),
                                            jax.lax.dynamic_slice(y, start, (_BLOCK,))))

        f32 = jnp.float32
        acc = jax.lax.fori_loop(0, blocks, step, (f32(0), f32(0), f32(0), f32(0), f32(0),
                                                  jnp.int32(0)))
        if size > blocks * _BLOCK:
            acc = _add(acc, _block_figures(tol, x[blocks * _BLOCK:], y[blocks * _BLOCK:]))
    fast = jnp.stack([jnp.float32(0), *acc[:5], acc[5].astype(jnp.float32)])
    return jax.lax.cond(jnp.all(jnp.isfinite(fast)), lambda: fast,
                        lambda: careful(tol, a, b))


def _block_figures(tol, x, y):
    """max |d|, sum d^2, <x, x>, <y, y>, <x, y> and the changed count of one block (float32;
    the count int32), each its own reduction."""
    def changed(x, y):
        # 1 where |d| > atol + rtol |b|, else 0, without a select (selects are not vectorised)
        flags = jnp.maximum(jnp.sign(jnp.abs(x - y) - tol[1] - tol[0] * jnp.abs(y)), 0.0)
        return jnp.sum(flags).astype(jnp.int32)

    figures = (lambda x, y: jnp.max(jnp.abs(x - y)), lambda x, y: jnp.sum(jnp.square(x - y)),
               lambda x, y: x @ x, lambda x, y: y @ y, lambda x, y: x @ y, changed)
    x, y = x.astype(jnp.float32), y.astype(jnp.float32)
    out = []
    for figure in figures:
        x, y = jax.lax.optimization_barrier((x, y))
        out.append(figure(x, y))
    return tuple(out)


def _add(acc, part):
    return (jnp.maximum(acc[0], part[0]), *(u + v for u, v in zip(acc[1:], part[1:], strict=True)))


def _careful_kernel(complex_: bool):
    def kernel(tol, a, b):
        work = jnp.complex64 if complex_ else jnp.float32
        a, b = a.reshape(-1).astype(work), b.reshape(-1).astype(work)
        nan_a, nan_b = jnp.isnan(a), jnp.isnan(b)
        same = (nan_a & nan_b) | (jnp.isinf(a) & (a == b))  # equal however they subtract
        d = jnp.where(same, 0, a - b)
        abs_d = jnp.abs(d)
        a_ok, b_ok = jnp.where(same, 0, a), jnp.where(same, 0, b)
        changed = (abs_d > tol[1] + tol[0] * jnp.abs(b)) | (nan_a != nan_b)
        f32 = jnp.float32
        # One variadic reduction: a single pass over the leaf for all seven figures (separate
        # reductions read the leaf once each).
        operands = ((nan_a != nan_b).astype(f32), abs_d.astype(f32), (abs_d * abs_d).astype(f32),
                    (jnp.abs(a_ok) ** 2).astype(f32), (jnp.abs(b_ok) ** 2).astype(f32),
                    jnp.real(jnp.conj(a_ok) * b_ok).astype(f32), changed.astype(f32))
        init = tuple(f32(0) for _ in operands)

        def combine(x, y):
            return (jnp.maximum(x[0], y[0]), jnp.maximum(x[1], y[1]),
                    *(u + v for u, v in zip(x[2:], y[2:], strict=True)))

        return jnp.stack(jax.lax.reduce(operands, init, combine, (0,)))

    return kernel


def plan_leaf_value_stats(pairs, rtol: float = RTOL, atol: float = ATOL, device=None) -> Plan:
    """The `Plan` behind `leaf_value_stats`: one call per pair, one kernel per distinct
    (shape, dtypes); its result is the list of raw 7-number reductions."""
    device = resolve_device(device)
    tol = np.asarray([rtol, atol], np.float32)  # traced: a new tolerance never recompiles
    calls = []
    read = 0
    for a, b in pairs:
        da, db = (np.dtype(jax.dtypes.canonicalize_dtype(x.dtype)) for x in (a, b))
        shape = tuple(a.shape)
        complex_ = bool(jnp.issubdtype(da, jnp.complexfloating)
                        or jnp.issubdtype(db, jnp.complexfloating))
        key = ("value_stats", shape, str(da), str(db))
        calls.append(Call(key, partial(_stats_kernel, complex_, math.prod(shape)),
                          [tol, _array(a), _array(b)]))
        read += math.prod(shape) * (da.itemsize + db.itemsize)
    return Plan("value_stats", device, calls, list, read, 7 * 4 * len(calls))


def _array(x):
    return x if hasattr(x, "shape") and hasattr(x, "dtype") else np.asarray(x)


def leaf_value_stats(pairs, rtol: float = RTOL, atol: float = ATOL, device=None,
                     progress: Callable[[int, int], None] | None = None) -> list[ValueStats]:
    """Returns a `ValueStats` for each `(a, b)` pair of same-shape leaves.

    Args:
        pairs: `(a, b)` leaves (NumPy, JAX or lazy arrays) of equal shapes.
        rtol, atol: the tolerance of `frac_changed` (traced: changing it never recompiles).
        device: where to reduce.
        progress: called as `progress(done, total)` (leaves) after each chunk of at most 64
            leaves or 256 MiB.

    >>> s = leaf_value_stats([(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.5, 4.0]))])[0]
    >>> s.max_abs, s.frac_changed
    (1.0, 0.6666666666666666)
    """
    pairs = list(pairs)
    out: list[ValueStats] = []
    for chunk in _chunks(pairs):
        plan = plan_leaf_value_stats(chunk, rtol, atol, device)
        plan.compile()
        plan.place()
        raw = np.asarray(jax.device_get(plan.execute()), np.float64).reshape(len(chunk), 7)
        out.extend(_finish(r, math.prod(a.shape)) for r, (a, _) in zip(raw, chunk, strict=True))
        if progress is not None:
            progress(len(out), len(pairs))
    return out


def _chunks(pairs):
    """Runs of at most `_CHUNK` pairs and `_CHUNK_BYTES` (one pair may be more): so progress
    is told every fraction of a second on big checkpoints."""
    chunk, nbytes = [], 0
    for pair in pairs:
        size = sum(int(getattr(x, "nbytes", 0) or 0) for x in pair)
        if chunk and (len(chunk) == _CHUNK or nbytes + size > _CHUNK_BYTES):
            yield chunk
            chunk, nbytes = [], 0
        chunk.append(pair)
        nbytes += size
    if chunk:
        yield chunk


def _finish(r, size: int) -> ValueStats:
    mismatch, max_abs, err2, na2, nb2, dot, changed = (float(v) for v in r)
    frac = changed / size if size else 0.0
    if mismatch:
        nan = float("nan")
        return ValueStats(nan, nan, nan, frac, size, nan, nan, nan, nan)
    return _figures(max_abs, err2, na2, nb2, dot, changed, size)


def _figures(max_abs, err2, na2, nb2, dot, changed, size) -> ValueStats:
    err, na, nb = math.sqrt(err2), math.sqrt(na2), math.sqrt(nb2)
    rel = err / na if na else (0.0 if err == 0 else math.inf)
    if na and nb:
        cosine = max(-1.0, min(1.0, dot / (na * nb)))
    else:
        cosine = 1.0 if na == nb else 0.0
    frac = changed / size if size else 0.0
    return ValueStats(max_abs, rel, cosine, frac, size, na, nb, err, dot)


def subtree_value_stats(stats: dict[tuple, ValueStats]) -> dict[tuple, ValueStats]:
    """Aggregates leaf figures up the tree: returns a `ValueStats` for every subtree (every
    prefix of the given key tuples, `()` the root) as if its leaves were one vector: max |a-b|
    is the max over them, relative L2, cosine and the fraction changed are norm- and
    size-weighted (`sqrt(sum ||a-b||^2) / sqrt(sum ||a||^2)`, ...), so a big layer that
    changed outweighs a small one. NaN in any leaf makes its subtrees NaN.

    Args:
        stats: leaf figures by key tuple (`("layer0", "w")`), e.g. from `leaf_value_stats`.

    >>> leaves = leaf_value_stats([(np.ones(3), np.ones(3)), (np.ones(1), np.zeros(1))])
    >>> agg = subtree_value_stats({("a",): leaves[0], ("b",): leaves[1]})
    >>> agg[()].max_abs, round(agg[()].rel_l2, 3), agg[()].frac_changed
    (1.0, 0.5, 0.25)
    """
    sums: dict[tuple, list] = {}
    for key, s in stats.items():
        changed = s.frac_changed * s.size
        parts = (s.max_abs, s.norm_diff ** 2, s.norm_a ** 2, s.norm_b ** 2, s.dot, changed,
                 s.size)
        for depth in range(len(key) + 1):
            acc = sums.setdefault(key[:depth], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0])
            acc[0] = max(acc[0], parts[0]) if not math.isnan(acc[0]) else acc[0]
            if math.isnan(parts[0]):
                acc[0] = math.nan
            for i in range(1, 7):
                acc[i] += parts[i]
    out = {}
    for key, (max_abs, err2, na2, nb2, dot, changed, size) in sums.items():
        if math.isnan(max_abs) or math.isnan(err2):
            nan = math.nan
            out[key] = ValueStats(nan, nan, nan, changed / size if size else 0.0, size,
                                  nan, nan, nan, nan)
        else:
            out[key] = _figures(max_abs, err2, na2, nb2, dot, changed, size)
    return out


COLUMNS = ("path", "kind", "size", "max_abs", "rel_l2", "cosine", "changed")
"""The keys of each `value_table` row."""


def _leaves(tree) -> dict:
    flat, _ = jax.tree_util.tree_flatten_with_path(unpacked(tree))
    return {tuple(jax.tree_util.keystr((k,)) for k in path): leaf for path, leaf in flat}


def _nbytes(x) -> int:
    return int(getattr(x, "nbytes", 0) or 0)


def value_table(a, b, rtol: float = RTOL, atol: float = ATOL, device=None,
                progress=None) -> list[dict]:
    """The whole-tree value diff (the app's Compare tab): rows for every leaf both trees have
    with the same shape, and for every subtree above them (figures aggregated as one vector:
    max, norm- and size-weighted; `COLUMNS`), sorted by relative L2, largest first (NaN
    first: NaNs moved). Reads each leaf of both trees once.

    `progress(leaves done, leaves, bytes read, bytes)` is called as the leaves are reduced
    (lazy checkpoint leaves stream: a few at a time)."""
    la, lb = _leaves(a), _leaves(b)
    keys = [k for k, x in la.items() if k in lb and tuple(getattr(x, "shape", ())) ==
            tuple(getattr(lb[k], "shape", ())) and hasattr(x, "dtype")]
    report = None
    if progress is not None:  # leaves done -> also the bytes of both trees read so far
        read = [0]
        for k in keys:
            read.append(read[-1] + _nbytes(la[k]) + _nbytes(lb[k]))

        def report(done, total):
            progress(done, total, read[done], read[-1])

    stats = leaf_value_stats([(la[k], lb[k]) for k in keys], rtol, atol, device, report)
    by_key = dict(zip(keys, stats, strict=True))
    rows = []
    for key, s in subtree_value_stats(by_key).items():
        rows.append({"path": "".join(key) or "(root)", "kind": "leaf" if key in by_key else
                     "subtree", "size": s.size, "max_abs": s.max_abs, "rel_l2": s.rel_l2,
                     "cosine": s.cosine, "changed": s.frac_changed})
    rows.sort(key=lambda r: (-(r["rel_l2"] if r["rel_l2"] == r["rel_l2"] else float("inf")),
                             r["path"]))
    return rows
