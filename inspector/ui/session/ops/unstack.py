"""Unstack settings: the tree to split along its leading axis (the inverse of stack)."""

from __future__ import annotations

import jax
import param

import inspector
from inspector.ui.session.eager import place
from inspector.ui.session.formatting import plural, shape_text
from inspector.ui.session.loaded import SetupError, pick
from inspector.ui.session.op_settings import PREVIEW_LINES, OpSettings, Preview, clip, register
from inspector.ui.session.records import CallRecord
from inspector.ui.session.tree_index import ROOT_ID


@register
class UnstackSettings(OpSettings):
    """One tree whose leaves share a leading size K, split into a list of K trees."""

    op = "unstack"
    title = "Unstack"
    position = 40
    follows_selection = True

    tree = param.String(default="", doc="Name of the tree to split (the selected input tree).")

    def describe(self, loaded):
        return CallRecord("unstack", f"unstack({self.tree})", [self.tree]), self.tree

    def arguments(self, trees, options):
        return inspector.unstack, (trees[0],), {}

    def eager(self, trees, options):
        def make(device):
            placed = place(trees[0], device)
            k = jax.tree.leaves(placed)[0].shape[0]
            return lambda: [jax.tree.map(lambda x, i=i: x[i], placed) for i in range(k)]

        return make

    def results(self, result):
        return [(f"[{i}]", tree) for i, tree in enumerate(result)]  # one tree per slice

    def preview(self, trees: dict) -> Preview:
        name = self.tree
        try:
            (loaded,) = pick(trees, [name])
        except SetupError as e:
            return Preview("", str(e))
        index = loaded.index
        leaves = [index.rows[j] for j in index.leaf_number]
        sizes = {r.shape[0] for r in leaves if r.shape}
        if not leaves or len(sizes) != 1 or any(not r.shape for r in leaves):
            try:
                inspector.Op.of(inspector.unstack).plan(loaded.tree)
            except inspector.InspectorError as e:
                return Preview("", str(e))
            return Preview("", f"Cannot unstack {name}.")
        k = sizes.pop()
        lines = [f"{r.path or ROOT_ID}: {shape_text(r.dtype, r.shape)} → "
                 f"{shape_text(r.dtype, r.shape[1:])}" for r in leaves[:PREVIEW_LINES]]
        return Preview(clip(f"{name} → {plural(k, 'tree')}:", lines, len(leaves)), "")

    @classmethod
    def code(cls, call: CallRecord, names: list[str], writer) -> str:
        return f"inspector.unstack({names[0]})"
