"""Independent NumPy float64 implementations of the merge methods, written from the papers
(and mergekit's documented conventions where a paper leaves a choice open)."""

import numpy as np


def linear(xs, w, normalize=True):
    """Model soups (Wortsman et al. 2022): a weighted average of the models."""
    total = sum(wi * x for wi, x in zip(w, xs, strict=True))
    return total / sum(w) if normalize else total


def task_arithmetic(base, xs, w, lam=1.0, normalize=False):
    """Ilharco et al. 2023: add the weighted task vectors tau_i = x_i - base to the base."""
    tau = sum(wi * (x - base) for wi, x in zip(w, xs, strict=True))
    if normalize:
        s = sum(w)
        tau = tau / (1.0 if abs(s) < 1e-8 else s)
    return base + lam * tau


def trim(tau, density):
    """TIES step 1 (Yadav et al. 2023): keep the top-k magnitudes, k = max(1, int(d * n))."""
    flat = tau.ravel()
    if density >= 1:
        return tau.copy()
    k = max(1, int(density * flat.size)) if density > 0 else 0
    keep = np.zeros(flat.size, bool)
    keep[np.argsort(-np.abs(flat), kind="stable")[:k]] = True
    return np.where(keep, flat, 0.0).reshape(tau.shape)


def l1_rescaled(tau, kept):
    before, after = np.abs(tau).sum(), np.abs(kept).sum()
    return kept if before < 1e-7 or after < 1e-7 else kept * (before / after)


def elect_and_merge(base, taus, w, lam=1.0, normalize=True):
    """TIES steps 2-3: elect the sign of the summed weighted task vectors, then average the
    agreeing entries (the disjoint mean, weighted by w as mergekit does)."""
    weighted = [wi * t for wi, t in zip(w, taus, strict=True)]
    sign = np.where(sum(weighted) >= 0, 1.0, -1.0)
    agree = [np.sign(t) == sign for t in weighted]
    mixed = sum(np.where(a, t, 0.0) for a, t in zip(agree, weighted, strict=True))
    divisor = sum(np.where(a, wi, 0.0) for a, wi in zip(agree, w, strict=True))
    if normalize:
        mixed = mixed / np.where(divisor == 0, 1.0, divisor)
    return base + lam * mixed


def ties(base, xs, w, density, lam=1.0, normalize=True, rescale=False):
    taus = []
    for x, d in zip(xs, density, strict=True):
        kept = trim(x - base, d)
        taus.append(l1_rescaled(x - base, kept) if rescale else kept)
    return elect_and_merge(base, taus, w, lam, normalize)


def dare(base, xs, w, masks, lam=1.0, normalize=False, rescale=True, consensus=False):
    """DARE (Yu et al. 2023) with given drop masks: drop, rescale (mergekit's L1 rule), merge."""
    taus = []
    for x, m in zip(xs, masks, strict=True):
        kept = np.where(m, x - base, 0.0)
        taus.append(l1_rescaled(x - base, kept) if rescale else kept)
    if consensus:
        return elect_and_merge(base, taus, w, lam, normalize)
    return task_arithmetic(base, [base + t for t in taus], w, lam, normalize)


def slerp(a, b, t, threshold=0.9995):
    """Spherical interpolation of the leaves as single vectors; lerp when (anti)parallel."""
    ua, ub = a.ravel() / np.linalg.norm(a), b.ravel() / np.linalg.norm(b)
    cos = np.clip(ua @ ub, -1, 1)
    if abs(cos) > threshold:
        return (1 - t) * a + t * b
    theta = np.arccos(cos)
    return (np.sin((1 - t) * theta) * a + np.sin(t * theta) * b) / np.sin(theta)


def model_stock(base, xs):
    """Model Stock (Jang et al. 2024): interpolate the average of N fine-tuned models toward
    the base by t = N cos / (1 + (N - 1) cos), cos the (mean pairwise) angle of the offsets."""
    d = [(x - base).ravel() for x in xs]
    cos = np.mean([d[i] @ d[j] / (np.linalg.norm(d[i]) * np.linalg.norm(d[j]))
                   for i in range(len(d)) for j in range(i + 1, len(d))])
    n = len(xs)
    t = n * cos / (1 + (n - 1) * cos)
    return t * np.mean(xs, axis=0) + (1 - t) * base
