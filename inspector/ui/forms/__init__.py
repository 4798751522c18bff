"""One form per operation, bound to that op's settings (`inspector/ui/session/ops/`).

A form is a `pn.viewable.Viewer` taking `(settings, state)`: it shows and sets the params of
its settings object, and reads the session's loaded trees from the state. `@form("op")`
registers it; `forms()` imports every module here, so a new op's form dropped in this folder
gets its tab in the operation panel without editing any list.
"""

from __future__ import annotations

import importlib
import pkgutil

_FORMS: dict[str, type] = {}


def form(op: str):
    """Class decorator: makes the class the form of `op`."""

    def register(cls):
        _FORMS[op] = cls
        return cls

    return register


def forms() -> dict[str, type]:
    """Every op's form class by op name (imports the modules of this folder once)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return dict(_FORMS)
