"""The dequantize form: which tree, and the dtype its quantized weights become."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui

from inspector.ui.forms import form
from inspector.ui.session.ops.dequantize import DTYPES


@form("dequantize")
class DequantizeForm(pn.viewable.Viewer):
    """The tree whose quantized weights (fp8, mxfp4, gptq, awq) become plain arrays."""

    def __init__(self, settings, state, **params):
        super().__init__(**params)
        self._settings, self._state = settings, state
        self.tree = pmui.Select(label="Tree to dequantize", options=list(state.trees),
                                value=settings.tree or None, sizing_mode="stretch_width")
        self.dtype = pmui.RadioButtonGroup(options=DTYPES, value=settings.dtype,
                                           sizing_mode="stretch_width")
        self.tree.param.watch(self._on_tree, "value")
        self.dtype.param.watch(self._on_dtype, "value")
        state.param.watch(self._update, "trees")
        settings.param.watch(self._update, ["tree", "dtype"])

    def __panel__(self):
        return pmui.Column(self.tree, self.dtype, pmui.Typography(
            "Each quantized weight becomes one array at its own key path (codes times their "
            "scales); its scales and zero points are dropped. Weights with a problem badge "
            "are left as they are.", variant="caption", margin=(0, 10)),
            sizing_mode="stretch_width")

    def _on_tree(self, event):
        if event.new and event.new != self._settings.tree:
            self._settings.tree = event.new

    def _on_dtype(self, event):
        if event.new and event.new != self._settings.dtype:
            self._settings.dtype = event.new

    def _update(self, *_):
        self.tree.param.update(options=list(self._state.trees),
                               value=self._settings.tree or None)
        self.dtype.value = self._settings.dtype
