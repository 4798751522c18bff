"""`TreeViewState`: what one tree view shows (expanded nodes, selection, search), per view."""

from __future__ import annotations

import param

VIEWS = ("input", "result", "diff")
"""The session's tree views: the input tree, the result tree and the comparison's union."""


class TreeViewState(param.Parameterized):
    """The state of one lazy tree view; the session holds one per view (`VIEWS`)."""

    expanded = param.List(default=[], doc="Ids (key paths, range ids) of the expanded nodes.")
    path = param.String(default="", doc="Key path of the selected node ('' when none).")
    search = param.String(default="", doc="Leaf search by key path (substring or regex).")
