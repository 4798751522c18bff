"""The sidebar: the loaded trees, the example loader and the device selector (opening files:
`file_picker.py`; downloading: `export.py`)."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui

from inspector.examples import EXAMPLES
from inspector.ui.item_list import ItemList
from inspector.ui.session.formatting import totals_text


class TreeListView(pn.viewable.Viewer):
    """Every loaded tree (name, source, leaves, params, size); clicking one selects it.

    The list is drawn with the page's first paint (`ItemList`: plain DOM); the button that
    removes the selected tree (`remove`) is laid out by the app, after the first paint."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.list = ItemList(title="Loaded trees", sizing_mode="stretch_width", margin=(0, 0))
        self.list.param.watch(self._on_active, "active")
        self.remove = pmui.Button.from_param(state.param.remove_tree, label="Remove selected",
                                             icon="delete_outline", variant="text",
                                             size="small")
        state.param.watch(self._update, ["trees", "selected"])
        self._update()

    def __panel__(self):
        return self.list

    def _update(self, *_):
        names = list(self._state.trees)
        items = [{"label": name,
                  "secondary": f"{t.source} · {totals_text(t.n_leaves, t.n_params, t.nbytes)}",
                  "icon": "account_tree"}
                 for name, t in self._state.trees.items()]
        active = names.index(self._state.selected) if self._state.selected in names else None
        self.list.param.update(items=items, active=active)

    def _on_active(self, event):
        names = list(self._state.trees)
        i = event.new
        if isinstance(i, int) and 0 <= i < len(names) and names[i] != self._state.selected:
            self._state.selected = names[i]


class ExampleLoader(pn.viewable.Viewer):
    """Loads one of the built-in example trees (in the background)."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self.example = pmui.Select.from_param(state.param.example, label="Built-in examples",
                                              sizing_mode="stretch_width")
        self.load = pmui.Button.from_param(state.param.load_example, label="Load example",
                                           icon="download", variant="outlined",
                                           sizing_mode="stretch_width", disabled=state.param.busy)
        self._about = pmui.Typography(
            pn.bind(lambda name: EXAMPLES[name].description, state.param.example),
            variant="caption", margin=(0, 10))

    def __panel__(self):
        return pmui.Column(self.example, self._about, self.load, sizing_mode="stretch_width")


class DeviceSelector(pn.viewable.Viewer):
    """The device operations run on (`inspector.devices()`)."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self.select = pmui.Select.from_param(state.param.device, label="Device",
                                             sizing_mode="stretch_width")

    def __panel__(self):
        return self.select
