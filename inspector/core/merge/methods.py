"""The merge methods by name: what each needs, its parameters with mergekit's defaults, and its
formula in words (shown by the app before a run)."""

from __future__ import annotations

from dataclasses import dataclass, field

REQUIRED = object()


@dataclass(frozen=True)
class Method:
    """One merge method, as mergekit's registry (`merge_methods/registry.py`) defines it.

    Attributes:
        name: mergekit's name for it.
        needs_base: the method works on task vectors `x_i - base`.
        weighted: takes one weight per model.
        params: the scalar parameters and their defaults (`REQUIRED` where there is none).
        min_trees, max_trees: how many models (the base not counted) it merges.
        elementwise: every output element depends only on the same element of the inputs, so
            a packed tree is one kernel per dtype; otherwise there is one kernel per leaf size
            (per-leaf norms, top-k, random masks).
        formula: the definition, for people.
        reference: the paper.
    """

    name: str
    needs_base: bool
    weighted: bool
    params: dict = field(default_factory=dict)
    min_trees: int = 1
    max_trees: int | None = None
    elementwise: bool = False
    formula: str = ""
    reference: str = ""

    @property
    def per_model(self) -> tuple[str, ...]:
        """The parameters given per model (or as one value for all)."""
        return ("weights",) * self.weighted + ("density",) * ("density" in self.params)

    @property
    def accepts(self) -> list[str]:
        """Every keyword `merge` accepts for this method."""
        return ["base"] * self.needs_base + ["weights"] * self.weighted + list(self.params)


_GTA = ("x_i - base are the task vectors; {sparsify}{consensus}"
        "result = base + lam * sum_i w_i d_i{divide}.")

METHODS: dict[str, Method] = {
    "linear": Method(
        "linear", needs_base=False, weighted=True, params={"normalize": True},
        elementwise=True,
        formula="result = sum_i w_i x_i / sum_i w_i (without the division when normalize=False).",
        reference="Wortsman et al. 2022, Model soups (arXiv:2203.05482)",
    ),
    "task_arithmetic": Method(
        "task_arithmetic", needs_base=True, weighted=True,
        params={"normalize": False, "lam": 1.0}, elementwise=True,
        formula=_GTA.format(sparsify="d_i = x_i - base; ", consensus="",
                            divide=" (divided by sum_i w_i when normalize=True)"),
        reference="Ilharco et al. 2023, Editing models with task arithmetic (arXiv:2212.04089)",
    ),
    "ties": Method(
        "ties", needs_base=True, weighted=True,
        params={"density": 1.0, "normalize": True, "rescale": False, "lam": 1.0},
        formula=_GTA.format(
            sparsify="d_i keeps the int(density_i * size) largest |x_i - base| of each leaf "
                     "(the rest 0); ",
            consensus="per element the sign of sum_i w_i d_i is elected and only the w_i d_i "
                      "of that sign are summed; ",
            divide=", divided by the sum of the w_i that agree (normalize=True)"),
        reference="Yadav et al. 2023, TIES-Merging (arXiv:2306.01708)",
    ),
    "dare_linear": Method(
        "dare_linear", needs_base=True, weighted=True,
        params={"density": 1.0, "normalize": False, "rescale": True, "lam": 1.0, "seed": 0},
        formula=_GTA.format(
            sparsify="d_i keeps each element of x_i - base with probability density_i (a "
                     "random mask from seed) and, with rescale, is scaled to the leaf's L1 "
                     "norm before masking; ",
            consensus="", divide=" (divided by sum_i w_i when normalize=True)"),
        reference="Yu et al. 2023, Language models are Super Mario (DARE, arXiv:2311.03099)",
    ),
    "dare_ties": Method(
        "dare_ties", needs_base=True, weighted=True,
        params={"density": 1.0, "normalize": False, "rescale": True, "lam": 1.0, "seed": 0},
        formula=_GTA.format(
            sparsify="d_i keeps each element of x_i - base with probability density_i (a "
                     "random mask from seed) and, with rescale, is scaled to the leaf's L1 "
                     "norm before masking; ",
            consensus="per element the sign of sum_i w_i d_i is elected and only the w_i d_i "
                      "of that sign are summed; ",
            divide=" (divided by the sum of the agreeing w_i when normalize=True)"),
        reference="Yu et al. 2023 (DARE) with TIES sign election (arXiv:2311.03099)",
    ),
    "slerp": Method(
        "slerp", needs_base=False, weighted=False, params={"t": REQUIRED},
        min_trees=2, max_trees=2,
        formula="Per leaf, as one vector: cos = <a, b> / (|a| |b|), theta = arccos(cos); "
                "result = sin((1 - t) theta) / sin(theta) a + sin(t theta) / sin(theta) b; "
                "(1 - t) a + t b where |cos| > 0.9995. t = 0 gives a, t = 1 gives b.",
        reference="Shoemake 1985; mergekit's slerp",
    ),
    "model_stock": Method(
        "model_stock", needs_base=True, weighted=False, min_trees=2,
        formula="Per leaf, with d_i = x_i - base: cos = mean over pairs i < j of "
                "<d_i, d_j> / (|d_i| |d_j|), N models, t = N cos / (1 + (N - 1) cos); "
                "result = t mean_i x_i + (1 - t) base.",
        reference="Jang et al. 2024, Model Stock (arXiv:2403.19522)",
    ),
}
