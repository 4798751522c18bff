"""How numbers, shapes and durations read in the app: short, with human units."""

from __future__ import annotations

import html
import math

MONO = "ui-monospace, Menlo, Consolas, 'DejaVu Sans Mono', monospace"
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_COUNT_UNITS = ("", "K", "M", "B", "T")


def human_bytes(n: int | float) -> str:
    """`1536` -> `'1.5 KiB'`; bytes below 1024 are exact (`'24 B'`); never '1e+03 KiB'.

    >>> human_bytes(1536), human_bytes(24), human_bytes(1023 * 1024)
    ('1.5 KiB', '24 B', '0.999 MiB')
    """
    n = float(n)
    if n < 1024:
        return f"{int(n)} B"
    exp = min(int(math.log(n, 1024)), len(_BYTE_UNITS) - 1)
    if n / 1024**exp >= 999.5 and exp < len(_BYTE_UNITS) - 1:
        exp += 1  # 1000-1023 KiB as 0.98 MiB: `.3g` would write '1e+03 KiB'
    return f"{n / 1024**exp:.3g} {_BYTE_UNITS[exp]}"


def human_count(n: int | float) -> str:
    """`20004` -> `'20K'`, `1234567` -> `'1.23M'`; below 1000 exact (`'12'`)."""
    n = float(n)
    if abs(n) < 1000:
        return f"{int(n)}"
    exp = min(int(math.log10(abs(n)) // 3), len(_COUNT_UNITS) - 1)
    return f"{n / 1000**exp:.3g}{_COUNT_UNITS[exp]}"


def shape_text(dtype: str | None, shape) -> str:
    """`('float32', (3, 2))` -> `'float32[3,2]'`; a 0-d leaf reads `'float32[]'`."""
    if shape is None:
        return dtype or "?"
    return f"{dtype}[{','.join(str(d) for d in shape)}]"


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds with 3 significant digits (`'0.0123 ms'`, `'85.4 ms'`)."""
    if seconds is None:
        return "–"
    value = seconds * 1e3
    if value >= 100:
        return f"{value:,.0f} ms"
    return f"{value:.3g} ms"


def plural(n: int, word: str, many: str | None = None) -> str:
    """`(1, 'leaf', 'leaves')` -> `'1 leaf'`; `(2, ...)` -> `'2 leaves'` (thousands separated)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def pre(text: str, color: str = "inherit", css_class: str = "") -> str:
    """Text as an HTML monospace block that keeps its lines and caret columns."""
    return (f"<pre class='{css_class}' style='margin:0;white-space:pre-wrap;font-size:12.5px;"
            f"color:{color};"
            f"font-family:{MONO}'>{html.escape(text)}</pre>")
