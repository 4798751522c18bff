"""`Alignment`: which source leaf each target leaf comes from, and how its layout changes.

Made by `inspector.align`; fixed by hand with `override` (which returns a new `Alignment`:
alignments are values, safe to keep, compare and share between threads); saved with
`to_json` / `Alignment.from_json`, or exported as a standalone NumPy function (`to_code`).
"""

from __future__ import annotations

import bisect
import functools
import json
from dataclasses import dataclass, field, replace

from inspector.core.errors import InspectorError, bullet_list
from inspector.core.port import transforms
from inspector.core.port.paths import parse_keystr
from inspector.core.port.tokens import tokens
from inspector.core.port.transforms import Transform

FORMAT = "pytree-inspector alignment"
VERSION = 1


@dataclass(frozen=True, slots=True)
class Pair:
    """One target leaf and where it comes from.

    Attributes:
        target: the target leaf's key path (jax keystr form).
        source: the source leaf's key path.
        transform: the layout change (`Transform`: none, transpose, reshape; a cast noted).
        score: how sure the match is, 0..1 (1: the same name once spelled one way; 0.9: the
            same name, numbers matched by order; 0.8: numbered siblings matched by order;
            below: the closest name; 1 for an override).
        reason: why, in words.
    """

    target: str
    source: str
    transform: Transform
    score: float
    reason: str


@dataclass(frozen=True, slots=True)
class Ambiguity:
    """A target leaf with several equally good source candidates: listed, never guessed."""

    target: str
    candidates: tuple[str, ...]
    score: float
    reason: str


@dataclass(frozen=True)
class Alignment:
    """Every target leaf's source and transform, and what could not be paired.

    Attributes:
        pairs: one `Pair` per paired target leaf, in the target's flattening order.
        unmatched_source: source key paths no pair uses.
        unmatched_target: target key paths with no candidate at all.
        ambiguous: `Ambiguity` records: target paths with tied candidates.
        targets: `(path, shape, dtype)` of every target leaf, in order (the structure
            `convert` builds).
        sources: `(path, shape, dtype)` of every source leaf.
        treedef: the target's structure as `align` saw it (not in the JSON: after
            `from_json`, `convert` builds nested dicts and lists from the key paths, or takes
            the structure of the `target=` it is given).

    >>> import numpy as np, inspector
    >>> a = inspector.align({"w.weight": np.zeros((2, 3))}, {"w": {"kernel": np.zeros((3, 2))}})
    >>> a, a.complete
    (Alignment(1 pairs, 0 unmatched targets, 0 ambiguous, 0 unmatched sources), True)
    >>> Alignment.from_json(a.to_json()) == a
    True
    """

    pairs: tuple[Pair, ...]
    unmatched_source: tuple[str, ...]
    unmatched_target: tuple[str, ...]
    ambiguous: tuple[Ambiguity, ...]
    targets: tuple[tuple, ...] = field(repr=False)
    sources: tuple[tuple, ...] = field(repr=False)
    treedef: object = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        return (f"Alignment({len(self.pairs)} pairs, {len(self.unmatched_target)} unmatched "
                f"targets, {len(self.ambiguous)} ambiguous, {len(self.unmatched_source)} "
                "unmatched sources)")

    @property
    def complete(self) -> bool:
        """Whether every target leaf has its source (nothing unmatched or ambiguous)."""
        return not self.unmatched_target and not self.ambiguous

    def pair(self, target_path: str) -> Pair | None:
        """The pair of a target key path, or None."""
        return self._by_target().get(target_path)

    def _by_target(self) -> dict:
        cached = self.__dict__.get("_pairs_by_target")
        if cached is None:
            cached = {p.target: p for p in self.pairs}
            object.__setattr__(self, "_pairs_by_target", cached)
        return cached

    def override(self, target_path: str, source_path: str,
                 transform: Transform | None = None) -> Alignment:
        """Returns a new `Alignment` where `target_path` comes from `source_path`.

        With `transform=None` the transform is chosen as `align` would: the one the other
        pairs of that kind use if it fits, else the layout the shapes fit. A source may feed
        several targets (tied embeddings).

        Raises:
            InspectorError: a path is not in its tree, or the transform does not turn the
                source's shape into the target's (both shapes named).
        """
        index = self._index()
        if target_path not in index.targets:
            raise InspectorError(f"Cannot override {target_path}: it is no leaf of the target "
                                 f"({len(index.targets)} leaves). Use a path from `.targets`.")
        if source_path not in index.sources:
            raise InspectorError(f"Cannot pair {target_path} with {source_path}: it is no leaf "
                                 f"of the source ({len(index.sources)} leaves). Use a path from "
                                 "`.sources` or `.unmatched_source`.")
        (tshape, tdtype), (sshape, sdtype) = (index.targets[target_path],
                                              index.sources[source_path])
        if transform is None:
            transform = self._fitting(target_path, source_path, tshape, tdtype, sshape, sdtype)
        elif transform.out_shape(sshape) != tuple(tshape):
            raise InspectorError(
                f"Cannot pair {target_path} with {source_path}: {transform} turns "
                f"{sshape} into {transform.out_shape(sshape)}, the target is {tuple(tshape)}.")
        new = Pair(target_path, source_path, transform, 1.0, "set by hand")
        old = self.pair(target_path)
        pairs = list(self.pairs)
        if old is not None:
            pairs[pairs.index(old)] = new
        else:  # in the target's order
            at = index.t_order[target_path]
            pos = bisect.bisect_left([index.t_order[p.target] for p in pairs], at)
            pairs.insert(pos, new)
        unmatched = [p for p in self.unmatched_source if p != source_path]
        if old is not None and old.source != source_path and \
                all(p.source != old.source for p in pairs):
            unmatched.append(old.source)
            unmatched.sort(key=index.s_order.__getitem__)
        out = replace(
            self, pairs=tuple(pairs), unmatched_source=tuple(unmatched),
            unmatched_target=tuple(t for t in self.unmatched_target if t != target_path),
            ambiguous=tuple(a for a in self.ambiguous if a.target != target_path))
        object.__setattr__(out, "_shared_index", index)  # same leaves: the index still holds
        return out

    def _index(self) -> _Index:
        index = self.__dict__.get("_shared_index")
        if index is None:
            index = _Index(self)
            object.__setattr__(self, "_shared_index", index)
        return index

    def _fitting(self, target_path, source_path, tshape, tdtype, sshape, sdtype) -> Transform:
        index = self._index()
        kind = (leaf_name(source_path), leaf_name(target_path), len(sshape), len(tshape))
        perm = index.kind_perms(self.pairs).get(kind)
        if perm is None:
            perm = transforms.choose(kind, [(tuple(sshape), tuple(tshape))])[0]
        found = transforms.for_pair(tuple(sshape), tuple(tshape), sdtype, tdtype, perm)
        if found is None:
            raise InspectorError(
                f"Cannot pair {target_path} with {source_path}: no transpose or reshape turns "
                f"{tuple(sshape)} into {tuple(tshape)}. Give a source leaf of a fitting shape.")
        return found

    def to_json(self) -> str:
        """The alignment as JSON text (`Alignment.from_json` reads it back, equal)."""
        as_dict: dict = {}  # a few distinct transforms, written once each
        for p in self.pairs:
            if p.transform not in as_dict:
                as_dict[p.transform] = p.transform.to_dict()
        return json.dumps({
            "format": FORMAT, "version": VERSION,
            "pairs": [{"target": p.target, "source": p.source,
                       "transform": as_dict[p.transform], "score": p.score,
                       "reason": p.reason} for p in self.pairs],
            "unmatched_source": list(self.unmatched_source),
            "unmatched_target": list(self.unmatched_target),
            "ambiguous": [{"target": a.target, "candidates": list(a.candidates),
                           "score": a.score, "reason": a.reason} for a in self.ambiguous],
            "targets": [[p, list(s), d] for p, s, d in self.targets],
            "sources": [[p, list(s), d] for p, s, d in self.sources],
        })  # no indent: JSON's C encoder then writes 100,000 pairs in well under a second

    @staticmethod
    def from_json(text: str) -> Alignment:
        """The `Alignment` that `to_json` wrote.

        Raises:
            InspectorError: the text is not an alignment written by `to_json`.
        """
        try:
            d = json.loads(text)
            if d.get("format") != FORMAT:
                raise KeyError("format")
            if d.get("version") != VERSION:
                raise InspectorError(f"This alignment is version {d.get('version')}; this "
                                     f"inspector reads version {VERSION}.")
            return Alignment(
                pairs=tuple(Pair(p["target"], p["source"],
                                 Transform.from_dict(p["transform"]), float(p["score"]),
                                 p["reason"]) for p in d["pairs"]),
                unmatched_source=tuple(d["unmatched_source"]),
                unmatched_target=tuple(d["unmatched_target"]),
                ambiguous=tuple(Ambiguity(a["target"], tuple(a["candidates"]),
                                          float(a["score"]), a["reason"])
                                for a in d["ambiguous"]),
                targets=tuple((p, tuple(s), dt) for p, s, dt in d["targets"]),
                sources=tuple((p, tuple(s), dt) for p, s, dt in d["sources"]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            if isinstance(e, InspectorError):
                raise
            raise InspectorError(
                f"Not an alignment written by Alignment.to_json ({type(e).__name__}: {e}). "
                "Save one with `alignment.to_json()`.") from None

    def to_code(self, name: str = "convert") -> str:
        """Standalone Python source (NumPy only) of `name(source) -> target tree`: the mapping
        as code to keep in a repository (see `inspector.core.port.code`)."""
        from inspector.core.port.code import to_code

        return to_code(self, name)

    def problems(self) -> list[str]:
        """One line per target leaf `convert` cannot fill: unmatched, then ambiguous."""
        lines = [f"{t}: no source leaf matches it" for t in self.unmatched_target]
        lines += [f"{a.target}: ambiguous between {', '.join(a.candidates)}"
                  for a in self.ambiguous]
        return lines

    def refusal(self, action: str) -> str:
        """The message of a refusal to convert while targets are unmatched or ambiguous."""
        lines = self.problems()
        return (f"{action}: {len(lines)} target {'leaf has' if len(lines) == 1 else 'leaves have'}"
                f" no single source ({len(self.unmatched_target)} unmatched, "
                f"{len(self.ambiguous)} ambiguous).\n" + bullet_list(lines, limit=10**9)
                + "\nPair them with `alignment.override(target, source)`, or pass "
                "`allow_missing=True` to leave them out (or keep the target's own values with "
                "`target=`).")


def leaf_name(path: str) -> str:
    """A leaf's own name as `align` reads it: its last key, after any `.` or `/`, lower-cased
    (`['encoder.layer.0.query.weight']` -> `weight`)."""
    try:  # the last fragment alone (fast), unless a key holds a '[' of its own
        keys = parse_keystr(path[path.rfind("["):] if path.endswith("]") else path)
    except InspectorError:
        keys = parse_keystr(path)
    last = keys[-1] if keys else ""
    return tokens((last,)).leaf if isinstance(last, str) else ""


class _Index:
    """Lookups over an alignment's leaves, shared by the alignments `override` derives (their
    leaves are the same), each built on first use: paths to shapes and order, and each kind's
    permutation (given by `align`, else read from the pairs)."""

    def __init__(self, alignment: Alignment, perms: dict | None = None):
        self._alignment = alignment
        self._perms = perms

    @functools.cached_property
    def targets(self) -> dict:
        return {p: (s, d) for p, s, d in self._alignment.targets}

    @functools.cached_property
    def sources(self) -> dict:
        return {p: (s, d) for p, s, d in self._alignment.sources}

    @functools.cached_property
    def t_order(self) -> dict:
        return {p: i for i, p in enumerate(self.targets)}

    @functools.cached_property
    def s_order(self) -> dict:
        return {p: i for i, p in enumerate(self.sources)}

    def kind_perms(self, pairs) -> dict:
        """{(source leaf, target leaf, ranks): the permutation that kind uses}."""
        if self._perms is None:
            self._perms = {}
            for p in pairs:
                perm = p.transform.perm
                if perm is None:
                    continue
                kind = (leaf_name(p.source), leaf_name(p.target), len(perm), len(perm))
                self._perms.setdefault(kind, perm)
        return self._perms


def with_kind_perms(alignment: Alignment, perms: dict) -> Alignment:
    """`alignment`, told which permutation each kind of module uses (as `align` chose them),
    so that `override` need not read them back from 100,000 pairs."""
    object.__setattr__(alignment, "_shared_index", _Index(alignment, dict(perms)))
    return alignment
