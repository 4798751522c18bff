"""Key paths as tokens: what `align` compares to decide which leaves are the same weight.

A key path is split on separators (`.`, `/`, `_`, `-`) and case changes (`LayerNorm` ->
`layer`, `norm`), lower-cased, and spelled one way across frameworks (`LayerNorm`,
`layer_norm` and `ln` are all `ln`; a leaf named `weight`, `kernel`, `scale`, `embedding` or
`gamma` is `w`; `beta` is `bias`; `running_mean` is `mean`). Numbers are kept apart: they are
layer indices, matched as such. Splitting is cached per key: a 100,000-leaf tree has a few
hundred distinct keys.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_SPLIT = re.compile(r"[./_\-\s:]+")
_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")

# Words that spell one thing in several ways (applied to every word).
_WORD_SYNONYMS = {"layernorm": "ln", "batchnorm": "bn", "lnorm": "ln"}
# Pairs of words that are one word in another framework (`layer_norm` / `LayerNorm` / `ln`).
_PAIR_SYNONYMS = {("layer", "norm"): "ln", ("batch", "norm"): "bn", ("running", "mean"): "mean",
                  ("running", "var"): "var", ("moving", "mean"): "mean",
                  ("moving", "var"): "var", ("group", "norm"): "gn"}
# The leaf's own name, spelled one way (only the last word of a path).
LEAF_SYNONYMS = {"weight": "w", "kernel": "w", "scale": "w", "embedding": "w", "gamma": "w",
                 "beta": "bias", "variance": "var"}
# Flax collections: a first key that names where a variable lives, not which one it is.
_COLLECTIONS = frozenset({"params", "batch_stats", "params_ema"})
# Bookkeeping leaves one framework keeps and the other has no counterpart for.
BOOKKEEPING = frozenset({"num_batches_tracked"})


class Tokens(NamedTuple):
    """A leaf's path as `align` sees it.

    Attributes:
        words: the words in order, numbers left out, synonyms spelled one way; the last is
            the leaf's own name (`w`, `bias`, `mean`, ...).
        numbers: the numbers in order (layer indices).
        leaf: the leaf's last key as written, lower-cased (`weight`, `kernel`).
        template: words and number slots (None) interleaved in path order, the leaf's name
            last; `natural` fills the slots.
        n_module: how many of `template`'s tokens are the module's (all but the leaf name).
    """

    words: tuple[str, ...]
    numbers: tuple[int, ...]
    leaf: str
    template: tuple
    n_module: int

    @property
    def natural(self) -> tuple:
        """Words and numbers interleaved, in path order (sorts `layer.10` after `layer.9`)."""
        numbers = iter(self.numbers)
        return tuple(next(numbers) if p is None else p for p in self.template)

    @property
    def module(self) -> tuple:
        """`natural` without the leaf's own name: the module the leaf belongs to."""
        return self.natural[: self.n_module]


_CACHE: dict[str, tuple] = {}
_PIECES: dict[str, tuple] = {}
_TEMPLATES: dict[tuple, tuple] = {}
_BLANKED: dict = {}
_DOTS = re.compile(r"[./]")
_NUMBERS = re.compile(r"(\d+)")


def _split_key(key: str) -> tuple:
    """One key's tokens: words lower-cased, numbers as ints, in order (cached per key, and
    per dotted piece)."""
    out = _CACHE.get(key)
    if out is None:
        parts: list = []
        for piece in _DOTS.split(key):
            got = _PIECES.get(piece)
            if got is None:
                got = _PIECES[piece] = tuple(
                    int(w) if w.isdigit() else w.lower()
                    for sub in _SPLIT.split(piece) for w in _WORDS.findall(sub))
            parts.extend(got)
        out = tuple(_merge(parts))
        if len(_CACHE) < 100_000:
            _CACHE[key] = out
    return out


def _merge(parts: list) -> list:
    """Joins word pairs that another framework writes as one (`layer`, `norm` -> `ln`)."""
    out: list = []
    for part in parts:
        if isinstance(part, str):
            part = _WORD_SYNONYMS.get(part, part)
            if out and isinstance(out[-1], str) and (out[-1], part) in _PAIR_SYNONYMS:
                out[-1] = _PAIR_SYNONYMS[out[-1], part]
                continue
        out.append(part)
    return out


def split(keys: tuple) -> tuple[tuple, tuple]:
    """`(parsed, numbers)`: the path's shared parse (words, leaf, template, n_module), and its
    numbers as digit strings. Paths that differ only in their numbers share one parse, cached
    by the path with its numbers blanked; each key (or dotted piece of a flat torch key) is
    blanked once, so a 10,000-layer model costs a few dictionary lookups a leaf.
    """
    if len(keys) > 1 and keys[0] in _COLLECTIONS:
        keys = keys[1:]
    if len(keys) == 1 and type(keys[0]) is str:
        text = keys[0]
        pieces, last_is_key = (_DOTS.split(text) if "/" in text else text.split(".")), True
    else:
        pieces, last_is_key = keys, bool(keys) and isinstance(keys[-1], str)
    blanks, numbers = [], ()
    for piece in pieces:
        got = _BLANKED.get(piece)
        if got is None:
            got = _BLANKED[piece] = _blank(piece)
            if len(_BLANKED) > 1_000_000:
                _BLANKED.clear()
        blanks.append(got[0])
        if got[1]:
            numbers += got[1]
    cut = (tuple(blanks), last_is_key)
    parsed = _TEMPLATES.get(cut)
    if parsed is None:
        parsed = _TEMPLATES[cut] = _parse(cut[0], last_is_key)
    return parsed, numbers


def _blank(piece) -> tuple[str, tuple]:
    """A key with its numbers replaced by 0, and the numbers (`layers_17` -> `layers_0`,
    ('17',))."""
    if not isinstance(piece, str):
        return "0", (str(piece),)
    parts = _NUMBERS.split(piece)
    return "0".join(parts[0::2]), tuple(parts[1::2])


def tokens(keys: tuple) -> Tokens:
    """The `Tokens` of a leaf whose path is `keys` (strings and ints, as in the tree).

    >>> t = tokens(("encoder.layer.3.attention.output.LayerNorm.weight",))
    >>> t.words, t.numbers
    (('encoder', 'layer', 'attention', 'output', 'ln', 'w'), (3,))
    >>> tokens(("params", "Conv_0", "kernel")).natural
    ('conv', 0, 'w')
    """
    parsed, numbers = split(keys)
    return of(parsed, numbers)


def of(parsed: tuple, numbers: tuple) -> Tokens:
    """The `Tokens` of a `split` result."""
    words, leaf, template, n_module = parsed
    return Tokens(words, tuple(int(n) for n in numbers), leaf, template, n_module)


def _parse(keys: tuple, last_is_key: bool) -> tuple:
    """(words, leaf, template, n_module) of a path whose numbers are all 0 (blanked)."""
    natural: list = []
    for key in keys:
        natural.extend(_split_key(key))
    leaf = keys[-1].rsplit(".", 1)[-1].rsplit("/", 1)[-1].lower() if keys else ""
    n_leaf = len(_split_key(leaf)) if last_is_key and leaf else 0
    name = LEAF_SYNONYMS.get(leaf, "".join(str(p) for p in natural[-n_leaf:])) if n_leaf else ""
    if n_leaf and isinstance(natural[-1], int):
        name = ""  # a leaf named by a number: no name of its own
        n_leaf = 0
    module = natural[:-n_leaf] if n_leaf else natural
    template = tuple(None if isinstance(p, int) else p for p in module)
    if name:
        template = (*template, name)
    words = tuple(p for p in template if p is not None)
    return words, leaf if last_is_key else "", template, len(module)


def natural_order(t: Tokens) -> tuple:
    """A sort key putting paths in their numeric order (`layer.9` before `layer.10`)."""
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in t.natural)
