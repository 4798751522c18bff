"""Index settings: one NumPy-style index per top-level subtree of the selected tree."""

from __future__ import annotations

import jax
import numpy as np
import param

import inspector
from inspector.ui.session.eager import place
from inspector.ui.session.formatting import plural, shape_text
from inspector.ui.session.loaded import LoadedTree, SetupError, pick
from inspector.ui.session.op_settings import OpSettings, Preview, clip, register
from inspector.ui.session.records import CallRecord
from inspector.ui.session.tree_index import ROOT_ID, TreeIndex


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
    tree = loaded.tree
    if isinstance(tree, inspector.PackedTree):
        tree = tree.treedef.unflatten([None] * tree.n_leaves)
    values, treedef = jax.tree_util.tree_flatten(tree, is_leaf=lambda n: n is not tree)
    ids = [index.rows[i].path for i in index.row_children(0)]
    return treedef.unflatten([parsed.get(i) for i in ids])


@register
class IndexSettings(OpSettings):
    """A different index for each top-level subtree of one tree (`:` keeps a subtree)."""

    op = "index"
    title = "Index"
    position = 20
    follows_selection = True

    tree = param.String(default="", doc="Name of the tree to index (the selected input tree).")
    texts = param.Dict(default={}, doc="Per tree name: index text per top-level subtree id "
                       "(`['a']`, `[0]`; ':' keeps the subtree).")

    def set_text(self, field: str, text: str) -> None:
        """Sets the index text of one field (a top-level key path) of the tree."""
        self.texts = {**self.texts, self.tree: {**self.texts.get(self.tree, {}), field: text}}

    def current(self) -> dict:
        """The index texts of the tree, by field id."""
        return self.texts.get(self.tree, {})

    def apply(self, values: dict, names: dict, trees: dict) -> list[str]:
        texts = dict(self.texts)
        for tree_name, given in values["texts"].items():
            tree_name = names.get(tree_name, tree_name)
            index = trees[tree_name].index
            fields = {f for f, _ in index_fields(index)}
            ids = [index.rows[i].path for i in index.row_children(0)] or [ROOT_ID]
            texts[tree_name] = {i: v for i, v in zip(ids, given, strict=False) if i in fields}
        self.texts = texts
        return [names.get(n, n) for n in values["texts"]]

    def describe(self, loaded):
        name = self.tree
        texts = self.current()
        index_tree = index_tree_for(loaded[0], texts)
        shown = ", ".join(f"{k}={v}" for k, v in texts.items() if (v or ":").strip() != ":")
        call = CallRecord("index", f"index({name})", [name], {"index": index_tree})
        return call, f"{name} · {shown or 'keep all'}"

    def arguments(self, trees, options):
        return inspector.index, (trees[0], options["index"]), {}

    def eager(self, trees, options):
        index_tree = options["index"]

        def make(device):
            placed = place(trees[0], device)

            def subtree(text, sub):
                if text is None:
                    return sub
                idx = inspector.parse_index(text)
                return jax.tree.map(lambda x: x[idx], sub)

            return lambda: jax.tree.map(subtree, index_tree, placed, is_leaf=lambda x: x is None)

        return make

    def preview(self, trees: dict) -> Preview:
        name = self.tree
        try:
            (loaded,) = pick(trees, [name])
        except SetupError as e:
            return Preview("", str(e))
        texts = self.current()
        index = loaded.index
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
            changes: dict = {}
            for j in _leaf_rows(index, index.row_of(node_id)):
                row = index.rows[j]
                if row.shape is None:
                    problems.append(f"{row.path or ROOT_ID}: a {row.type_name} leaf cannot be "
                                    "indexed")
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
            error = (f"Cannot index {name}: {plural(len(problems), 'leaf does', 'leaves do')} "
                     "not fit the index.\n" + "\n".join(f"  - {p}" for p in problems[:50]))
        if not lines and not error:
            return Preview("Every subtree is kept whole (':').", "", field_errors)
        return Preview(clip("Result shapes:", lines), error, field_errors)

    @classmethod
    def code(cls, call: CallRecord, names: list[str], writer) -> str:
        return f"inspector.index({names[0]}, {writer.prefix(names[0], call.options['index'])})"


def _leaf_rows(index: TreeIndex, i: int):
    stack = [i]
    while stack:
        j = stack.pop()
        if index.rows[j].kind == "leaf":
            yield j
        else:
            stack.extend(reversed(index.row_children(j)))


def _indexed_shape(shape, idx) -> tuple:
    # A zero-stride view: indexing it costs nothing and raises NumPy's own errors.
    return np.broadcast_to(np.empty((), np.int8), shape)[idx].shape
