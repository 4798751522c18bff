"""A session's operation settings turned into runnable jobs, and into previews before running.

The forms hold text and numbers (tree names, weights, index text); this module turns them into
calls of the public API (`inspector.weighted_sum`, `index`, `stack`, `unstack`) and says what
a call will produce (result dtypes, shapes) from the trees' rows alone, cheaply enough to run
on every keystroke. The core validates again when the job runs, and its error is the one
shown after a failed run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import inspector
from inspector.ui.formatting import human_bytes, plural, shape_text
from inspector.ui.tree_index import ROOT_ID, TreeIndex, index_for

OPS = {"weighted_sum": "Weighted sum", "index": "Index", "stack": "Stack", "unstack": "Unstack"}
_PREVIEW_LINES = 8


@dataclass(frozen=True)
class LoadedTree:
    """A tree loaded into a session (shared read-only between sessions when it is an example).

    Attributes:
        name: the name shown in the app (unique within a session).
        tree: the pytree, or a `PackedTree` when every leaf is an array (`inspector.pack`),
            so a weighted sum of such trees is one kernel per dtype.
        source: where it came from (`example: S1: weighted sum`, `result of stack(...)`).
        n_leaves, n_params, nbytes: totals over the tree.
    """

    name: str
    tree: object
    source: str
    n_leaves: int
    n_params: int
    nbytes: int

    @property
    def index(self) -> TreeIndex:
        return index_for(self.tree)

    @property
    def packed(self) -> bool:
        return isinstance(self.tree, inspector.PackedTree)


def prepare(name: str, tree, source: str) -> LoadedTree:
    """Describes, packs and indexes `tree`: the slow part of a load.

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
    return LoadedTree(name, tree, source, root.n_leaves, root.n_params, root.nbytes)


def is_sharded(leaf) -> bool:
    """Whether a leaf is a JAX array laid out over a mesh (`inspector.shard`)."""
    import jax

    return isinstance(getattr(leaf, "sharding", None), jax.sharding.NamedSharding)


@dataclass(frozen=True)
class Job:
    """One run to make: `fn(*args)` through `inspector.run`, plus its un-jitted reference.

    Attributes:
        op: the op's name (`weighted_sum`).
        fn: the public op.
        args: its arguments.
        label: the result's name (`weighted_sum(t1, t2, t3)`).
        inputs: a one-line summary for the history (`t1, t2, t3 · weights 1, 2, 3`).
        eager: the same op as an eager `jax.tree.map` over device-placed inputs (for timing).
    """

    op: str
    fn: Callable
    args: tuple
    label: str
    inputs: str
    eager: Callable = field(repr=False, default=None)


class SetupError(inspector.InspectorError):
    """The form is not filled in enough to run (no trees picked, ...)."""


def run_weights(values) -> list:
    """Weights as the core should see them, exactly as typed: integers stay `int` (so int32
    trees stay int32, as in S1), anything else is the `float` it is, unrounded (an SGD step of
    `-1e-7` is `-1e-7`); `1.0` is a float, so int32 trees weighted by it give float32."""
    return [int(v) if isinstance(v, int | np.integer) else float(v) for v in values]


def _trees(loaded: dict, names) -> list:
    missing = [n for n in names if n not in loaded]
    if missing:
        raise SetupError(f"No loaded tree named {', '.join(map(repr, missing))}.")
    return [loaded[n] for n in names]


# weighted sum ---------------------------------------------------------------------------------

def weighted_sum_job(loaded: dict, names, weights) -> Job:
    """The weighted sum of the named trees with these weights (one per tree)."""
    if len(names) < 2:
        raise SetupError("Pick two or more trees for a weighted sum.")
    trees = _trees(loaded, names)
    ws = run_weights(weights)
    inputs = [t.tree for t in trees]

    def eager(device):
        from inspector.ui.eager import eager_weighted_sum

        return eager_weighted_sum(inputs, ws, device)

    return Job("weighted_sum", inspector.weighted_sum, (inputs, ws),
               f"weighted_sum({', '.join(names)})",
               f"{', '.join(names)} · weights {', '.join(map(str, ws))}", eager)


def weighted_sum_preview(loaded: dict, names, weights) -> tuple[str, str]:
    """Returns `(preview, error)`: the result dtype of each leaf dtype, or why it cannot run."""
    try:
        trees = _trees(loaded, names)
    except SetupError as e:
        return "", str(e)
    if len(trees) < 2:
        return "", "Pick two or more trees for a weighted sum."
    if len(weights) != len(trees):
        return "", f"Got {len(trees)} trees and {len(weights)} weights: give one weight per tree."
    error = _structure_error([t.tree for t in trees], inspector.weighted_sum, list(weights))
    ws = run_weights(weights)
    counts: dict[str, int] = {}
    for row in trees[0].index.rows:
        if row.kind == "leaf" and row.dtype:
            counts[row.dtype] = counts.get(row.dtype, 0) + 1
    lines = []
    for dtype, n in counts.items():
        try:
            out = str(inspector.weighted_sum_dtype(dtype, ws))
        except TypeError:
            out = "not numeric"
        lines.append(f"{dtype} → {out}  ({plural(n, 'leaf', 'leaves')})")
    total = sum(w for w in ws)
    lines.append(f"weights sum to {total:.6g}")
    return "Result dtypes:\n" + "\n".join(lines), error


def _structure_error(trees: list, op, *extra) -> str:
    """The core's own validation message for these trees, or '' when they match."""
    if all(isinstance(t, inspector.PackedTree) for t in trees) and all(
            t.layout == trees[0].layout for t in trees[1:]):
        return ""  # planning would allocate the output buffer: too dear on every keystroke
    try:
        inspector.Op.of(op).plan(trees, *extra)
    except inspector.InspectorError as e:
        return str(e)
    return ""


# index ----------------------------------------------------------------------------------------

def index_fields(index: TreeIndex) -> list[tuple[str, str]]:
    """The index fields of a tree: `(id, label)` per top-level subtree (`ROOT_ID` for a leaf
    root). None subtrees get no field (None keeps them)."""
    root = index.rows[0]
    if root.kind == "leaf":
        return [(ROOT_ID, f"(root) {shape_text(root.dtype, root.shape)}")]
    out = []
    for i in index.children[0]:
        row = index.rows[i]
        if row.kind == "None":
            continue
        what = shape_text(row.dtype, row.shape) if row.kind == "leaf" else \
            f"{row.type_name}, {plural(row.n_leaves, 'leaf', 'leaves')}"
        out.append((row.path, f"{row.key}  {what}"))
    return out


def parse_field(text: str):
    """Parses one index field: `':'` or blank keeps the subtree (None); else `parse_index`."""
    text = (text or "").strip()
    if text in ("", ":", "..."):
        return None
    return inspector.parse_index(text)


def index_tree_for(loaded: LoadedTree, texts: dict):
    """Builds the index tree (a prefix of the tree, one entry per top-level subtree).

    Entries are the texts themselves (the core parses them: a parsed tuple facing a tuple
    subtree would read as structure), or None where the field keeps its subtree.

    Raises:
        IndexParseError: a field cannot be parsed; the message names its key path.
    """
    index = loaded.index
    parsed, errors = {}, []
    for node_id, _ in index_fields(index):
        text = texts.get(node_id, ":")
        try:
            parsed[node_id] = None if parse_field(text) is None else text.strip()
        except inspector.IndexParseError as e:
            errors.append(f"{node_id}: {str(e).splitlines()[0]}")
    if errors:
        raise inspector.IndexParseError(
            f"Cannot parse {plural(len(errors), 'index', 'indices')}.\n"
            + "\n".join(f"  - {line}" for line in errors))
    if index.rows[0].kind == "leaf":
        return parsed[ROOT_ID]
    import jax

    tree = loaded.tree
    if isinstance(tree, inspector.PackedTree):
        tree = tree.treedef.unflatten([None] * tree.n_leaves)
    values, treedef = jax.tree_util.tree_flatten(tree, is_leaf=lambda n: n is not tree)
    ids = [index.rows[i].path for i in index.children[0]]
    return treedef.unflatten([parsed.get(i) for i in ids])


def index_job(loaded: dict, name: str, texts: dict) -> Job:
    """Indexes the named tree with one index per top-level subtree."""
    (tree,) = _trees(loaded, [name])
    index_tree = index_tree_for(tree, texts)
    shown = ", ".join(f"{k}={v}" for k, v in texts.items() if (v or ":").strip() != ":")

    def eager(device):
        from inspector.ui.eager import eager_index

        return eager_index(tree.tree, index_tree, device)

    return Job("index", inspector.index, (tree.tree, index_tree), f"index({name})",
               f"{name} · {shown or 'keep all'}", eager)


def index_preview(loaded: dict, name: str, texts: dict) -> tuple[str, str, dict]:
    """Returns `(preview, error, field_errors)`: result shapes per top-level subtree,
    problems with their key paths, and each field's parse error (by field id)."""
    try:
        (tree,) = _trees(loaded, [name])
    except SetupError as e:
        return "", str(e), {}
    index = tree.index
    field_errors, lines, problems = {}, [], []
    for node_id, _ in index_fields(index):
        text = texts.get(node_id, ":")
        try:
            idx = parse_field(text)
        except inspector.IndexParseError as e:
            field_errors[node_id] = str(e)
            continue
        if idx is None:
            continue
        row_i = index.row_of(node_id)
        changes: dict = {}
        for j in _leaf_rows(index, row_i):
            row = index.rows[j]
            if row.shape is None:
                problems.append(f"{row.path or ROOT_ID}: a {row.type_name} leaf cannot be indexed")
                continue
            key = (row.dtype, row.shape)
            if key in changes:
                changes[key][1] += 1
                continue
            try:
                out = _indexed_shape(row.shape, idx)
            except (IndexError, ValueError, TypeError) as e:
                problems.append(f"{row.path or ROOT_ID}: {e} (shape {row.shape})")
                changes[key] = [None, 1]
                continue
            changes[key] = [out, 1]
        for (dtype, shape), (out, n) in changes.items():
            if out is not None:
                lines.append(f"{node_id} [{text.strip()}]: {shape_text(dtype, shape)} → "
                             f"{shape_text(dtype, out)}" + (f"  (×{n})" if n > 1 else ""))
    error = ""
    if field_errors:
        error = "Fix the index text of: " + ", ".join(field_errors)
    elif problems:
        error = (f"Cannot index {name}: {plural(len(problems), 'leaf does', 'leaves do')} not "
                 "fit the index.\n" + "\n".join(f"  - {p}" for p in problems[:50]))
    if not lines and not error:
        return "Every subtree is kept whole (':').", "", field_errors
    return _clip("Result shapes:", lines), error, field_errors


def _leaf_rows(index: TreeIndex, i: int):
    stack = [i]
    while stack:
        j = stack.pop()
        if index.rows[j].kind == "leaf":
            yield j
        else:
            stack.extend(reversed(index.children[j]))


def _indexed_shape(shape, idx) -> tuple:
    # A zero-stride view: indexing it costs nothing and raises NumPy's own errors.
    return np.broadcast_to(np.empty((), np.int8), shape)[idx].shape


# stack / unstack -------------------------------------------------------------------------------

def stack_job(loaded: dict, names) -> Job:
    """Stacks the named trees, in this order, along a new leading axis."""
    if not names:
        raise SetupError("Pick the trees to stack (one or more), in order.")
    trees = [t.tree for t in _trees(loaded, names)]

    def eager(device):
        from inspector.ui.eager import eager_stack

        return eager_stack(trees, device)

    return Job("stack", inspector.stack, (trees,), f"stack({', '.join(names)})",
               ", ".join(names), eager)


def stack_preview(loaded: dict, names) -> tuple[str, str]:
    """Returns `(preview, error)`: the stacked leaf shapes, or every mismatching key path."""
    try:
        trees = _trees(loaded, names)
    except SetupError as e:
        return "", str(e)
    if not trees:
        return "", "Pick the trees to stack (one or more), in order."
    error = _structure_error([t.tree for t in trees], inspector.stack)
    if error:
        return "", error
    k = len(trees)
    index = trees[0].index
    rows = [index.rows[j] for j in list(index.leaf_number)[:_PREVIEW_LINES]]
    lines = [f"{r.path or ROOT_ID}: {shape_text(r.dtype, r.shape)} → "
             f"{shape_text(r.dtype, (k, *r.shape))}" for r in rows]
    head = f"{plural(k, 'tree')} → one tree of {plural(index.rows[0].n_leaves, 'leaf', 'leaves')}" \
        f" ({human_bytes(k * index.rows[0].nbytes)}):"
    return _clip(head, lines, index.rows[0].n_leaves), ""


def unstack_job(loaded: dict, name: str) -> Job:
    """Splits the named tree along its leading axis into a list of trees."""
    (tree,) = _trees(loaded, [name])

    def eager(device):
        from inspector.ui.eager import eager_unstack

        return eager_unstack(tree.tree, device)

    return Job("unstack", inspector.unstack, (tree.tree,), f"unstack({name})", name, eager)


def unstack_preview(loaded: dict, name: str) -> tuple[str, str]:
    """Returns `(preview, error)`: how many trees come out and their shapes."""
    try:
        (tree,) = _trees(loaded, [name])
    except SetupError as e:
        return "", str(e)
    index = tree.index
    leaves = [index.rows[j] for j in index.leaf_number]
    sizes = {r.shape[0] for r in leaves if r.shape}
    if not leaves or len(sizes) != 1 or any(not r.shape for r in leaves):
        try:
            inspector.Op.of(inspector.unstack).plan(tree.tree)
        except inspector.InspectorError as e:
            return "", str(e)
        return "", f"Cannot unstack {name}."
    k = sizes.pop()
    lines = [f"{r.path or ROOT_ID}: {shape_text(r.dtype, r.shape)} → "
             f"{shape_text(r.dtype, r.shape[1:])}" for r in leaves[:_PREVIEW_LINES]]
    return _clip(f"{name} → {plural(k, 'tree')}:", lines, len(leaves)), ""


def _clip(head: str, lines: list, total: int | None = None) -> str:
    total = len(lines) if total is None else total
    shown = lines[:_PREVIEW_LINES]
    more = total - len(shown)
    return "\n".join([head, *shown] + ([f"… and {more:,} more"] if more > 0 else []))
