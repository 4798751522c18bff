"""The index form: one NumPy-style index per top-level subtree, parsed as you type."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui

from inspector.ui.forms import form
from inspector.ui.session.formatting import pre
from inspector.ui.session.ops.index import index_fields

_MAX_FIELDS = 64


@form("index")
class IndexForm(pn.viewable.Viewer):
    """Index text per top-level subtree of the selected tree (`:` keeps a subtree whole)."""

    def __init__(self, settings, state, **params):
        super().__init__(**params)
        self._settings, self._state = settings, state
        self.tree = pmui.Select(label="Tree to index", options=list(state.trees),
                                value=settings.tree or None, sizing_mode="stretch_width")
        self.tree.param.watch(self._on_tree, "value")
        self.fields: dict[str, pmui.TextInput] = {}
        self._errors: dict[str, pn.pane.HTML] = {}
        self._column = pmui.Column(sizing_mode="stretch_width", margin=0)
        self._help = pmui.Typography(
            "Write 1, -1, 1:3, ::2, ..., 0 or : (keep). Every leaf of a subtree gets its index.",
            variant="caption", margin=(0, 10))
        state.param.watch(self._update_fields, "trees")
        settings.param.watch(self._update_fields, "tree")
        settings.param.watch(self._update_texts, "texts")
        state.param.watch(self._update_errors, "field_errors")
        self._update_fields()

    def __panel__(self):
        return pmui.Column(self.tree, self._help, self._column, sizing_mode="stretch_width")

    def _on_tree(self, event):
        if event.new and event.new != self._settings.tree:
            self._settings.tree = event.new

    def _update_fields(self, *_):
        state, settings = self._state, self._settings
        self.tree.param.update(options=list(state.trees), value=settings.tree or None)
        loaded = state.trees.get(settings.tree)
        self.fields, self._errors, rows = {}, {}, []
        if loaded is not None:
            texts = settings.current()
            fields = index_fields(loaded.index)
            for field_id, label in fields[:_MAX_FIELDS]:
                text = pmui.TextInput(label=label, value=texts.get(field_id, ":"),
                                      placeholder=":", size="small",
                                      sizing_mode="stretch_width")
                text.param.watch(lambda e, f=field_id: self._on_text(f, e.new), "value_input")
                error = pn.pane.HTML("", visible=False, sizing_mode="stretch_width",
                                     margin=(0, 10))
                self.fields[field_id], self._errors[field_id] = text, error
                rows += [text, error]
            if len(fields) > _MAX_FIELDS:
                rows.append(pmui.Typography(
                    f"… {len(fields) - _MAX_FIELDS} more subtrees are kept whole.",
                    variant="caption"))
        self._column[:] = rows
        self._update_errors()

    def _on_text(self, field_id: str, text) -> None:
        if self._settings.current().get(field_id, ":") != (text or ""):
            self._settings.set_text(field_id, text or "")

    def _update_texts(self, *_):
        texts = self._settings.current()
        for field_id, widget in self.fields.items():
            text = texts.get(field_id, ":")
            if widget.value_input != text:
                widget.value = text

    def _update_errors(self, *_):
        errors = self._state.field_errors
        for field_id, widget in self.fields.items():
            message = errors.get(field_id, "")
            widget.error_state = bool(message)
            pane = self._errors[field_id]
            pane.object = pre(message, "var(--mui-palette-error-main, #d32f2f)") if message else ""
            pane.visible = bool(message)

    def field_error(self, field_id: str) -> str:
        """The parse error shown under a field ('' when it parses)."""
        return self._state.field_errors.get(field_id, "")
