"""`LoadedTree`: a tree in a session, described, packed and indexed once (`prepare`)."""

from __future__ import annotations

from dataclasses import dataclass

import inspector
from inspector.ui.session.origins import Origin, origin_of
from inspector.ui.session.tree_index import TreeIndex, index_for


@dataclass(frozen=True)
class LoadedTree:
    """A tree loaded into a session (shared read-only between sessions when it is an example).

    Attributes:
        name: the name shown in the app (unique within a session).
        tree: the pytree, or a `PackedTree` when every leaf is an array (`inspector.pack`),
            so a weighted sum of such trees is one kernel per dtype.
        origin: where it came from, as a record (`origins.File`, `Url`, `Upload`,
            `Example`, `Sharded`, `Result`, ...): copy-as-code reads it; `source` is its text
            (`example S1`, `result of stack(...)`).
        n_leaves, n_params, nbytes: totals over the tree.
        info: what its file says beside the tensors (`inspector.file_info`: GGUF metadata,
            a sharded index's problems), for a tree opened from a file; else None.
    """

    name: str
    tree: object
    origin: Origin
    n_leaves: int
    n_params: int
    nbytes: int
    info: object = None

    def __post_init__(self):
        object.__setattr__(self, "origin", origin_of(self.origin))  # a text: a plain Origin

    @property
    def source(self) -> str:
        """Where it came from, in words (the sidebar's text)."""
        return self.origin.text

    @property
    def index(self) -> TreeIndex:
        return index_for(self.tree)

    @property
    def packed(self) -> bool:
        return isinstance(self.tree, inspector.PackedTree)


def prepare(name: str, tree, source: Origin | str, info=None) -> LoadedTree:
    """Describes, packs and indexes `tree`: the slow part of a load. `source`: where it came
    from (an `Origin`; a text is a plain `Origin` of that text).

    In-memory trees whose leaves are all arrays are packed (a weighted sum of packed trees is
    one kernel per dtype). Checkpoints opened from disk keep their lazy leaves: their
    structure shows at once, and operations stream them leaf by leaf.
    """
    if isinstance(tree, inspector.PackedTree):
        rows = index_for(tree).rows
    else:
        import jax

        rows = inspector.describe(tree)
        # lazy checkpoints stream; sharded trees keep their layout (packing gathers to host)
        if not any(isinstance(x, inspector.LazyArray) or is_sharded(x)
                   for x in jax.tree.leaves(tree)):
            try:
                tree = inspector.pack(tree)
            except inspector.UnsupportedLeafError:
                pass  # strings or objects among the leaves: keep the tree as it is
        index_for(tree, rows)
    root = rows[0]
    return LoadedTree(name, tree, source, root.n_leaves, root.n_params, root.nbytes, info)


def is_sharded(leaf) -> bool:
    """Whether a leaf is a JAX array laid out over a mesh (`inspector.shard`)."""
    import jax

    return isinstance(getattr(leaf, "sharding", None), jax.sharding.NamedSharding)


class SetupError(inspector.InspectorError):
    """The settings are not filled in enough to run (no trees picked, a path outside the root)."""


def pick(loaded: dict, names) -> list[LoadedTree]:
    """The loaded trees of these names, in order.

    Raises:
        SetupError: some name is not loaded.
    """
    missing = [n for n in names if n not in loaded]
    if missing:
        raise SetupError(f"No loaded tree named {', '.join(map(repr, missing))}.")
    return [loaded[n] for n in names]
