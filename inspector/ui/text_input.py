"""A text field applied on Enter, with the text the page shows at the key press."""

from __future__ import annotations

import panel_material_ui as pmui


class EnterInput(pmui.TextInput):
    """A `pmui.TextInput` whose Enter applies the text the field shows. The page sends a typed
    text only after redrawing the field (a React effect), but the Enter key at once: without
    this, a text pasted and entered quickly reached the server after its Enter, which then
    applied the text from before it."""

    def _handle_enter(self, event) -> None:  # panel-material-ui's Enter handler (0.16)
        shown = ((event.data or {}).get("target") or {}).get("value")
        if isinstance(shown, str) and shown != self.value:
            self.value = shown
        super()._handle_enter(event)
