"""How numbers, shapes and durations read in the app: short, with human units.

The words for a node and its numbers (`human_bytes`, `human_count`, `plural`, `shape_text`,
`node_text`, `totals_text`) live once in `inspector.core.node_text`, shared with the library's
structure diff; they are importable from here too. This module adds the app's own: durations,
monospace HTML.
"""

from __future__ import annotations

import html

from inspector.core.node_text import (
    human_bytes,
    human_count,
    node_text,
    plural,
    shape_text,
    totals_text,
)

__all__ = ["MONO", "human_bytes", "human_count", "ms", "node_text", "plural", "pre",
           "shape_text", "totals_text"]

MONO = "ui-monospace, Menlo, Consolas, 'DejaVu Sans Mono', monospace"


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds with 3 significant digits (`'0.0123 ms'`, `'85.4 ms'`)."""
    if seconds is None:
        return "–"
    value = seconds * 1e3
    if value >= 100:
        return f"{value:,.0f} ms"
    return f"{value:.3g} ms"


def pre(text: str, color: str = "inherit", css_class: str = "") -> str:
    """Text as an HTML monospace block that keeps its lines and caret columns."""
    return (f"<pre class='{css_class}' style='margin:0;white-space:pre-wrap;font-size:12.5px;"
            f"color:{color};"
            f"font-family:{MONO}'>{html.escape(text)}</pre>")
