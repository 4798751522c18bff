"""`WindowedTree`: a tree widget that keeps only the rows in view in the page.

`pmui.Tree` redraws every item it holds on each change (about 1.3 ms per item): at 100k leaves
an expand took 0.16-0.40 s. This component takes the same nested `items` and index-path
`expanded` / `active` as `pmui.Tree` (so the views feed it alike), flattens the visible rows in
the browser and draws only those in the scrolled window. Its JavaScript
(`assets/windowed_tree.js`) has no imports and goes inline with the page: nothing is fetched.

The DOM follows the WAI-ARIA tree pattern: `role=tree`, rows with `role=treeitem`,
`aria-level`, `aria-expanded` (inner nodes), `aria-selected`, and `data-path` = the key path
in keystr form (an item's `path`, else its `id`: "" for the root; a range or a fold row has
its own id). Keys: ArrowDown/Up move, ArrowRight expands or moves to the first child,
ArrowLeft collapses or moves to the parent, Home/End, Enter selects; a click on the arrow
toggles, a click on the row selects.
"""

from __future__ import annotations

import param
from panel.custom import JSComponent


class WindowedTree(JSComponent):
    """Nested items (`id`, `label`, `secondary`, `items`, `selectable`, `buttons`, and an
    optional `heat`: `{"color": css colour, "title": tooltip}` drawn as a swatch before the
    label), drawn a window of rows at a time."""

    items = param.List(default=[], doc="The items shown: nested dicts as for `pmui.Tree`.")
    expanded = param.List(default=[], doc="Index paths of the expanded items.")
    active = param.List(default=[], doc="Index path of the selected item (one, or none).")
    level_indent = param.Integer(default=16, doc="Indent per level, in pixels.")
    max_height = param.Integer(default=600, doc="Height of the scrolled window, in pixels.")
    clicked = param.Dict(default={}, doc="The last badge button clicked: `id` and `action`.")

    _esm = "assets/windowed_tree.js"

    _stylesheets = ["""
    /* no `display` on :host: Bokeh hides a component (`visible=False`) by its own
       `:host { display: none; }`, which a rule here would override */
    .wtree {
      position: relative; overflow: auto; outline: none; contain: strict;
      font: 13.5px/1.5 Roboto, Helvetica, Arial, sans-serif;
      color: var(--mui-palette-text-primary, #1f1f1f);
      background: transparent;  /* the card's own colour, in either theme */
    }
    .wtree:focus-visible { box-shadow: inset 0 0 0 2px var(--mui-palette-primary-main, #1976d2); }
    .wtree-spacer { position: relative; width: 100%; }
    .wtree-row {
      position: absolute; left: 0; right: 0; height: 28px; box-sizing: border-box;
      display: flex; align-items: center; gap: 6px; white-space: nowrap; cursor: default;
      border-radius: 4px;
    }
    .wtree-row:hover { background: rgba(127, 127, 127, 0.10); }
    .wtree-row.selected { background: rgba(25, 118, 210, 0.16); }
    .wtree:focus .wtree-row.focused { box-shadow: inset 0 0 0 1px rgba(25, 118, 210, 0.6); }
    .wtree-toggle {
      flex: 0 0 18px; text-align: center; cursor: pointer; user-select: none;
      color: var(--mui-palette-text-secondary, #666);
    }
    .wtree-label { white-space: pre; }
    .wtree-heat {
      flex: 0 0 12px; height: 12px; border-radius: 3px;
      box-shadow: inset 0 0 0 1px rgba(127, 127, 127, 0.35);
    }
    .wtree-secondary {
      color: var(--mui-palette-text-secondary, #6b6b6b); font-size: 12px; white-space: pre;
    }
    .wtree-badge {
      font: 500 11.5px/1.5 Roboto, Helvetica, Arial, sans-serif; border-radius: 10px;
      padding: 0 8px; cursor: pointer; border: 1px solid currentColor; background: transparent;
      color: var(--mui-palette-text-secondary, #555);
    }
    .wtree-badge.error { color: var(--mui-palette-error-main, #d32f2f); }
    .wtree-badge.warning { color: var(--mui-palette-warning-main, #ed6c02); }
    .wtree-badge.secondary { color: var(--mui-palette-secondary-main, #9c27b0); }
    .wtree-badge.info { color: var(--mui-palette-info-main, #0288d1); }
    .wtree-badge.contained.error { background: var(--mui-palette-error-main, #d32f2f); }
    .wtree-badge.contained.warning { background: var(--mui-palette-warning-main, #ed6c02); }
    .wtree-badge.contained.secondary { background: var(--mui-palette-secondary-main, #9c27b0); }
    .wtree-badge.contained.info { background: var(--mui-palette-info-main, #0288d1); }
    .wtree-badge.contained { color: #fff; border-color: transparent; }
    """]

    def _handle_msg(self, msg) -> None:
        if isinstance(msg, dict) and msg.get("type") == "button":
            self.clicked = {"id": msg.get("id"), "action": msg.get("action")}
