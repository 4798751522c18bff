"""Synthetic transformer-like parameter trees for the benchmarks."""

from __future__ import annotations

import numpy as np


def transformer_like(n_params: float, n_layers: int = 12, dtype=np.float32, seed: int = 0) -> dict:
    """A tree of about `n_params` parameters: embeddings plus `n_layers` blocks of
    attention (q, k, v, o), MLP (w1, b1, w2, b2) and two layer norms (12 leaves per block)."""
    d = max(4, int(round((n_params / (12 * n_layers)) ** 0.5)))  # 12 d^2 weights per block
    rng = np.random.default_rng(seed)

    def arr(*shape):
        return rng.standard_normal(shape, dtype=np.float32).astype(dtype, copy=False)

    blocks = {
        f"block_{i:04d}": {
            "attn": {"q": arr(d, d), "k": arr(d, d), "v": arr(d, d), "o": arr(d, d)},
            "mlp": {"w1": arr(d, 4 * d), "b1": arr(4 * d), "w2": arr(4 * d, d), "b2": arr(d)},
            "ln1": {"scale": arr(d), "bias": arr(d)},
            "ln2": {"scale": arr(d), "bias": arr(d)},
        }
        for i in range(n_layers)
    }
    return {"embed": arr(64, d), "unembed": arr(d, 64), "blocks": blocks}


def leaf_count_tree(n_leaves: int, d: int = 16, seed: int = 0) -> dict:
    """A transformer-like tree with about `n_leaves` small leaves (12 per block)."""
    return transformer_like(0, n_layers=max(1, n_leaves // 12), seed=seed) if d is None else {
        f"block_{i:05d}": {
            "attn": {"q": np.full((d, d), i, np.float32), "k": np.ones((d, d), np.float32),
                     "v": np.ones((d, d), np.float32), "o": np.ones((d, d), np.float32)},
            "mlp": {"w1": np.ones((d, 4 * d), np.float32), "b1": np.ones(4 * d, np.float32),
                    "w2": np.ones((4 * d, d), np.float32), "b2": np.ones(d, np.float32)},
            "ln1": {"scale": np.ones(d, np.float32), "bias": np.zeros(d, np.float32)},
            "ln2": {"scale": np.ones(d, np.float32), "bias": np.zeros(d, np.float32)},
        }
        for i in range(max(1, n_leaves // 12))
    }
