"""'Copy as code': the last run as a short script (`session/snippet.py` writes it), shown and
copied to the clipboard by a button that works offline."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui
import param
from panel.custom import JSComponent

from inspector.ui.session.formatting import MONO
from inspector.ui.session.snippet import state_snippet

# Material Design's content_copy icon (Apache 2.0), inline: nothing to fetch.
_COPY_ICON = (
    '<svg viewBox="0 0 24 24" aria-hidden="true"><path d="M16 1H4c-1.1 0-2 .9-2 2v14h2V3h12V1zm3'
    ' 4H8c-1.1 0-2 .9-2 2v14c0 1.1.9 2 2 2h11c1.1 0 2-.9 2-2V7c0-1.1-.9-2-2-2zm0 16H8V7h11v14z"/>'
    '</svg>')


class CopyButton(JSComponent):
    """A button that copies `text` to the clipboard, in the browser itself: the copy needs
    the click's user activation (a round trip to Python would lose it), and the button works
    wherever it is added, also after the page loaded (Panel's JS links are set up only on a
    page's first render)."""

    text = param.String(default="", doc="What a click copies.")
    label = param.String(default="Copy as code", doc="The button's text.")
    description = param.String(default="Copy the last run as Python code",
                               doc="Tooltip and accessible name.")

    _esm = """
    export function render({ model }) {
      const button = document.createElement("button")
      button.type = "button"
      button.className = "copy-button"
      const icon = 'COPY_ICON'
      const show = (text) => {
        button.innerHTML = icon + "<span></span>"
        button.lastChild.textContent = text
        button.title = model.description
        button.setAttribute("aria-label", model.description)
      }
      show(model.label)
      button.onclick = async () => {
        try {
          await navigator.clipboard.writeText(model.text)
          show("Copied")
        } catch (error) {
          show("Copy failed: select the text")
        }
        setTimeout(() => show(model.label), 1500)
      }
      model.on(["label", "description"], () => show(model.label))
      return button
    }
    """.replace("COPY_ICON", _COPY_ICON)

    _stylesheets = ["""
    button.copy-button {
      display: inline-flex; align-items: center; gap: 6px; cursor: pointer;
      font: 500 13px/1.7 Roboto, Helvetica, Arial, sans-serif; letter-spacing: 0.02em;
      color: var(--mui-palette-primary-main, #1976d2); background: transparent;
      border: 1px solid rgba(25, 118, 210, 0.5); border-radius: 4px; padding: 3px 9px;
    }
    button.copy-button:hover { background: rgba(25, 118, 210, 0.04); border-color: #1976d2; }
    button.copy-button svg { width: 16px; height: 16px; fill: currentColor; }
    """]


class CodeSnippetView(pn.viewable.Viewer):
    """'Copy as code': the last run as a short script, shown and copied to the clipboard."""

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.area = pmui.TextAreaInput(
            value="", label="The last run as code", auto_grow=True, rows=3, max_rows=14,
            sizing_mode="stretch_width", margin=(5, 5),
            sx={"& textarea": {"fontFamily": MONO, "fontSize": "12.5px"}})
        self.button = CopyButton(margin=(5, 5))
        self._layout = pmui.Column(self.button, self.area, sizing_mode="stretch_width",
                                   visible=False, margin=0)
        state.param.watch(self._update, ["history", "trees"])
        self._update()

    def __panel__(self):
        return self._layout

    @property
    def code(self) -> str:
        """The snippet shown now."""
        return self.area.value

    def _update(self, *_):
        code = state_snippet(self._state)
        self.area.value = self.button.text = code
        self._layout.visible = bool(code)
