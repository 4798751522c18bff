"""The mesh panel: the mesh's axes (presets from the device count), a spec per subtree of the
selected tree checked as you type (every leaf that does not fit is listed), a Shard button,
and the device map."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui

import inspector
from inspector.ui.device_map import DeviceMapView
from inspector.ui.session.formatting import plural, pre

_MAX_FIELDS = 64
_ERROR = "var(--mui-palette-error-main, #d32f2f)"


class MeshPanel(pn.viewable.Viewer):
    """Sets `state.mesh`: axes, per-subtree specs; runs its `shard` action."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        mesh = state.mesh
        n = len(inspector.devices())
        self.preset = pmui.Select(label=f"Preset ({plural(n, 'device')})",
                                  options=list(mesh.presets),
                                  value=mesh.axes if mesh.axes in mesh.presets else None,
                                  sizing_mode="stretch_width")
        self.preset.param.watch(lambda e: e.new and setattr(mesh, "axes", e.new), "value")
        self.axes = pmui.TextInput(label="Mesh axes (name=size, ...)", value=mesh.axes,
                                   sizing_mode="stretch_width")
        self.axes.param.watch(lambda e: setattr(mesh, "axes", e.new or ""), "value_input")
        self.mesh_error = pn.pane.HTML("", visible=False, sizing_mode="stretch_width")
        self.tree = pmui.Select(label="Tree to shard", options=list(state.trees),
                                value=state.selected or None, sizing_mode="stretch_width")
        self.tree.param.watch(self._on_tree, "value")
        self.fields: dict[str, pmui.TextInput] = {}
        self._errors: dict[str, pn.pane.HTML] = {}
        self._column = pmui.Column(sizing_mode="stretch_width", margin=0)
        self.shard_button = pmui.Button(label="Shard", variant="contained", icon="grid_view")
        self.shard_button.on_click(lambda _: mesh.param.trigger("shard"))
        self.device_map = DeviceMapView(state)
        self._help = pmui.Typography(
            "A spec per subtree: one entry per leading dimension, a mesh axis, None, or "
            "(data, model); empty replicates. The sharded tree is added as a new tree.",
            variant="caption", margin=(0, 10))
        state.param.watch(self._update_fields, ["selected", "trees"])
        mesh.param.watch(self._update_mesh, ["axes", "mesh_error"])
        mesh.param.watch(self._update_errors, "spec_errors")
        self._update_mesh()
        self._update_fields()
        mesh.checking = True  # shown: check the specs from now on

    def __panel__(self):
        return pmui.Row(
            pmui.Column(self.preset, self.axes, self.mesh_error, self.tree, self._help,
                        self._column, self.shard_button, width=420),
            pmui.Column(self.device_map, sizing_mode="stretch_width"),
            sizing_mode="stretch_width")

    def _on_tree(self, event):
        if event.new and event.new != self._state.selected:
            self._state.selected = event.new

    def _update_mesh(self, *_):
        mesh = self._state.mesh
        if self.axes.value_input != mesh.axes:
            self.axes.value = mesh.axes
        self.preset.value = mesh.axes if mesh.axes in mesh.presets else None
        self.axes.error_state = bool(mesh.mesh_error)
        error = mesh.mesh_error
        self.mesh_error.object = pre(error, _ERROR, "mesh-error") if error else ""
        self.mesh_error.visible = bool(mesh.mesh_error)
        self.shard_button.disabled = bool(mesh.mesh_error)

    def _update_fields(self, *_):
        state, mesh = self._state, self._state.mesh
        self.tree.param.update(options=list(state.trees), value=state.selected or None)
        texts = mesh.specs.get(state.selected, {})
        self.fields, self._errors, rows = {}, {}, []
        fields = mesh.fields()
        for field_id, label in fields[:_MAX_FIELDS]:
            text = pmui.TextInput(label=label, value=texts.get(field_id, ""),
                                  placeholder="replicated", size="small",
                                  sizing_mode="stretch_width")
            text.param.watch(lambda e, f=field_id: mesh.set_spec(f, e.new or ""), "value_input")
            error = pn.pane.HTML("", visible=False, sizing_mode="stretch_width", margin=(0, 10))
            self.fields[field_id], self._errors[field_id] = text, error
            rows += [text, error]
        if len(fields) > _MAX_FIELDS:
            rows.append(pmui.Typography(
                f"… {len(fields) - _MAX_FIELDS} more subtrees are replicated.", variant="caption"))
        self._column[:] = rows
        self._update_errors()

    def _update_errors(self, *_):
        errors = self._state.mesh.spec_errors
        for field_id, widget in self.fields.items():
            message = errors.get(field_id, "")
            widget.error_state = bool(message)
            pane = self._errors[field_id]
            pane.object = pre(message, _ERROR, "spec-error") if message else ""
            pane.visible = bool(message)
