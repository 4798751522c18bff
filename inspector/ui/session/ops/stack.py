"""Stack settings: the trees to stack along a new leading axis, in order."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import param

import inspector
from inspector.ui.session.eager import place
from inspector.ui.session.formatting import human_bytes, plural, shape_text
from inspector.ui.session.loaded import SetupError, pick
from inspector.ui.session.op_settings import (
    PREVIEW_LINES,
    OpSettings,
    Preview,
    clip,
    register,
    structure_error,
)
from inspector.ui.session.records import CallRecord
from inspector.ui.session.tree_index import ROOT_ID


@register
class StackSettings(OpSettings):
    """K trees of one structure to one tree whose leaves carry a leading model axis."""

    op = "stack"
    title = "Stack"
    position = 30

    trees = param.List(default=[], item_type=str, doc="Names of the trees to stack, in order.")

    def uses(self) -> list[str]:
        return list(self.trees)

    def forget(self, name: str) -> None:
        self.trees = [n for n in self.trees if n != name]

    def move(self, i: int, step: int) -> None:
        """Moves the `i`-th tree of the order by `step` places (-1 earlier, +1 later)."""
        names = list(self.trees)
        j = i + step
        if 0 <= i < len(names) and 0 <= j < len(names):
            names[i], names[j] = names[j], names[i]
            self.trees = names

    def apply(self, values: dict, names: dict, trees: dict) -> list[str]:
        self.trees = [names.get(n, n) for n in values["trees"]]
        return []

    def describe(self, loaded):
        names = list(self.trees)
        if not names:
            raise SetupError("Pick the trees to stack (one or more), in order.")
        return CallRecord("stack", f"stack({', '.join(names)})", names), ", ".join(names)

    def arguments(self, trees, options):
        return inspector.stack, (list(trees),), {}

    def eager(self, trees, options):
        def make(device):
            placed = [place(t, device) for t in trees]
            return lambda: jax.tree.map(lambda *xs: jnp.stack(xs), *placed)

        return make

    def output_bytes(self, trees):
        return sum(inspector.describe(t)[0].nbytes for t in trees)  # K trees side by side

    def preview(self, trees: dict) -> Preview:
        try:
            loaded = pick(trees, self.trees)
        except SetupError as e:
            return Preview("", str(e))
        if not loaded:
            return Preview("", "Pick the trees to stack (one or more), in order.")
        error = structure_error([t.tree for t in loaded], inspector.stack)
        if error:
            return Preview("", error)
        k = len(loaded)
        index = loaded[0].index
        root = index.rows[0]
        rows = [index.rows[j] for j in list(index.leaf_number)[:PREVIEW_LINES]]
        lines = [f"{r.path or ROOT_ID}: {shape_text(r.dtype, r.shape)} → "
                 f"{shape_text(r.dtype, (k, *r.shape))}" for r in rows]
        head = f"{plural(k, 'tree')} → one tree of {plural(root.n_leaves, 'leaf', 'leaves')} " \
            f"({human_bytes(k * root.nbytes)}):"
        return Preview(clip(head, lines, root.n_leaves), "")

    @classmethod
    def code(cls, call: CallRecord, names: list[str], writer) -> str:
        return f"inspector.stack([{', '.join(names)}])"
