"""The weighted-sum form: pick trees, one weight each (number + slider), presets."""

from __future__ import annotations

import math
import re
import time

import panel as pn
import panel_material_ui as pmui

from inspector.ui.forms import form
from inspector.ui.text_input import EnterInput


@form("weighted_sum")
class WeightedSumForm(pn.viewable.Viewer):
    """Trees and weights of `sum_k w_k * tree_k`; moving a slider re-runs from the cache."""

    def __init__(self, settings, state, **params):
        super().__init__(**params)
        self._settings, self._state = settings, state
        self._last_event = None  # (field, text, event, time) of the last edit applied
        self.names = pmui.MultiChoice(label="Trees to sum, in order", options=list(state.trees),
                                      value=list(settings.trees), sizing_mode="stretch_width")
        self.names.param.watch(self._on_names, "value")
        self.inputs: list = []
        self.sliders: list = []
        self._rows = pmui.Column(sizing_mode="stretch_width", margin=0)
        self._presets = pmui.Row(
            pmui.Button.from_param(settings.param.uniform, label="Uniform mean",
                                   variant="outlined", size="small"),
            pmui.Button.from_param(settings.param.normalise, label="Sum to 1",
                                   variant="outlined", size="small"),
            pmui.Switch.from_param(state.param.auto_run, label="auto re-run",
                                   align="center"),
        )
        state.param.watch(self._update_options, "trees")
        settings.param.watch(self._update_rows, "trees")
        settings.param.watch(self._update_values, "weights")
        self._update_rows()

    def __panel__(self):
        return pmui.Column(self.names, self._rows, self._presets, sizing_mode="stretch_width")

    def _update_options(self, *_):
        self.names.options = list(self._state.trees)

    def _on_names(self, event):
        if list(event.new) != list(self._settings.trees):
            self._settings.trees = list(event.new)

    def _update_rows(self, *_):
        settings = self._settings
        if list(self.names.value) != list(settings.trees):
            self.names.value = list(settings.trees)
        weights = list(settings.weights)
        self.inputs, self.sliders, rows = [], [], []
        for i, name in enumerate(settings.trees):
            typed = weights[i] if i < len(weights) else 1.0
            w = float(typed)
            # A text field applied on Enter (and on leaving it): a number field echoing every
            # keystroke back from the server turned select-all + "0.1" over "1.0" into "10.1",
            # and a second edit could revert until the field lost focus.
            number = EnterInput(value=_text(typed), width=130, size="small",
                                label=f"w{i} · {name}")
            lo, hi = _slider_range(w)
            slider = pmui.FloatSlider(start=lo, end=hi, step=0.01, value=w, show_value=False,
                                      sizing_mode="stretch_width", align="center",
                                      margin=(5, 15))
            number.param.watch(lambda e, i=i: self._on_text(i, e.obj, e.name),
                               ["value", "enter_pressed"])
            slider.param.watch(lambda e, i=i: self._set_weight(i, e.new), "value")
            self.inputs.append(number)
            self.sliders.append(slider)
            rows.append(pmui.Row(number, slider, sizing_mode="stretch_width", margin=0))
        self._rows[:] = rows

    def _on_text(self, i: int, field, event: str = "enter_pressed") -> None:
        text = str(field.value_input if field.value_input is not None else field.value).strip()
        # Enter in the browser sends both the field's new `value` and `enter_pressed`: the
        # first of the two applies the text, the second must not run the sum again.
        now = time.monotonic()
        last, self._last_event = self._last_event, (i, text, event, now)
        if last is not None and last[:2] == (i, text) and last[2] != event \
                and now - last[3] < 1.0:
            self._last_event = None
            return
        try:
            # As typed: "4" is the integer 4 (integer trees with integer weights stay integer).
            value = int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
        except ValueError:
            self._state.form_error = f"w{i}: {text!r} is not a number."
            return
        if not math.isfinite(value):
            self._state.form_error = f"w{i}: {text!r} is not a finite number."
            return
        weights = list(self._settings.weights)
        if i < len(weights) and weights[i] == value:
            if event == "enter_pressed":
                # The same weight typed again after another edit: run it again all the same
                # (Enter always applies what the field shows).
                self._settings.param.trigger("weights")
            return
        self._set_weight(i, value)

    def _set_weight(self, i: int, value) -> None:
        weights = list(self._settings.weights)
        if value is None or i >= len(weights) or weights[i] == value:
            return
        weights[i] = value
        self._settings.weights = weights

    def _update_values(self, *_):
        for i, w in enumerate(self._settings.weights):
            if i >= len(self.inputs):
                break
            field = self.inputs[i]
            try:
                shown = float(field.value_input if field.value_input is not None else field.value)
            except ValueError:
                shown = None
            if shown != float(w):  # never rewrite a field that already says this number
                field.param.update(value=_text(w), value_input=_text(w))
            w = float(w)
            slider = self.sliders[i]
            if not slider.start <= w <= slider.end:
                slider.start, slider.end = _slider_range(w)
            if slider.value != w:
                slider.value = w


def _text(w: float) -> str:
    """A weight as its field shows it: the shortest text that reads back as the same number."""
    return str(w) if isinstance(w, int) else repr(float(w))


def _slider_range(w: float) -> tuple[float, float]:
    """A slider range that holds `w` with room either side: at least [-1, 2]."""
    return min(-1.0, math.floor(w) - 1.0), max(2.0, math.ceil(w) + 1.0)
