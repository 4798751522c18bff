"""The device map: bytes held on each device by the selected tree and by the result (Bokeh).

An unbalanced layout (one device holding most of a tree) shows at a glance as one tall bar.
"""

from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, NumeralTickFormatter
from bokeh.plotting import figure

import inspector
from inspector.ui.next_tick import next_tick

SERIES = ("selected tree", "result")
_COLORS = ("#1976d2", "#ef6c00")


def device_map_data(state) -> dict[str, list]:
    """`{"device": names, "selected tree": bytes, "result": bytes}`, one entry per device
    (from `inspector.device_bytes`; lazy and host trees hold 0)."""
    loaded = state.trees.get(state.selected)
    tree = None if loaded is None else loaded.tree
    held_in = inspector.device_bytes(tree) if tree is not None else {}
    rr = state.result
    held_out = inspector.device_bytes(rr.result) if rr is not None else {}
    devices = list(dict.fromkeys([*inspector.device_bytes(None), *held_in, *held_out]))
    return {"device": devices, SERIES[0]: [held_in.get(d, 0) for d in devices],
            SERIES[1]: [held_out.get(d, 0) for d in devices]}


class DeviceMapView(pn.viewable.Viewer):
    """Bars of bytes per device: the selected tree beside the result, on every device."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.source = ColumnDataSource({"x": [], "bytes": [], "series": [], "color": []})
        self.figure = figure(x_range=FactorRange(), height=220, sizing_mode="stretch_width",
                             toolbar_location=None, tools="hover",
                             tooltips=[("", "@x"), ("bytes", "@bytes{0,0}")],
                             title="Bytes held per device")
        self.figure.vbar(x="x", top="bytes", width=0.9, color="color", legend_field="series",
                         source=self.source)
        self.figure.yaxis.formatter = NumeralTickFormatter(format="0.0 b")
        self.figure.xaxis.major_label_orientation = 0.8
        self.figure.legend.location = "top_left"
        self.figure.grid.grid_line_alpha = 0.3
        self._pane = pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")
        state.param.watch(next_tick(self._update), ["selected", "trees", "result"])
        self._update()

    def __panel__(self):
        return self._pane

    def _update(self, *_):
        data = device_map_data(self._state)
        xs, tops, series, colors = [], [], [], []
        for device in data["device"]:
            for name, color in zip(SERIES, _COLORS, strict=True):
                xs.append((device, name))
                tops.append(data[name][data["device"].index(device)])
                series.append(name)
                colors.append(color)
        self.figure.x_range.factors = xs
        self.source.data = {"x": xs, "bytes": tops, "series": series, "color": colors}
