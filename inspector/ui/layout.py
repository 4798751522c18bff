"""The page's frame: resizable columns for the trees, and a theme that follows the browser.

`columns` puts views side by side with a draggable gutter between each two (panel-splitjs'
`MultiSplit`, bundled with the package: nothing is fetched). Where the columns would be
narrower than they can be read (the area under `STACK_BELOW_PX`, e.g. a ~900 px window), they
stack instead: the result below the input, full width. `ThemeFollower` reports the browser's
`prefers-color-scheme`, and `follow_browser_theme` makes the page dark or light with it; the
page's own toggle still switches it by hand. `PAGE_THEME` makes the dark theme cover the app bar.
"""

from __future__ import annotations

import param
from panel.custom import JSComponent
from panel_splitjs import MultiSplit

STACK_BELOW_PX = 1000
"""Below this width of the area the columns get, they stack (a container query: the sidebar,
open or closed, is already taken off)."""

COLUMNS_CSS = f"""
:host {{ container-type: inline-size; width: 100%; }}
.split {{ height: auto; overflow: visible; align-items: flex-start; }}
.split > .split-panel {{ min-width: 0; }}
.gutter.gutter-horizontal {{
  align-self: stretch; background: transparent; width: 10px;
}}
.gutter.gutter-horizontal:hover, .gutter.gutter-horizontal:active {{
  background: var(--mui-palette-action-hover, rgba(127, 127, 127, 0.12));
}}
.gutter > .divider {{ --color: var(--mui-palette-divider, rgba(127, 127, 127, 0.3)); }}
.gutter::after {{ background-color: var(--mui-palette-text-secondary, #888); }}
@container (max-width: {STACK_BELOW_PX}px) {{
  .split.horizontal {{ flex-direction: column; align-items: stretch; }}
  .split.horizontal > .split-panel {{ width: 100% !important; }}
  .split.horizontal > .gutter {{ display: none; }}
}}
"""


def columns(*views, sizes: tuple[float, ...], min_widths: tuple[int, ...]) -> MultiSplit:
    """`views` side by side, `sizes` per cent of the width each at first, each at least its
    `min_widths` pixels while dragging; stacked when the area is narrow (see the module)."""
    return MultiSplit(*views, sizes=sizes, min_size=min_widths, gutter_size=10,
                      sizing_mode="stretch_width", margin=0, stylesheets=[COLUMNS_CSS])


class ThemeFollower(JSComponent):
    """Makes the page dark when the browser prefers a dark colour scheme, light when it prefers
    light: on load and on each change of the preference, in the browser (no round trip, so the
    first paint is already in the right theme). A `?theme=` in the URL wins; the page's toggle
    still switches by hand."""

    prefers_dark = param.Boolean(default=None, allow_None=True, doc=(
        "The browser's `prefers-color-scheme: dark` (None until the page has said)."))

    # The Page's `dark_theme` is set on its model in the browser: set from Python in answer to
    # this component's report it did not reach the page (panel-material-ui 0.16).
    _esm = """
    export function render({ model, el, view }) {
      el.style.display = "none"
      const query = window.matchMedia("(prefers-color-scheme: dark)")
      const chosen = new URLSearchParams(window.location.search).has("theme")
      const follow = () => {
        model.prefers_dark = query.matches
        if (chosen) { return }
        for (const m of view.model.document.all_models) {
          if (m.class_name === "Page" && m.data.dark_theme !== query.matches) {
            m.data.dark_theme = query.matches
          }
        }
      }
      query.addEventListener("change", follow)
      model.on("remove", () => query.removeEventListener("change", follow))
      follow()
    }
    """


DARK_PRIMARY = "#90caf9"
"""Material UI's own primary colour of the dark palette (what the page's buttons already use)."""

PAGE_THEME = {"light": {}, "dark": {
    "palette": {"primary": {"main": DARK_PRIMARY}},
    "components": {"MuiAppBar": {"styleOverrides": {"colorPrimary": {
        "backgroundColor": "var(--mui-palette-background-paper, #121212)",
        "color": "var(--mui-palette-text-primary, #ffffff)"}}}},
}}
"""The Page's `theme_config`: the dark theme covers the app bar too. panel-material-ui 0.16's
Page paints its app bar a fixed blue (#0072b5) unless the theme names a primary colour for the
current scheme (Page.jsx `header_sx`), and its AppBar then takes that primary colour even in
the dark (light blue): the dark scheme names MUI's own dark primary (unchanged for the rest of
the page) and gives the bar the paper colour (with Material's elevation tint) and text colour.
The light page keeps its blue bar."""


def follow_browser_theme() -> ThemeFollower:
    """The (invisible) component that makes the page it is on follow the browser's theme."""
    return ThemeFollower(width=0, height=0, margin=0)
