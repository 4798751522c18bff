"""Built-in example trees: the canonical scenarios (SCENARIOS.md) and a large synthetic checkpoint.

Pure NumPy (no UI, no JAX import), so tests, notebooks and the app share them:

    from inspector import examples
    t1, t2, t3 = examples.s1_trees()
    examples.load("S1: weighted sum")        # {"t1": ..., "t2": ..., "t3": ...}

Every builder returns fresh arrays; `load(name)` gives the named trees of one example set.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# S1: three same-structured int32 trees and the weights of the scenario.
S1_WEIGHTS = [1, 2, 3]
S1_EXPECTED = [[[[26, 11], [21, 24]], [30, 15]], [[[23, 20], [18, 33]], [33, 18]]]

_S1_DATA = (
    [[[[1, 2], [3, 4]], [2, 3]], [[[1, 2], [3, 4]], [2, 3]]],
    [[[[2, 3], [3, 4]], [5, 3]], [[[2, 3], [3, 4]], [5, 3]]],
    [[[[7, 1], [4, 4]], [6, 2]], [[[6, 4], [3, 7]], [7, 3]]],
)


def s1_trees() -> list:
    """Returns S1's trees `[t1, t2, t3]`, each `[[int32[2,2], int32[2]], [int32[2,2], int32[2]]]`.

    >>> t1, t2, t3 = s1_trees()
    >>> t3[1][0].tolist(), t3[1][0].dtype
    ([[6, 4], [3, 7]], dtype('int32'))
    """
    return [[[np.array(leaf, np.int32) for leaf in pair] for pair in tree] for tree in _S1_DATA]


def s2_tree() -> list:
    """Returns S2's tree `[(a1, a2, a3), b, None, (c, (None,))]` (float32 leaves)."""
    a1 = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    b = np.arange(5.0, dtype=np.float32)
    c = np.arange(12.0, dtype=np.float32).reshape(6, 2)
    return [(a1, 10 * a1, 100 * a1), b, None, (c, (None,))]


def s2_index_tree() -> list:
    """Returns S2's index tree `[1, slice(1, 3), None, -1]`, a prefix of `s2_tree()`."""
    return [1, slice(1, 3), None, -1]


S2_EXPECTED = [([3.0, 4.0, 5.0], [30.0, 40.0, 50.0], [300.0, 400.0, 500.0]), [1.0, 2.0], None,
               ([10.0, 11.0], (None,))]
S2_INDEX_TEXT = ["1", "1:3", ":", "-1"]  # as typed in the app, one per top-level subtree


def mlp(sizes=(2, 3, 4), seed: int = 0) -> list:
    """Returns one MLP as `[(w[3,2], b[3]), (w[4,3], b[4])]` for `sizes=(2, 3, 4)` (float32)."""
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((n_out, n_in), dtype=np.float32) / np.float32(math.sqrt(n_in)),
         rng.standard_normal(n_out, dtype=np.float32) * np.float32(0.1))
        for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True)
    ]


def ensemble(n: int = 4, sizes=(2, 3, 4), seed: int = 0) -> list:
    """Returns S3's ensemble: a list of `n` MLPs with layer sizes `sizes`, different seeds.

    >>> members = ensemble()
    >>> len(members), [tuple(x.shape) for layer in members[0] for x in layer]
    (4, [(3, 2), (3,), (4, 3), (4,)])
    """
    return [mlp(sizes, seed + i) for i in range(n)]


def mlp_params(seed: int = 0, sizes=(4, 8, 2)) -> dict:
    """Returns a 2-layer MLP params dict: `{'layer1': {'weights', 'biases'}, 'layer2': ...}`."""
    layers = mlp(sizes, seed)
    return {f"layer{i + 1}": {"weights": w, "biases": b} for i, (w, b) in enumerate(layers)}


def mlp_grads(seed: int = 1, sizes=(4, 8, 2)) -> dict:
    """Returns gradients shaped like `mlp_params()`: an SGD step is the weighted sum `[1, -lr]`."""
    return mlp_params(seed, sizes)


def transformer_checkpoint(n_layers: int = 1250, d_model: int = 8, d_ff: int = 16,
                           vocab: int = 64, seed: int = 0) -> dict:
    """Returns a synthetic transformer-like checkpoint: `16 * n_layers + 4` small float32 leaves.

    `{'embed': {'positions', 'tokens'}, 'final_norm': {'bias', 'scale'}, 'layers':
    {'layer_0000': {'attn': {'query', 'key', 'value', 'out'} each {'kernel', 'bias'},
    'ln1', 'ln2': {'scale', 'bias'}, 'mlp': {'fc1', 'fc2'} each {'kernel', 'bias'}}, ...}}`.
    The default has 20,004 leaves (about 3 MB). Leaves are views into one buffer, so building
    it costs about a microsecond per leaf.
    """
    d, f = d_model, d_ff
    block = {
        "attn": {name: {"kernel": (d, d), "bias": (d,)}
                 for name in ("query", "key", "value", "out")},
        "ln1": {"scale": (d,), "bias": (d,)},
        "ln2": {"scale": (d,), "bias": (d,)},
        "mlp": {"fc1": {"kernel": (d, f), "bias": (f,)}, "fc2": {"kernel": (f, d), "bias": (d,)}},
    }
    per_block = _count(block)
    extra = vocab * d + 32 * d + 2 * d
    buffer = np.random.default_rng(seed).standard_normal(per_block * n_layers + extra,
                                                         dtype=np.float32)
    buffer *= np.float32(0.02)
    cursor = [0]

    def take(shape):
        size = math.prod(shape)
        out = buffer[cursor[0]:cursor[0] + size].reshape(shape)
        cursor[0] += size
        return out

    def build(spec):
        return {k: build(v) if isinstance(v, dict) else take(v) for k, v in spec.items()}

    width = max(4, len(str(n_layers - 1)))
    return {
        "embed": {"tokens": take((vocab, d)), "positions": take((32, d))},
        "layers": {f"layer_{i:0{width}d}": build(block) for i in range(n_layers)},
        "final_norm": {"scale": take((d,)), "bias": take((d,))},
    }


def s5_model() -> dict:
    """Returns S5's model tree: what the code expects to restore (float32)."""
    return {
        "dense": {"kernel": np.zeros((4, 3), np.float32), "bias": np.zeros(3, np.float32)},
        "norm": {"scale": np.ones(3, np.float32)},
        "head": [np.zeros((3, 2), np.float32), np.zeros(2, np.float32)],
    }


def s5_checkpoint() -> dict:
    """Returns S5's old checkpoint: one missing, one extra, a shape, a dtype and a container
    difference from `s5_model()`, as a checkpoint written by an older model would have.

    >>> import inspector
    >>> sorted(d.kind for d in inspector.diff(s5_model(), s5_checkpoint()))
    ['dtype', 'extra', 'missing', 'shape', 'type']
    """
    return {
        "dense": {"kernel": np.ones((3, 4), np.float32)},
        "norm": {"scale": np.ones(3, np.float16), "offset": np.zeros(3, np.float32)},
        "head": (np.zeros((3, 2), np.float32), np.zeros(2, np.float32)),
    }


def _count(spec) -> int:
    return sum(_count(v) if isinstance(v, dict) else math.prod(v) for v in spec.values())


@dataclass(frozen=True)
class Example:
    """A named set of trees the app can load: `build()` returns `{tree name: tree}`."""

    name: str
    description: str
    build: Callable[[], dict]


def _s1() -> dict:
    return dict(zip(("t1", "t2", "t3"), s1_trees(), strict=True))


def _s3() -> dict:
    return {f"mlp_{i}": tree for i, tree in enumerate(ensemble())}


EXAMPLES: dict[str, Example] = {
    e.name: e
    for e in (
        Example("S1: weighted sum", "Three int32 trees t1, t2, t3; weights 1, 2, 3.",
                _s1),
        Example("S2: per-subtree index", "A tree with None leaves; index 1 | 1:3 | : | -1.",
                lambda: {"s2": s2_tree()}),
        Example("S3: ensemble of 4 MLPs", "Four MLPs [2, 3, 4] to stack for jax.vmap.", _s3),
        Example("MLP: params and grads", "A 2-layer MLP; an SGD step is weights [1, -lr].",
                lambda: {"params": mlp_params(), "grads": mlp_grads()}),
        Example("S5: model vs old checkpoint",
                "A model and a checkpoint that will not restore into it: compare them.",
                lambda: {"model": s5_model(), "checkpoint": s5_checkpoint()}),
        Example("Transformer: 20k-leaf checkpoint",
                "1,250 blocks of 16 small leaves each, plus embeddings.",
                lambda: {"transformer": transformer_checkpoint()}),
        Example("Soup: two transformer checkpoints",
                "Two 20k-leaf checkpoints of one structure, for a weighted sum.",
                lambda: {"ckpt_a": transformer_checkpoint(seed=0),
                         "ckpt_b": transformer_checkpoint(seed=1)}),
    )
}

DEFAULT_EXAMPLES = ("S1: weighted sum", "S2: per-subtree index", "S3: ensemble of 4 MLPs",
                    "MLP: params and grads")


def load(name: str) -> dict:
    """Returns the trees of the example called `name`, as `{tree name: tree}`.

    Raises:
        KeyError: no example has that name (the message lists them).

    >>> sorted(load("S1: weighted sum"))
    ['t1', 't2', 't3']
    """
    try:
        example = EXAMPLES[name]
    except KeyError:
        raise KeyError(f"No example named {name!r}; examples: {', '.join(EXAMPLES)}") from None
    return example.build()
