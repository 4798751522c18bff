"""Two trees compared: `diff(a, b)`, every difference with its key path, and the values.

- `structure`: `diff` and `Difference` (missing, extra, shape, dtype, type, state; with
  `values=True` also value); headers only unless values are asked for;
- `union`: `DiffUnion`, the union of both trees' nodes, each with the differences at it and
  below it (the app's Compare tree is built on it);
- `values`: how much the values differ, leaf by leaf and per subtree (max |a-b|, relative L2,
  cosine, fraction changed) as compiled reductions: the one implementation that
  `diff(values=True)`, the app's Compare view and `pytree-inspector diff --values` use.
"""

from __future__ import annotations

from inspector.core.diff.structure import (
    DTYPE,
    EXTRA,
    MISSING,
    SHAPE,
    STATE,
    TYPE,
    VALUE,
    Difference,
    diff,
)

__all__ = ["DTYPE", "EXTRA", "MISSING", "SHAPE", "STATE", "TYPE", "VALUE", "Difference", "diff"]
