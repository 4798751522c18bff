"""Weighted sum settings: the trees to sum, in order, and one weight each."""

from __future__ import annotations

import functools
import operator

import jax
import param

import inspector
from inspector.ui.session.eager import place
from inspector.ui.session.formatting import plural
from inspector.ui.session.loaded import SetupError, pick
from inspector.ui.session.op_settings import (
    OpSettings,
    Preview,
    register,
    run_weights,
    structure_error,
)
from inspector.ui.session.records import CallRecord


@register
class WeightedSumSettings(OpSettings):
    """`sum_k weights[k] * trees[k]`: model soups, task arithmetic, an SGD step, an EMA."""

    op = "weighted_sum"
    title = "Weighted sum"
    position = 10
    live = ("weights",)
    streams = True  # inspector.weighted_sum(..., out=)
    reads_in_place = True  # the CPU's loop sums float32 groups in their files' maps

    trees = param.List(default=[], item_type=str, doc="Names of the trees to sum, in order.")
    weights = param.List(default=[], doc="One weight per tree in `trees`.")
    uniform = param.Event(doc="Set every weight to 1/K (the mean).")
    normalise = param.Event(doc="Scale the weights to sum to 1.")
    problem = param.String(default="", doc="Why the last preset could not apply ('' if it did).")

    @param.depends("trees", watch=True)
    def _fit_weights(self):
        n, w = len(self.trees), list(self.weights)
        if len(w) != n:
            self.weights = (w + [1.0] * n)[:n]

    @param.depends("uniform", watch=True)
    def _on_uniform(self):
        n = len(self.trees)
        if n:
            self.param.update(weights=[1.0 / n] * n, problem="")

    @param.depends("normalise", watch=True)
    def _on_normalise(self):
        total = float(sum(self.weights))
        if total == 0:
            self.problem = "The weights sum to 0: cannot scale them to sum to 1."
            return
        self.param.update(weights=[float(w) / total for w in self.weights], problem="")

    @param.depends("weights", watch=True)
    def _clear_problem(self):
        self.problem = ""

    def uses(self) -> list[str]:
        return list(self.trees)

    def forget(self, name: str) -> None:
        keep = [i for i, n in enumerate(self.trees) if n != name]
        self.param.update(trees=[self.trees[i] for i in keep],
                          weights=[self.weights[i] for i in keep if i < len(self.weights)])

    def apply(self, values: dict, names: dict, trees: dict) -> list[str]:
        self.param.update(trees=[names.get(n, n) for n in values["trees"]],
                          weights=list(values["weights"]))
        return []

    def describe(self, loaded):
        names = list(self.trees)
        if len(names) < 2:
            raise SetupError("Pick two or more trees for a weighted sum.")
        ws = run_weights(self.weights)
        call = CallRecord("weighted_sum", f"weighted_sum({', '.join(names)})", names,
                          {"weights": tuple(ws)})
        return call, f"{', '.join(names)} · weights {', '.join(map(str, ws))}"

    def arguments(self, trees, options):
        return inspector.weighted_sum, (list(trees), list(options["weights"])), {}

    def eager(self, trees, options):
        ws = list(options["weights"])

        def make(device):
            # What users write by hand: one eager op per leaf and term.
            placed = [place(t, device) for t in trees]

            def leaf(*xs):
                return functools.reduce(operator.add,
                                        (w * x for w, x in zip(ws, xs, strict=True)))

            return lambda: jax.tree.map(leaf, *placed)

        return make

    def preview(self, trees: dict) -> Preview:
        try:
            loaded = pick(trees, self.trees)
        except SetupError as e:
            return Preview("", str(e))
        if len(loaded) < 2:
            return Preview("", "Pick two or more trees for a weighted sum.")
        if len(self.weights) != len(loaded):
            return Preview("", f"Got {len(loaded)} trees and {len(self.weights)} weights: "
                           "give one weight per tree.")
        error = self.problem or structure_error([t.tree for t in loaded], inspector.weighted_sum,
                                                list(self.weights))
        ws = run_weights(self.weights)
        counts: dict[str, int] = {}
        for row in loaded[0].index.rows:
            if row.kind == "leaf" and row.dtype:
                counts[row.dtype] = counts.get(row.dtype, 0) + 1
        lines = []
        for dtype, n in counts.items():
            try:
                out = str(inspector.weighted_sum_dtype(dtype, ws))
            except TypeError:
                out = "not numeric"
            lines.append(f"{dtype} → {out}  ({plural(n, 'leaf', 'leaves')})")
        lines.append(f"weights sum to {sum(ws):.6g}")
        return Preview("Result dtypes:\n" + "\n".join(lines), error)

    @classmethod
    def code(cls, call: CallRecord, names: list[str], writer) -> str:
        from inspector.ui.session.snippet import literal

        weights = ", ".join(literal(w) for w in call.options["weights"])
        return f"inspector.weighted_sum([{', '.join(names)}], [{weights}])"
