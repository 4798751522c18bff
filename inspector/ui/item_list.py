"""`ItemList`: a list of two-line items, one selected, drawn in plain DOM.

The sidebar's list of loaded trees is on the page from its first paint: as a `pmui.MenuList`
(Material list items, each a React tree with ripples and icons) it took ~130 ms of the
browser's main thread before the input tree showed. This component draws the same items with
a few elements each (`assets/item_list.js`, inline with the page: nothing is fetched), styled
from the page's Material theme variables so it follows the light and dark themes.

The DOM follows the WAI-ARIA listbox pattern: `role=listbox` named by the title, items with
`role=option` and `aria-selected`; ArrowDown/Up, Home/End move, Enter or Space selects, a
click selects.
"""

from __future__ import annotations

import param
from panel.custom import JSComponent


class ItemList(JSComponent):
    """Items (`label`, optional `secondary` and `icon`: a Material Icons name), one selectable
    at a time (`active`, an index), under an optional `title`."""

    items = param.List(default=[], doc="Dicts with `label`, `secondary` and `icon`.")
    active = param.Integer(default=None, allow_None=True, doc="The selected item's index.")
    title = param.String(default="", doc="The heading above the list (its accessible name).")

    _esm = "assets/item_list.js"

    _stylesheets = ["""
    :host { display: block; }
    .ilist { font: 14px/1.43 Roboto, Helvetica, Arial, sans-serif;
             color: var(--mui-palette-text-primary, #1f1f1f); }
    .ilist-title { font-weight: 500; padding: 5px 10px 4px 10px; }
    .ilist-box { outline: none; padding: 4px 0; }
    .ilist-box:focus-visible {
      box-shadow: inset 0 0 0 2px var(--mui-palette-primary-main, #1976d2);
    }
    .ilist-item {
      display: flex; align-items: flex-start; gap: 12px; padding: 4px 16px;
      cursor: pointer; user-select: none;
    }
    .ilist-item:hover { background: var(--mui-palette-action-hover, rgba(0, 0, 0, 0.04)); }
    .ilist-item.selected {
      background: rgba(var(--mui-palette-primary-mainChannel, 25 118 210) / 0.12);
      box-shadow: inset 3px 0 0 var(--mui-palette-primary-main, #1976d2);
    }
    .ilist-box:focus .ilist-item.focused {
      box-shadow: inset 0 0 0 1px var(--mui-palette-primary-main, #1976d2);
    }
    .ilist-icon {
      font-family: "Material Icons"; font-size: 24px; line-height: 1; width: 24px;
      flex: 0 0 24px; margin-top: 4px; color: var(--mui-palette-action-active, #555);
      font-feature-settings: "liga"; -webkit-font-smoothing: antialiased;
    }
    .ilist-text { min-width: 0; overflow-wrap: anywhere; }
    .ilist-secondary { color: var(--mui-palette-text-secondary, #6b6b6b); }
    """]
