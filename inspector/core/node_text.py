"""How a pytree node reads in one line, wherever the library or the app shows it.

A node is `float32[3,4]` (an array leaf: dtype and shape), `dict of 4` (a container and how
many children it has), `None`, `‹ListConfig› [3 items]` (an `Opaque`: an object a checkpoint
describes, by its class and size), or its class name (a leaf that is not an array); an inner node's
totals read `4 leaves · 12 params · 48 B`. The input and result trees, the comparison's union
tree and its selected-node panel, and the structure diff (`Difference.a` / `.b` of a missing,
extra or type difference) all say it this way, from here, with these number words.
"""

from __future__ import annotations

import math

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


def plural(n: int, word: str, many: str | None = None) -> str:
    """`(1, 'leaf', 'leaves')` -> `'1 leaf'`; `(2, ...)` -> `'2 leaves'` (thousands separated)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def shape_text(dtype: str | None, shape) -> str:
    """`('float32', (3, 2))` -> `'float32[3,2]'`; a 0-d leaf reads `'float32[]'`."""
    if shape is None:
        return dtype or "?"
    return f"{dtype}[{','.join(str(d) for d in shape)}]"


def container_text(name: str, n_children: int) -> str:
    """`('dict', 4)` -> `'dict of 4'` (thousands separated: `'list of 1,000'`)."""
    return f"{name} of {n_children:,}"


def node_text(row) -> str:
    """What the node of a `describe` row is, in one line.

    >>> from inspector.core.describe import describe
    >>> import numpy as np
    >>> [node_text(r) for r in describe({"w": np.zeros((3, 4), np.float32), "n": None,
    ...                                  "s": "text", "t": (1.0,)})]
    ['dict of 4', 'None', 'str', 'tuple of 1', 'float32[]', 'float32[3,4]']
    """
    if row.kind == "leaf":
        return row.type_name if row.shape is None else shape_text(row.dtype, row.shape)
    if row.kind == "opaque":  # ‹ListConfig› [3 items]
        return row.opaque or f"\u2039{row.type_name}\u203a"
    if row.kind == "None":
        return "None"
    # namedtuples, dataclasses and custom nodes by their kind: their class names are the
    # user's own, and say less about what the node holds
    return container_text(row.type_name if row.kind in ("dict", "list", "tuple") else row.kind,
                          row.n_children)


def totals_text(n_leaves: int, n_params: int, nbytes: int) -> str:
    """`(4, 12, 48)` -> `'4 leaves · 12 params · 48 B'` (a subtree's totals)."""
    return f"{plural(n_leaves, 'leaf', 'leaves')} · {human_count(n_params)} params · " \
        f"{human_bytes(nbytes)}"
