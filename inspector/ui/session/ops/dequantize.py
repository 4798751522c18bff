"""Dequantize settings: the tree whose quantized weights become plain arrays, and their dtype."""

from __future__ import annotations

import math

import jax
import numpy as np
import param

import inspector
from inspector.core.packed import unpacked
from inspector.core.quant.dequantize import stored_counts, stored_quantized
from inspector.ui.session.formatting import plural, shape_text
from inspector.ui.session.loaded import SetupError, pick
from inspector.ui.session.op_settings import PREVIEW_LINES, OpSettings, Preview, clip, register
from inspector.ui.session.records import CallRecord

DTYPES = ["bfloat16", "float16", "float32"]


@register
class DequantizeSettings(OpSettings):
    """One tree; each quantized weight (fp8, mxfp4, gptq, awq, a GGUF's Q4_K, ...) replaced
    by its values."""

    op = "dequantize"
    title = "Dequantize"
    position = 45
    follows_selection = True
    streams = True  # inspector.dequantize(..., out=)

    tree = param.String(default="", doc="Name of the tree to dequantize (the selected tree).")
    dtype = param.Selector(default="bfloat16", objects=DTYPES,
                           doc="The dtype of the dequantized weights.")

    def describe(self, loaded):
        call = CallRecord("dequantize", f"dequantize({self.tree}, {self.dtype})", [self.tree],
                          {"dtype": self.dtype})
        return call, f"{self.tree} · {self.dtype}"

    def arguments(self, trees, options):
        return inspector.dequantize, (trees[0], options["dtype"]), {}

    def output_bytes(self, trees):
        """The input's bytes with each usable group's members replaced by its weight in the
        chosen dtype."""
        tree = unpacked(trees[0])
        sizes = {r.path: r.nbytes for r in inspector.describe(tree) if r.kind == "leaf"}
        total = sum(sizes.values())
        itemsize = np.dtype(jax.dtypes.canonicalize_dtype(self.dtype)).itemsize
        for group in inspector.quant_groups(tree):
            if group.usable:
                total -= sum(sizes.get(p, 0) for p in group.members.values())
                total += math.prod(group.shape) * itemsize
        for leaf in stored_quantized(tree):  # float32 as read, written in the dtype
            total += math.prod(leaf.shape) * (itemsize - 4)
        return total

    def preview(self, trees: dict) -> Preview:
        try:
            (loaded,) = pick(trees, [self.tree])
        except SetupError as e:
            return Preview("", str(e))
        tree = loaded.tree.unpack() if isinstance(loaded.tree, inspector.PackedTree) \
            else loaded.tree
        groups = inspector.quant_groups(tree)
        usable = [g for g in groups if g.usable]
        stored = stored_counts(tree)
        if not usable and not stored:
            why = f" ({len(groups)} with problems: {groups[0].problems[0]})" if groups else ""
            return Preview("", f"{self.tree} holds no quantized weight to dequantize{why}.")
        # a file's own quantized tensors (GGUF) by type, then each group
        lines = [f"{plural(n, 'weight')} stored as {kind} → {self.dtype}"
                 for kind, n in stored.items()]
        lines += [f"{g.path}: {g.layout} → {shape_text(self.dtype, g.shape)}"
                  for g in usable[:PREVIEW_LINES]]
        head = f"{self.tree}: {plural(len(usable) + stored.total(), 'weight')} to {self.dtype}"
        if len(groups) > len(usable):
            head += f" ({len(groups) - len(usable)} left as they are: see their badges)"
        return Preview(clip(head + ":", lines, len(stored) + len(usable)), "")

    @classmethod
    def code(cls, call: CallRecord, names: list[str], writer) -> str:
        return f"inspector.dequantize({names[0]}, dtype={call.options.get('dtype')!r})"
