"""The merge form: method, trees, base, one weight and density per tree, t / lambda / seed."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui

from inspector.core.merge import METHODS
from inspector.ui.forms import form
from inspector.ui.session.ops.merge import LABELS


@form("merge")
class MergeForm(pn.viewable.Viewer):
    """Settings of `inspector.merge`; the fields a method does not take are hidden. Changing a
    number re-runs from the compiled cache (every number is a traced argument)."""

    def __init__(self, settings, state, **params):
        super().__init__(**params)
        self._settings, self._state = settings, state
        self.method = pmui.Select(label="Method", value=settings.method,
                                  options={LABELS[m]: m for m in METHODS}, width=220)
        self.method.param.watch(lambda e: setattr(settings, "method", e.new), "value")
        self.names = pmui.MultiChoice(label="Trees to merge, in order", options=list(state.trees),
                                      value=list(settings.trees), sizing_mode="stretch_width")
        self.names.param.watch(self._on_names, "value")
        self.base = pmui.Select(label="Base (fine-tuned from)", options=[""] + list(state.trees),
                                value=settings.base, width=220)
        self.base.param.watch(lambda e: setattr(settings, "base", e.new or ""), "value")
        self.t = pmui.FloatSlider.from_param(settings.param.t, label="t", start=0.0, end=1.0,
                                             step=0.01, sizing_mode="stretch_width")
        self.lam = pmui.FloatInput.from_param(settings.param.lam, label="lambda", step=0.1,
                                              width=110, size="small")
        self.seed = pmui.IntInput.from_param(settings.param.seed, label="seed", width=110,
                                             size="small")
        self.normalize = pmui.Switch.from_param(settings.param.normalize, label="normalize")
        self.rescale = pmui.Switch.from_param(settings.param.rescale, label="rescale")
        self.auto = pmui.Switch.from_param(state.param.auto_run, label="auto re-run")
        self.weights: list = []
        self.densities: list = []
        self._rows = pmui.Column(sizing_mode="stretch_width", margin=0)
        state.param.watch(self._update_options, "trees")
        settings.param.watch(self._update_rows, ["trees", "method"])
        settings.param.watch(self._update_values, ["weights", "density"])
        settings.param.watch(self._update_method, "method")
        self._update_rows()
        self._update_method()

    def __panel__(self):
        return pmui.Column(
            pmui.Row(self.method, self.base, sizing_mode="stretch_width", margin=0),
            self.names, self._rows, self.t,
            pmui.Row(self.lam, self.seed, self.normalize, self.rescale, self.auto, margin=0),
            sizing_mode="stretch_width")

    def _update_options(self, *_):
        self.names.options = list(self._state.trees)
        self.base.options = [""] + list(self._state.trees)

    def _on_names(self, event):
        if list(event.new) != list(self._settings.trees):
            self._settings.trees = list(event.new)

    def _update_method(self, *_):
        spec = METHODS[self._settings.method]
        if self.method.value != spec.name:
            self.method.value = spec.name
        self.base.visible = spec.needs_base
        self.t.visible = "t" in spec.params
        self.lam.visible = "lam" in spec.params
        self.seed.visible = "seed" in spec.params
        self.normalize.visible = "normalize" in spec.params
        self.rescale.visible = "rescale" in spec.params

    def _update_rows(self, *_):
        settings = self._settings
        if list(self.names.value) != list(settings.trees):
            self.names.value = list(settings.trees)
        spec = METHODS[settings.method]
        self.weights, self.densities, rows = [], [], []
        for i, name in enumerate(settings.trees):
            parts = []
            if spec.weighted:
                w = pmui.FloatInput(value=float(_at(settings.weights, i)), step=0.1, width=130,
                                    size="small", label=f"weight · {name}")
                w.param.watch(lambda e, i=i: self._set("weights", i, e.new), "value")
                self.weights.append(w)
                parts.append(w)
            if "density" in spec.params:
                d = pmui.FloatSlider(start=0.0, end=1.0, step=0.01, label=f"density · {name}",
                                     value=float(_at(settings.density, i)),
                                     sizing_mode="stretch_width", margin=(5, 15))
                d.param.watch(lambda e, i=i: self._set("density", i, e.new), "value")
                self.densities.append(d)
                parts.append(d)
            if parts:
                rows.append(pmui.Row(*parts, sizing_mode="stretch_width", margin=0))
        self._rows[:] = rows

    def _set(self, name: str, i: int, value) -> None:
        values = list(getattr(self._settings, name))
        if value is None or i >= len(values) or values[i] == value:
            return
        values[i] = value
        setattr(self._settings, name, values)

    def _update_values(self, *_):
        for widgets, values in ((self.weights, self._settings.weights),
                                (self.densities, self._settings.density)):
            for widget, v in zip(widgets, values, strict=False):
                if widget.value != float(v):
                    widget.value = float(v)


def _at(values, i: int, default: float = 1.0) -> float:
    return values[i] if i < len(values) else default
