"""Merge settings: mergekit's methods (`inspector.merge`): method, trees, base, per-tree weight
and density, t / lambda / seed, normalize / rescale (mergekit's defaults per method)."""

from __future__ import annotations

import param

import inspector
from inspector.core.merge import METHODS
from inspector.core.merge.checks import check_call, check_trees
from inspector.ui.session.formatting import plural
from inspector.ui.session.loaded import SetupError, pick
from inspector.ui.session.op_settings import OpSettings, Preview, register
from inspector.ui.session.records import CallRecord

LABELS = {"linear": "Linear (model soup)", "task_arithmetic": "Task arithmetic", "ties": "TIES",
          "dare_linear": "DARE linear", "dare_ties": "DARE TIES", "slerp": "SLERP",
          "model_stock": "Model Stock"}


@register
class MergeSettings(OpSettings):
    """`inspector.merge(method, trees, base=, ...)`: every number is a traced argument, so a
    changed weight, density, t, lambda or seed re-runs from the compiled kernels."""

    op = "merge"
    title = "Merge"
    position = 50
    streams = True  # inspector.merge(..., out=)
    live = ("weights", "density", "t", "lam", "seed", "normalize", "rescale")

    method = param.Selector(default="ties", objects=list(METHODS),
                            doc="The merge method (mergekit's names).")
    trees = param.List(default=[], item_type=str, doc="Trees to merge, in order (the base apart).")
    base = param.String(default="", doc="The tree they were fine-tuned from (methods with one).")
    weights = param.List(default=[], doc="One weight per tree in `trees`.")
    density = param.List(default=[], doc="One density per tree (TIES, DARE).")
    t = param.Number(default=0.5, doc="SLERP's t: 0 gives the first tree, 1 the second.")
    lam = param.Number(default=1.0, doc="mergekit's lambda: scales the merged task vectors.")
    seed = param.Integer(default=0, bounds=(0, None), doc="DARE's random-mask seed.")
    normalize = param.Boolean(default=True, doc="Divide by the (agreeing) weights' sum.")
    rescale = param.Boolean(default=False, doc="Restore each leaf's L1 norm after dropping.")

    def __init__(self, **params):
        super().__init__(**params)
        if "normalize" not in params and "rescale" not in params:
            self._defaults()

    @param.depends("method", watch=True)
    def _defaults(self):
        spec = METHODS[self.method].params  # mergekit's defaults for this method
        self.param.update(normalize=bool(spec.get("normalize", True)),
                          rescale=bool(spec.get("rescale", False)))

    @param.depends("trees", watch=True)
    def _fit_lists(self):
        n = len(self.trees)
        self.param.update(weights=(list(self.weights) + [1.0] * n)[:n],
                          density=(list(self.density) + [1.0] * n)[:n])

    @property
    def spec(self):
        return METHODS[self.method]

    def uses_base(self) -> bool:
        return self.spec.needs_base and bool(self.base)

    def uses(self) -> list[str]:
        return list(self.trees) + ([self.base] if self.uses_base() else [])

    def forget(self, name: str) -> None:
        keep = [i for i, n in enumerate(self.trees) if n != name]
        self.param.update(trees=[self.trees[i] for i in keep],
                          weights=[self.weights[i] for i in keep if i < len(self.weights)],
                          density=[self.density[i] for i in keep if i < len(self.density)],
                          base="" if self.base == name else self.base)

    def apply(self, values: dict, names: dict, trees: dict) -> list[str]:
        values = dict(values)
        values["trees"] = [names.get(n, n) for n in values.get("trees", [])]
        if values.get("base"):
            values["base"] = names.get(values["base"], values["base"])
        self.param.update(**values)
        return []

    def params_for_merge(self) -> dict:
        """The keyword arguments of `inspector.merge` (besides base) these settings give."""
        k, spec = len(self.trees), self.spec
        out: dict = {}
        if spec.weighted:
            out["weights"] = [float(w) for w in (list(self.weights) + [1.0] * k)[:k]]
        values = {"density": [float(d) for d in (list(self.density) + [1.0] * k)[:k]],
                  "t": float(self.t), "lam": float(self.lam), "seed": int(self.seed),
                  "normalize": bool(self.normalize), "rescale": bool(self.rescale)}
        out.update({p: values[p] for p in spec.params})
        return out

    def _inputs(self, trees: dict):
        if not self.trees:
            raise SetupError("Pick the trees to merge (the base apart).")
        inputs = [t.tree for t in pick(trees, self.trees)]
        base = pick(trees, [self.base])[0].tree if self.uses_base() else None
        return inputs, base

    def describe(self, loaded):
        if not self.trees:
            raise SetupError("Pick the trees to merge (the base apart).")
        params = self.params_for_merge()
        names = list(self.trees)
        base = self.uses_base()
        on = f" on {self.base}" if base else ""
        call = CallRecord("merge", f"merge:{self.method}({', '.join(names)}{on})", self.uses(),
                          {"method": self.method, "base": base, "params": params})
        shown = ", ".join(f"{k}={v}" for k, v in params.items())
        return call, f"{self.method} · {', '.join(names)}{on} · {shown}"

    def arguments(self, trees, options):
        trees = list(trees)
        base = trees.pop() if options["base"] else None  # `uses()`: the base comes last
        return inspector.merge, (options["method"], trees), {"base": base,
                                                              **options["params"]}

    def preview(self, trees: dict) -> Preview:
        definition = (f"{LABELS[self.method]} ({self.spec.reference}):\n{self.spec.formula}")
        try:
            inputs, base = self._inputs(trees)
            params = self.params_for_merge()
            weights = params.pop("weights", None)
            check_call(self.spec, inputs, base, weights, params)
            check_trees(self.spec, inputs, base)
        except inspector.InspectorError as e:
            return Preview(definition, str(e))
        counts: dict[str, int] = {}
        for row in pick(trees, self.trees)[0].index.rows:
            if row.kind == "leaf" and row.dtype:
                counts[row.dtype] = counts.get(row.dtype, 0) + 1
        lines = [f"{d} → {d}  ({plural(n, 'leaf', 'leaves')}"
                 + ("; computed in float32)" if d in ("bfloat16", "float16") else ")")
                 for d, n in counts.items()]
        settings = ", ".join(f"{k} = {v}" for k, v in self.params_for_merge().items())
        return Preview(f"{definition}\nWith {settings or 'no parameters'}.\nResult dtypes:\n"
                       + "\n".join(lines), "")

    @classmethod
    def code(cls, call: CallRecord, names: list[str], writer) -> str:
        from inspector.ui.session.snippet import literal

        options = call.options
        trees = names[:-1] if options["base"] else names
        base = f", base={names[-1]}" if options["base"] else ""
        params = "".join(f", {k}={literal(v)}" for k, v in options["params"].items())
        return f"inspector.merge({literal(options['method'])}, [{', '.join(trees)}]{base}{params})"
