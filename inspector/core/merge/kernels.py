"""The merge methods' arithmetic on one flat float32 leaf, as JAX functions to jit.

Each function takes the leaf's values already flattened and cast to float32 and returns the
merged float32 vector; the caller casts back once. Every number a user may change (weights,
density, `t`, `lambda`, the seed) arrives as a traced array, so changing it never recompiles;
only the method, the model count and the boolean switches (`normalize`, `rescale`) are static.
The formulas follow mergekit 0.1.5 (arcee-ai/mergekit, `mergekit/merge_methods/` and
`mergekit/sparsify.py`); each function names the mergekit code it mirrors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

_INT_MAX = 2**31 - 1


_SAMPLE = 1 << 10  # elements per row sampled to bracket the k-th largest before searching


_BLOCK = 1 << 14  # elements per row reduced at a time by the passes over a large leaf


def _blocked(bits, reduce, combine, init):
    """`reduce(block)` (a per-row vector) over blocks of `_BLOCK` columns of `bits`, folded
    with `combine` from `init`, in a loop. XLA's CPU backend does not fuse an elementwise
    producer into its reduction: over the whole row, each pass wrote (and page-faulted) a
    temporary the size of the data, 27-30 ms per pass on 2 x 4e6 here; by blocks that stay in
    the cache, 5 ms and no fault."""
    rows, size = bits.shape
    n = size // _BLOCK

    def body(i, acc):
        return combine(acc, reduce(jax.lax.dynamic_slice(bits, (0, i * _BLOCK), (rows, _BLOCK))))

    acc = jax.lax.fori_loop(0, n, body, init) if n else init
    return combine(acc, reduce(bits[:, n * _BLOCK:])) if size % _BLOCK else acc


def count_at_least(bits, t):
    """Per row, how many of `bits` (non-negative int32, shape `(rows, size)`) are >= `t[row]`.

    As `size + sum((bits - t) >> 31)`: the shift is -1 exactly where `bits < t` (no overflow:
    both are non-negative). XLA's CPU backend sums that twice as fast as the comparison's
    booleans (8.8 against 17.8 ms on 2 x 4e6 here); by blocks (`_blocked`) on large rows."""
    def negatives(block):
        return jnp.sum((block - t[:, None]) >> 31, axis=1, dtype=jnp.int32)

    if bits.shape[1] < 2 * _BLOCK:
        return bits.shape[1] + negatives(bits)
    return bits.shape[1] + _blocked(bits, negatives, jnp.add,
                                    jnp.zeros(bits.shape[0], jnp.int32))


def kth_largest_bits(bits, k):
    """Returns, per row, the int32 bit pattern of the k-th largest of `bits` (non-negative
    floats viewed as int32, shape `(models, size)`; `k` one count per row, 1 <= k <= size).

    Non-negative IEEE floats order like their bit patterns, so a search over the pattern with
    counting passes finds the k-th largest exactly with `k` traced (a sort of the leaf costs
    ~50x more here, and `lax.top_k` needs a static k, so a new density would recompile, and
    runs slower still). To need few passes: a sorted strided sample of the row brackets the
    answer (checked by counting; the full range when the check fails); then each pass counts
    the elements at or above one guess, interpolated between the bracket's counts (every third
    pass a plain bisection, so adversarial data still closes in ~93 passes at most), and the
    search stops as soon as the bracket holds the answer at one end: when exactly `k` lie at or
    above `lo` the answer is the least of them, when `k - 1` lie at or above `hi` it is the
    greatest below `hi` (one more pass), else when `hi = lo + 1` it is `lo`. One threshold per
    pass: XLA's CPU backend counted four thresholds in one pass 8x slower than one (72 against
    8.8 ms on 2 x 4e6), so 8-11 single passes beat 2-3 fourfold ones (88-139 against 146-191 ms).
    """
    rows, size = bits.shape
    if size <= 2 * _SAMPLE:  # small leaves (biases, norms): one sort beats any search loop
        ranked = jnp.sort(bits, axis=1)
        return jnp.take_along_axis(ranked, jnp.clip(size - k, 0, size - 1)[:, None], axis=1)[:, 0]
    stride = max(1, size // _SAMPLE)
    sample = jnp.sort(bits[:, ::stride], axis=1)
    m = sample.shape[1]
    rank = m - (k.astype(jnp.float32) * m / size)  # where the k-th largest sits in the sample
    margin = 3.0 * jnp.sqrt(jnp.maximum(m - rank, 1.0)) + 3.0
    at = lambda r: jnp.take_along_axis(  # noqa: E731
        sample, jnp.clip(r, 0, m - 1).astype(jnp.int32)[:, None], axis=1)[:, 0]
    lo, hi = at(jnp.floor(rank - margin)), at(jnp.ceil(rank + margin)) + 1

    # invariant: count(lo) >= k > count(hi); then the k-th largest is the largest such lo
    c_lo, c_hi = count_at_least(bits, lo), count_at_least(bits, hi)
    good = (c_lo >= k) & (c_hi < k) & (hi > lo)
    lo, c_lo = jnp.where(good, lo, 0), jnp.where(good, c_lo, size)
    hi, c_hi = jnp.where(good, hi, _INT_MAX), jnp.where(good, c_hi, 0)

    def open_(state):
        lo, hi, c_lo, c_hi, _ = state
        return (hi - lo > 1) & (c_lo != k) & (c_hi != k - 1)

    def step(state):
        lo, hi, c_lo, c_hi, i = state
        # where a line through (lo, c_lo) and (hi, c_hi) crosses k + 0.5; every third pass the
        # bisection point, so the bracket at least halves every three passes
        gap = jnp.maximum(c_lo - c_hi, 1).astype(jnp.float32)
        frac = (c_lo.astype(jnp.float32) - (k.astype(jnp.float32) + 0.5)) / gap
        guess = lo + (jnp.clip(frac, 0.0, 1.0) * (hi - lo).astype(jnp.float32)).astype(jnp.int32)
        t = jnp.where(i % 3 == 2, lo + (hi - lo) // 2, guess)
        t = jnp.clip(t, lo + 1, jnp.maximum(hi - 1, lo + 1))
        c = count_at_least(bits, t)
        todo = open_(state)  # rows already closed stay as they are
        up, down = todo & (c >= k), todo & (c < k)
        return (jnp.where(up, t, lo), jnp.where(down, t, hi), jnp.where(up, c, c_lo),
                jnp.where(down, c, c_hi), i + 1)

    lo, hi, c_lo, c_hi, _ = jax.lax.while_loop(
        lambda s: jnp.any(open_(s)), step, (lo, hi, c_lo, c_hi, jnp.int32(0)))
    least_above = _blocked(
        bits, lambda x: jnp.min(jnp.where(x >= lo[:, None], x, _INT_MAX), axis=1), jnp.minimum,
        jnp.full(rows, _INT_MAX, jnp.int32))
    greatest_below = _blocked(
        bits, lambda x: jnp.max(jnp.where(x < hi[:, None], x, -1), axis=1), jnp.maximum,
        jnp.full(rows, -1, jnp.int32))
    return jnp.where(hi - lo <= 1, lo, jnp.where(c_lo == k, least_above, greatest_below))


def rescaled(delta, mask, rescale: bool, eps: float = 1e-7):
    """`rescaled_masked_tensor(delta, mask, RescaleNorm.l1)` of mergekit's sparsify.py, per
    row of `delta`.

    With `rescale`, the kept values are scaled so the L1 norm of each task vector's leaf is
    what it was before masking (mergekit's rule; unless either norm is below `eps`).
    """
    masked = jnp.where(mask, delta, 0.0)
    if not rescale:
        return masked
    before = jnp.sum(jnp.abs(delta), axis=-1, keepdims=True)
    after = jnp.sum(jnp.abs(masked), axis=-1, keepdims=True)
    small = (before < eps) | (after < eps)
    return jnp.where(small, masked, masked * (before / jnp.where(small, 1.0, after)))


def magnitude(deltas, k, rescale: bool):
    """mergekit `sparsify.magnitude` for each row of `deltas` (one task vector per model):
    keep its `k` largest |delta|, where the caller passes `k = max(1, int(density * size))`
    (0 for density <= 0, size for density >= 1).

    Exactly `k` are kept: among elements tied with the k-th largest magnitude (frequent in
    bfloat16), the first in flat order, as a stable descending sort would pick them (mergekit's
    `torch.argsort` picks an unspecified subset of the ties).
    """
    bits = jax.lax.bitcast_convert_type(jnp.abs(deltas), jnp.int32)
    threshold = kth_largest_bits(bits, k)
    above = bits >= threshold[:, None]
    excess = count_at_least(bits, threshold) - k
    keep = jax.lax.cond(jnp.any(excess > 0), _first_of_ties, lambda *_: above,
                        bits, threshold, k)
    return rescaled(deltas, keep & (k > 0)[:, None], rescale)


_TIE_BLOCK = 1 << 12


def _first_of_ties(bits, threshold, k):
    """The masks of the k largest when several equal the k-th: those above it, then the first
    ties in flat order, up to `k` in all.

    The cut (one past the last tie kept) is found in two steps: the ties of each block of 4096
    elements are counted (one pass), a running sum over the blocks finds the block holding the
    last tie to keep, and a running sum inside that block finds it. (A bisection over the
    index took ~log2(size) passes, 165 ms on 2 x 4e6 here; a running sum over the whole row,
    `jnp.cumsum`, 108 ms.)"""
    tied = bits == threshold[:, None]
    rows, size = bits.shape
    block = min(_TIE_BLOCK, size)
    blocks = -(-size // block)
    padded = jnp.pad(tied, ((0, 0), (0, blocks * block - size)))
    per_block = jnp.sum(padded.reshape(rows, blocks, block), axis=2, dtype=jnp.int32)
    # ties to keep, after those above (threshold + 1 could overflow: a NaN's bit pattern)
    need = k - (count_at_least(bits, threshold) - jnp.sum(per_block, axis=1))
    before = jnp.cumsum(per_block, axis=1) - per_block  # ties in the blocks before each
    last = jnp.clip(jnp.sum(before < need[:, None], axis=1) - 1, 0, blocks - 1)
    start = last * block
    segment = jax.vmap(lambda row, s: jax.lax.dynamic_slice(row, (s,), (block,)))(padded, start)
    left = need - jnp.take_along_axis(before, last[:, None], axis=1)[:, 0]
    within = jnp.cumsum(segment, axis=1, dtype=jnp.int32)  # ties up to each element
    cut = jnp.where(need > 0, start + jnp.sum(within < left[:, None], axis=1) + 1, 0)
    index = jnp.arange(size, dtype=jnp.int32)[None, :]
    return (bits > threshold[:, None]) | (tied & (index < cut[:, None]))


def bernoulli(deltas, density, key, rescale: bool):
    """mergekit `sparsify.bernoulli` (DARE, Yu et al. 2023) for each row of `deltas`: keep
    each element with probability `density[row]`, then (with `rescale`) restore each row's L1
    norm. `key` is the leaf's uint32[4] state (seed, leaf index)."""
    keep = uniform(key, deltas.shape) < density[:, None]
    return rescaled(deltas, keep, rescale)


def _fmix32(x):
    """MurmurHash3's 32-bit finalizer: every input bit flips each output bit with p ~ 1/2."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def uniform(key, shape):
    """Uniform float32 numbers in [0, 1), one per element of `shape` (rows, size), from a
    counter-based hash of (key, row, element index).

    Reproducible on every backend and about as cheap as reading the data: XLA's own generators
    (threefry, RngBitGenerator) ran 20-100x slower than the rest of a DARE merge on this CPU.
    A mask only needs each element's draw independent of the others and of the data, which
    two rounds of MurmurHash3's finalizer give (the kept fraction and the mean are tested).
    """
    rows, size = shape
    salt = _fmix32(key[0] ^ _fmix32(key[1] ^ _fmix32(key[2] ^ jnp.uint32(0x9E3779B9))))
    row_salt = _fmix32(salt + jnp.arange(rows, dtype=jnp.uint32) * jnp.uint32(0x632BE5AB))
    index = jnp.arange(size, dtype=jnp.uint32)[None, :]
    bits = _fmix32(_fmix32(index * jnp.uint32(0x9E3779B1) + row_salt[:, None]) ^ key[3])
    return (bits >> 8).astype(jnp.float32) * jnp.float32(2.0**-24)


def task_arithmetic(base, xs, weights, lam, *, normalize: bool):
    """mergekit GTA with no sparsification and no consensus (`task_arithmetic`):
    `base + lam * sum_i w_i (x_i - base) [/ sum_i w_i if normalize]`."""
    deltas = [x - base for x in xs]
    return _mix(base, deltas, weights, lam, consensus=False, normalize=normalize)


def general_task_arithmetic(base, xs, weights, density, k, lam, key, *, sparsify: str,
                            consensus: bool, normalize: bool, rescale: bool):
    """mergekit `GTATask.execute` / `merge_group`: sparsify each task vector, elect signs, mix,
    add to the base.

    `sparsify` is `"magnitude"` (TIES) or `"random"` (DARE); `consensus` is TIES' sign election
    by the sign of the weighted sum ("sum", mergekit's and the paper's choice). The task vectors
    are one `(models, size)` array so the compiled program does not grow with the model count.
    """
    deltas = jnp.stack([x - base for x in xs])
    if sparsify == "magnitude":
        deltas = magnitude(deltas, k, rescale)
    else:
        deltas = bernoulli(deltas, density, key, rescale)
    return _mix(base, list(deltas), weights, lam, consensus=consensus, normalize=normalize)


def _mix(base, deltas, weights, lam, *, consensus: bool, normalize: bool):
    weighted = [weights[i] * d for i, d in enumerate(deltas)]
    if consensus:
        # get_mask(method="sum"): the majority sign is that of the summed weighted deltas
        # (>= 0 counts as +); a delta joins when its sign equals it (zeros never do).
        majority = jnp.where(sum(weighted) >= 0, 1.0, -1.0)
        agree = [jnp.sign(d) == majority for d in weighted]
        mixed = sum(jnp.where(a, d, 0.0) for a, d in zip(agree, weighted, strict=True))
        divisor = sum(jnp.where(a, weights[i], 0.0) for i, a in enumerate(agree))
        divisor = jnp.where(divisor == 0, 1.0, divisor)
    else:
        mixed = sum(weighted)
        divisor = sum(weights[i] for i in range(len(deltas)))
        divisor = jnp.where(jnp.abs(divisor) < 1e-8, 1.0, divisor)
    if normalize:
        mixed = mixed / divisor
    return base + lam * mixed


def linear(xs, weights, *, normalize: bool):
    """mergekit `LinearMergeTask`: `sum_i w_i x_i [/ sum_i w_i if normalize]`."""
    total = sum(weights[i] * x for i, x in enumerate(xs))
    if normalize:
        total = total / sum(weights[i] for i in range(len(xs)))
    return total


def slerp(a, b, t, dot_threshold: float = 0.9995, eps: float = 1e-8):
    """mergekit `slerp.slerp`: spherical interpolation from `a` (t = 0) to `b` (t = 1) over
    the whole leaf as one vector; linear interpolation when the directions are (anti)parallel
    (|cos| > 0.9995)."""
    norm_a, norm_b = jnp.sqrt(jnp.sum(a * a)), jnp.sqrt(jnp.sum(b * b))
    unit_a = jnp.where(norm_a > eps, norm_a, 1.0)
    unit_b = jnp.where(norm_b > eps, norm_b, 1.0)
    dot = jnp.clip(jnp.sum(a * b) / (unit_a * unit_b), -1.0, 1.0)
    parallel = jnp.abs(dot) > dot_threshold
    theta = jnp.arccos(jnp.where(parallel, 0.0, dot))
    sin_theta = jnp.where(parallel, 1.0, jnp.sin(theta))
    s0 = jnp.where(parallel, 1.0 - t, jnp.sin(theta - theta * t) / sin_theta)
    s1 = jnp.where(parallel, t, jnp.sin(theta * t) / sin_theta)
    return s0 * a + s1 * b


def model_stock(base, xs):
    """mergekit `ModelStockMergeTask` (Jang et al. 2024, filter_wise=False): with offsets
    `d_i = x_i - base` over the whole leaf, `cos` the mean pairwise cosine, `N` the model count,
    `t = N cos / (1 + (N - 1) cos)` and the result `t * mean(x_i) + (1 - t) * base`."""
    offsets = [x - base for x in xs]
    norms = [jnp.sqrt(jnp.sum(d * d)) for d in offsets]
    cosines = []
    for i in range(len(offsets)):
        for j in range(i + 1, len(offsets)):
            dot = jnp.sum(offsets[i] * offsets[j])
            cosines.append(jnp.clip(dot / jnp.maximum(norms[i] * norms[j], 1e-6), -1.0, 1.0))
    cos = sum(cosines) / len(cosines)
    n = len(xs)
    denominator = 1 + (n - 1) * cos
    singular = jnp.abs(denominator) < 1e-6
    t = jnp.where(singular, 0.0, n * cos / jnp.where(singular, 1.0, denominator))
    return t * (sum(xs) / n) + (1 - t) * base
