"""`align(source, target)`: pair every target leaf with its source leaf and layout transform.

Three passes, each over what the one before left, each bucketed so two 100,000-leaf trees
align in about a second (no pass compares every leaf with every other):

1. the same name: leaves whose words (synonyms spelled one way, numbers left out) are equal,
   paired by equal numbers; where the two trees number them differently (flax's
   `LayerNorm_0` inside `layer_3` against torch's `layer.3.LayerNorm`), by numeric order;
2. numbered siblings by order: modules of the same kind (the same leaf names and ranks: a
   Conv2d, a BatchNorm, a Linear) paired in path order, so torch `features.0, features.4`
   meet Flax `Conv_0, Conv_1`;
3. the closest name among leaves of the same leaf name and fitting shape; where two
   candidates tie, the target is listed as ambiguous, never guessed.

Only leaves whose shapes some transform makes equal are paired; then each kind of module
gets one transform (`transforms.choose`).
"""

from __future__ import annotations

from collections import defaultdict

from inspector.core import nodes
from inspector.core.packed import PackedTree
from inspector.core.port import transforms
from inspector.core.port.alignment import Alignment, Ambiguity, Pair, with_kind_perms
from inspector.core.port.paths import leaves
from inspector.core.port.tokens import BOOKKEEPING, Tokens, natural_order, of, split

_FUZZY_CAP = 40_000  # candidate pairs per bucket in pass 3 before it narrows by numbers


class _Side:
    """One tree's array leaves: paths, shapes, dtypes and their parsed key paths."""

    def __init__(self, tree, word_ids: dict):
        paths, keys, specs, _ = leaves(tree)
        keep = [i for i, s in enumerate(specs) if s is not None]
        if len(keep) < len(paths):
            paths, keys, specs = ([x[i] for i in keep] for x in (paths, keys, specs))
        self.paths = paths
        self.shapes = [s[0] for s in specs]
        self.dtypes = [s[1] for s in specs]
        parsed = [split(k) for k in keys]
        self.parsed = [p for p, _ in parsed]       # (words, leaf, template, n_module), shared
        self.numbers = [n for _, n in parsed]      # digit strings
        # Small ints for what repeats (hashing ints, not tuples, 100,000 times): the parse,
        # the words (ids shared by both sides: `word_ids`), the (shape, dtype)
        by_id: dict[int, int] = {}
        self.unique: list[tuple] = []
        for p in self.parsed:
            if id(p) not in by_id:
                by_id[id(p)] = len(self.unique)
                self.unique.append(p)
        self.pid = [by_id[id(p)] for p in self.parsed]
        words = [word_ids.setdefault(p[0], len(word_ids)) for p in self.unique]
        self.wid = [words[i] for i in self.pid]
        spec_ids: dict = {}
        self.sid = [spec_ids.setdefault(spec, len(spec_ids)) for spec in specs]
        fit_cache: dict = {}
        self.fit_keys = [fit_cache.get(s) or fit_cache.setdefault(s, _fit_key(s))
                         for s in self.shapes]
        self._tokens: dict[int, Tokens] = {}

    def tokens(self, i: int) -> Tokens:
        t = self._tokens.get(i)
        if t is None:
            t = self._tokens[i] = of(self.parsed[i], self.numbers[i])
        return t

    def name(self, i: int) -> str:
        """The leaf's own name, spelled one way (`w`, `bias`, `mean`)."""
        words = self.parsed[i][0]
        return words[-1] if words else ""

    def leaf(self, i: int) -> str:
        return self.parsed[i][1]

    def specs(self) -> tuple:
        return tuple(zip(self.paths, self.shapes, self.dtypes, strict=True))


def _fit_key(shape: tuple) -> tuple:
    """Equal for two shapes some transform makes equal: (sorted non-singleton dims, rank,
    the non-singleton dims in order): the rank and order matter only to a reshape."""
    return transforms.compatible_key(shape), len(shape), tuple(d for d in shape if d != 1)


def _fits(a: tuple, b: tuple) -> bool:
    return a is b or (a[0] == b[0] and (a[1] == b[1] or a[2] == b[2]))


class _Matcher:
    def __init__(self, s: _Side, t: _Side):
        self.s, self.t = s, t
        self.match: dict[int, tuple[int, float, str]] = {}  # target -> (source, score, why)
        self.used: set[int] = set()
        self.ambiguous: dict[int, Ambiguity] = {}

    def fits(self, ti: int, si: int) -> bool:
        """Whether some transform turns the source leaf's shape into the target's."""
        return _fits(self.t.fit_keys[ti], self.s.fit_keys[si])

    def pair(self, ti: int, si: int, score: float, why: str) -> None:
        self.match[ti] = (si, score, why)
        self.used.add(si)

    def free_targets(self) -> list[int]:
        return [i for i in range(len(self.t.paths))
                if i not in self.match and i not in self.ambiguous]

    def free_sources(self) -> list[int]:
        return [i for i in range(len(self.s.paths)) if i not in self.used]

    # pass 1 --------------------------------------------------------------------------------

    def by_name(self) -> None:
        s_words, t_words = defaultdict(list), defaultdict(list)
        exact: dict[tuple, list] = defaultdict(list)
        for i, (w, numbers) in enumerate(zip(self.s.wid, self.s.numbers, strict=True)):
            s_words[w].append(i)
            exact[w, numbers].append(i)
        for i, w in enumerate(self.t.wid):
            t_words[w].append(i)
        for w, t_idx in t_words.items():
            s_idx = s_words.get(w)
            if not s_idx:
                continue
            # The common case first: both trees number this name alike, one leaf each
            if len(t_idx) == len(s_idx) and self._exact(w, t_idx, exact):
                continue
            self._bucket(t_idx, s_idx)

    def _exact(self, w: int, t_idx: list[int], exact: dict) -> bool:
        """Pairs every target of a name with the one source of that name and its numbers, if
        each has exactly one that fits; else pairs none and returns False."""
        t_numbers, s_fit, t_fit = self.t.numbers, self.s.fit_keys, self.t.fit_keys
        got = []
        for ti in t_idx:
            f = exact.get((w, t_numbers[ti]))
            if f is None or len(f) != 1 or not _fits(t_fit[ti], s_fit[f[0]]):
                return False
            got.append(f[0])
        if len(set(got)) != len(got):
            return False
        same = "same name"
        for ti, si in zip(t_idx, got, strict=True):
            self.match[ti] = (si, 1.0, same)
        self.used.update(got)
        return True

    def _bucket(self, t_idx: list[int], s_idx: list[int]) -> None:
        s_num = defaultdict(list)
        for i in s_idx:
            s_num[self.s.numbers[i]].append(i)
        t_numbers = {self.t.numbers[i] for i in t_idx}
        same_numbering = t_numbers == set(s_num)
        if same_numbering or len(t_idx) != len(s_idx):
            score = 1.0 if same_numbering else 0.95
            why = "same name" if same_numbering else \
                "same name and numbers (numbered differently elsewhere in the trees)"
            for ti in t_idx:
                cands = [si for si in s_num.get(self.t.numbers[ti], ())
                         if si not in self.used and self.fits(ti, si)]
                if len(cands) == 1:
                    self.pair(ti, cands[0], score, why)
                elif len(cands) > 1:
                    self.ambiguous[ti] = Ambiguity(
                        self.t.paths[ti], tuple(self.s.paths[si] for si in cands), score,
                        f"{len(cands)} source leaves have the same name once spelled one way")
        rest_t = [i for i in t_idx if i not in self.match and i not in self.ambiguous]
        rest_s = [i for i in s_idx if i not in self.used]
        self._by_order(rest_t, rest_s, 0.9, "same name, numbers matched by order")

    def _by_order(self, t_idx, s_idx, score, why) -> None:
        """Pairs two lists of leaves in numeric path order if they are equally many and every
        pair fits; else, the same within each group of fitting shapes."""
        if not t_idx or len(t_idx) != len(s_idx):
            return
        t_sorted = sorted(t_idx, key=lambda i: natural_order(self.t.tokens(i)))
        s_sorted = sorted(s_idx, key=lambda i: natural_order(self.s.tokens(i)))
        if all(self.fits(ti, si) for ti, si in zip(t_sorted, s_sorted, strict=True)):
            n = len(t_sorted)
            for k, (ti, si) in enumerate(zip(t_sorted, s_sorted, strict=True)):
                self.pair(ti, si, score, f"{why} ({_ordinal(k + 1)} of {n})")
            return
        t_groups, s_groups = defaultdict(list), defaultdict(list)
        for i in t_sorted:
            t_groups[self.t.fit_keys[i][0]].append(i)
        for i in s_sorted:
            s_groups[self.s.fit_keys[i][0]].append(i)
        if len(t_groups) > 1:
            for key, group in t_groups.items():
                self._by_order(group, s_groups.get(key, []), score,
                               f"{why}, among leaves of fitting shape")

    # pass 2 --------------------------------------------------------------------------------

    def by_module_order(self) -> None:
        t_mods = _modules(self.t, self.free_targets())
        s_mods = _modules(self.s, self.free_sources())
        t_kinds, s_kinds = defaultdict(list), defaultdict(list)
        for mod, members in t_mods.items():
            t_kinds[_kind(self.t, members)].append(mod)
        for mod, members in s_mods.items():
            s_kinds[_kind(self.s, members)].append(mod)
        for kind, t_list in t_kinds.items():
            s_list = s_kinds.get(kind)
            if not kind or not s_list:
                continue
            if len(t_list) != len(s_list):  # narrow to modules of the same shapes
                t_by, s_by = defaultdict(list), defaultdict(list)
                for m in t_list:
                    t_by[_shape_kind(self.t, t_mods[m])].append(m)
                for m in s_list:
                    s_by[_shape_kind(self.s, s_mods[m])].append(m)
                groups = [(t_by[k], s_by[k]) for k in t_by if len(t_by[k]) == len(s_by[k])]
            else:
                groups = [(t_list, s_list)]
            for t_group, s_group in groups:
                self._modules_by_order(t_group, s_group, t_mods, s_mods, kind)

    def _modules_by_order(self, t_group, s_group, t_mods, s_mods, kind) -> None:
        t_group, s_group = sorted(t_group, key=_natural), sorted(s_group, key=_natural)
        pairs = []
        for tm, sm in zip(t_group, s_group, strict=True):
            s_by_name = {(self.s.name(i), len(self.s.shapes[i])): i
                         for i in s_mods[sm] if self.s.leaf(i) not in BOOKKEEPING}
            for ti in t_mods[tm]:
                si = s_by_name.get((self.t.name(ti), len(self.t.shapes[ti])))
                if si is None or not self.fits(ti, si):
                    return  # the order does not line up: leave them to pass 3
                pairs.append((ti, si, tm, sm))
        n = len(t_group)
        what = "/".join(sorted(name for name, _ in kind))
        rank = {tm: k for k, tm in enumerate(t_group)}
        for ti, si, tm, _ in pairs:
            self.pair(ti, si, 0.8, f"numbered siblings matched by order: {_ordinal(rank[tm] + 1)}"
                                   f" of {n} modules holding {what}")

    # pass 3 --------------------------------------------------------------------------------

    def by_closest_name(self) -> None:
        t_free, s_free = self.free_targets(), self.free_sources()
        t_b, s_b = defaultdict(list), defaultdict(list)
        for i in t_free:
            t_b[self.t.name(i), self.t.fit_keys[i][0]].append(i)
        for i in s_free:
            s_b[self.s.name(i), self.s.fit_keys[i][0]].append(i)
        for key, t_idx in t_b.items():
            s_idx = s_b.get(key)
            if not s_idx:
                continue
            if len(t_idx) * len(s_idx) > _FUZZY_CAP:
                s_num = defaultdict(list)
                for i in s_idx:
                    s_num[self.s.numbers[i]].append(i)
                for ti in t_idx:
                    self._closest(ti, s_num.get(self.t.numbers[ti], []))
            else:
                best = sorted(((max((_similarity(self.t.tokens(ti), self.s.tokens(si))
                                     for si in s_idx), default=0.0), ti) for ti in t_idx),
                              reverse=True)
                for _, ti in best:
                    self._closest(ti, s_idx)

    def _closest(self, ti: int, s_idx: list[int]) -> None:
        scored = [(_similarity(self.t.tokens(ti), self.s.tokens(si)), si) for si in s_idx
                  if si not in self.used and self.fits(ti, si)]
        scored = [(sc, si) for sc, si in scored if sc > 0]
        if not scored:
            return
        top = max(sc for sc, _ in scored)
        cands = [si for sc, si in scored if sc == top]
        score = round(0.7 * top, 3)
        if len(cands) == 1:
            self.pair(ti, cands[0], score, f"closest name ({top:.0%} of the path's words shared)")
        else:
            self.ambiguous[ti] = Ambiguity(
                self.t.paths[ti], tuple(self.s.paths[si] for si in cands), score,
                f"{len(cands)} source leaves are equally close ({top:.0%} of the words shared)")


def _modules(side: _Side, idx: list[int]) -> dict[tuple, list[int]]:
    mods = defaultdict(list)
    for i in idx:
        mods[side.tokens(i).module].append(i)
    return mods


def _kind(side: _Side, members: list[int]) -> frozenset:
    """A module's kind: its leaves' names and ranks (bookkeeping leaves left out)."""
    return frozenset((side.name(i), len(side.shapes[i])) for i in members
                     if side.leaf(i) not in BOOKKEEPING and side.name(i))


def _shape_kind(side: _Side, members: list[int]) -> tuple:
    return tuple(sorted((side.name(i), side.fit_keys[i]) for i in members
                        if side.leaf(i) not in BOOKKEEPING and side.name(i)))


def _natural(module: tuple) -> tuple:
    return tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in module)


def _similarity(a, b) -> float:
    """Shared share of the two paths' module tokens (numbers as `#n`)."""
    x = {p if isinstance(p, str) else f"#{p}" for p in a.module}
    y = {p if isinstance(p, str) else f"#{p}" for p in b.module}
    if not x and not y:
        return 1.0
    return len(x & y) / len(x | y)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def align(source, target) -> Alignment:
    """Returns the `Alignment` of `target`'s leaves with `source`'s: for each target leaf, the
    source leaf it comes from and the layout transform that makes it fit.

    Reads key paths, shapes and dtypes only (lazy checkpoints are not read). Which leaves pair
    is decided from the paths (see the module docstring) and the shapes; the transform per
    kind of module (torch `weight` -> Flax `kernel` rank 2: transpose (1, 0), also for square
    kernels; Conv2d: (2, 3, 1, 0); embeddings and norms: none).

    Args:
        source: the tree the weights come from (a flat torch-style state dict, a loaded
            checkpoint, any pytree).
        target: the tree they go to (the model's parameters, or its abstract shapes).

    >>> import numpy as np
    >>> src = {"fc.weight": np.zeros((3, 2)), "fc.bias": np.zeros(3)}
    >>> dst = {"Dense_0": {"kernel": np.zeros((2, 3)), "bias": np.zeros(3)}}
    >>> for p in align(src, dst).pairs:
    ...     print(p.target, "<-", p.source, p.transform)
    ['Dense_0']['bias'] <- ['fc.bias'] none
    ['Dense_0']['kernel'] <- ['fc.weight'] transpose (1, 0)
    """
    word_ids: dict = {}
    s, t = _Side(source, word_ids), _Side(target, word_ids)
    m = _Matcher(s, t)
    m.by_name()
    m.by_module_order()
    m.by_closest_name()
    pairs, perms = _with_transforms(s, t, m.match)
    unmatched_t = tuple(t.paths[i] for i in range(len(t.paths))
                        if i not in m.match and i not in m.ambiguous)
    treedef = target.treedef if isinstance(target, PackedTree) else nodes.flatten(target)[1]
    return with_kind_perms(Alignment(
        pairs=pairs,
        unmatched_source=tuple(s.paths[i] for i in m.free_sources()),
        unmatched_target=unmatched_t,
        ambiguous=tuple(m.ambiguous[i] for i in sorted(m.ambiguous)),
        targets=t.specs(), sources=s.specs(), treedef=treedef), perms)


def _with_transforms(s: _Side, t: _Side, match: dict) -> tuple[tuple[Pair, ...], dict]:
    """The pairs with their transforms, one transform per kind of module (`choose`). Pairs
    are grouped by what decides their transform and reason (parses, shapes, dtypes, why), so
    the work per pair is a dictionary lookup and the `Pair` itself."""
    groups: dict[tuple, list] = defaultdict(list)
    s_sid, t_sid, s_pid, t_pid = s.sid, t.sid, s.pid, t.pid
    for ti, (si, score, why) in match.items():
        groups[s_sid[si], t_sid[ti], s_pid[si], t_pid[ti], score, why].append((ti, si))
    kinds: dict[tuple, dict] = defaultdict(dict)
    info = {}
    for key, members in groups.items():
        ti, si = members[0]
        sshape, tshape = s.shapes[si], t.shapes[ti]
        kind = (s.leaf(si), t.leaf(ti), len(sshape), len(tshape))
        shapes = kinds[kind]
        shapes[sshape, tshape] = shapes.get((sshape, tshape), 0) + len(members)
        info[key] = (kind, sshape, tshape, s.dtypes[si], t.dtypes[ti])
    chosen = {kind: transforms.choose(kind, shapes) for kind, shapes in kinds.items()}
    out: list = [None] * len(t.paths)
    paths_t, paths_s = t.paths, s.paths
    for key, members in groups.items():
        kind, sshape, tshape, sdtype, tdtype = info[key]
        score, why = key[4], key[5]
        perm, perm_why = chosen[kind]
        tr = transforms.for_pair(sshape, tshape, sdtype, tdtype, perm)
        if tr.kind == transforms.TRANSPOSE and tr.perm != perm:
            perm_why = "the only layout this pair fits (its kind uses another)"
        reason = why if tr.kind == transforms.NONE else f"{why}; {tr}: {perm_why}"
        for ti, si in members:
            out[ti] = Pair(paths_t[ti], paths_s[si], tr, score, reason)
    perms = {kind: perm for kind, (perm, _) in chosen.items() if perm is not None}
    return tuple(p for p in out if p is not None), perms
