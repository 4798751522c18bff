"""`HealthState`: the session's Health and Timeline views' state (the scan of the selected
tree, its colouring and "next NaN"; the timeline of several trees or a folder, and a cell
picked in its heatmap sent to the Compare view).

Held by the session state as `state.health`; the work runs through the session's queue
(off the event loop in the served app), the figures come from `inspector.scan` and
`inspector.timeline`: the library, the app and the notebook show the same numbers.
"""

from __future__ import annotations

import os

import param

import inspector
from inspector.ui.session.health_figures import COLOR_BY
from inspector.ui.session.tree_view_state import TreeViewState
from inspector.ui.session.worker import Task, error_text

METRICS = ("rel_change", "l2", "nonfinite")


class HealthState(param.Parameterized):
    """The Health and Timeline state of one session (`state.health`)."""

    scan = param.Parameter(default=None, doc="The `Scan` of `scanned` (None before a scan).")
    scanned = param.String(default="", doc="Name of the tree `scan` was made of.")
    scan_tree = param.Event(doc="Scan the selected tree.")
    only_nonfinite = param.Boolean(default=False, doc="Show only leaves holding NaN/Inf.")
    color_by = param.Selector(default=COLOR_BY[0], objects=list(COLOR_BY),
                              doc="The figure the scanned tree's rows are coloured by.")
    next_nan = param.Event(doc="Select the next leaf holding NaN/Inf, in tree order.")
    nan_at = param.Integer(default=-1, doc="Position in `scan.nonfinite()` last selected.")

    timeline_trees = param.List(default=[], doc="Loaded trees of the timeline, in step order.")
    timeline_folder = param.String(default="", doc="A folder of checkpoints (in file_root).")
    open_timeline = param.Event(doc="Build the timeline of `timeline_trees` or the folder.")
    timeline = param.Parameter(default=None, doc="The `Timeline` built last.")
    timeline_names = param.List(default=[], doc="The loaded tree (or checkpoint path) of "
                                "each step of `timeline`.")
    metric = param.Selector(default=METRICS[0], objects=list(METRICS),
                            doc="The heatmap's figure.")
    depth = param.Integer(default=2, bounds=(1, 8), doc="How deep the heatmap folds subtrees.")
    picked = param.Tuple(default=("", -1), doc="The heatmap cell last picked: (row path, step).")
    compare_shown = param.Event(doc="Raised when a picked cell was sent to the Compare view.")

    def __init__(self, state, **params):
        super().__init__(**params)
        self._state = state
        self.tree_view = TreeViewState(name="health tree")
        state.param.watch(self._on_selected, "selected")

    # scanning -------------------------------------------------------------------------------

    def _on_selected(self, *_):
        if self.scanned != self._state.selected:
            self.tree_view.param.update(path="", expanded=[])

    @param.depends("scan_tree", watch=True)
    def _on_scan_tree(self):
        state = self._state
        loaded = state.trees.get(state.selected)
        if loaded is None:
            state.error = "Load a tree first: the scan reads the selected tree."
            return

        def progress(done, total):
            state.worker.progress(done, total, f"Scanning {loaded.name}: {done} / {total} leaves")

        def work():
            return inspector.scan(loaded.tree, device=state.device, progress=progress)

        def done(scan):
            self.tree_view.param.update(path="", expanded=loaded.index.default_expanded())
            self.param.update(scan=scan, scanned=loaded.name, nan_at=-1)

        state.worker.submit("scanning", Task(f"Scanning {loaded.name} …", work, done),
                            coalesce=True)

    @param.depends("next_nan", watch=True)
    def _on_next_nan(self):
        bad = self.scan.nonfinite() if self.scan is not None else []
        if not bad:
            return
        at = (self.nan_at + 1) % len(bad)
        self.nan_at = at
        self.tree_view.path = bad[at].path

    # the timeline ---------------------------------------------------------------------------

    @param.depends("open_timeline", watch=True)
    def _on_open_timeline(self):
        state = self._state
        if self.timeline_folder:
            try:
                sources, names = _inside(state.file_root, self.timeline_folder), None
            except inspector.InspectorError as exc:
                state.error = error_text(exc, state.file_root)
                return
        else:
            names = [n for n in self.timeline_trees if n in state.trees]
            if len(names) < 2:
                state.error = "Pick two loaded trees or more, in step order, or a folder."
                return
            sources = [state.trees[n].tree for n in names]

        def progress(done, total):
            state.worker.progress(done, total, f"Reading checkpoints: {done} / {total} leaves")

        def work():
            from inspector.core.health.sources import checkpoint_folder

            t = inspector.timeline(sources, device=state.device, progress=progress)
            steps = names if names else [str(p) for _, p in checkpoint_folder(sources)]
            return t, steps

        def done(out):
            self.param.update(timeline=out[0], timeline_names=out[1], picked=("", -1))

        state.worker.submit("building the timeline", Task("Building the timeline …", work, done),
                            coalesce=True)

    def pick(self, row: str, step: int) -> None:
        """Sends heatmap cell (`row`, step index `step`) to the Compare view: the trees of
        steps `step - 1` and `step` as a and b, `row` selected (the first step: itself)."""
        state = self._state
        if self.timeline is None or not 0 <= step < len(self.timeline_names):
            return
        self.picked = (row, step)
        a, b = (max(step - 1, 0), step)
        try:  # a step's checkpoint moved or damaged since the timeline read it
            names = [self._loaded_name(i) for i in (a, b)]
        except inspector.InspectorError as exc:
            state.error = error_text(exc, state.file_root)
            return
        view = state.tree_views["diff"]
        view.path = ""  # then `row`, picked while the comparison is built: it stays selected
        state.compare.param.update(diff_a=names[0], diff_b=names[1])
        view.path = row
        self.compare_shown = True

    def _loaded_name(self, step: int) -> str:
        """The loaded tree of timeline step `step`, opening the checkpoint if needed."""
        state = self._state
        name = self.timeline_names[step]
        if name in state.trees:
            return name
        from inspector.ui.session.loaded import prepare
        from inspector.ui.session.origins import File

        label = f"step {self.timeline.labels[step]}"
        if label not in state.trees:
            state.add(prepare(label, inspector.load(name), File(name)))
        return label


def _inside(root: str, folder: str) -> str:
    """`folder` (relative to `root`, or absolute inside it) as an absolute path.

    Raises:
        InspectorError: it lies outside `root`.
    """
    path = os.path.realpath(os.path.join(root or os.getcwd(), folder))
    base = os.path.realpath(root or os.getcwd())
    if os.path.commonpath([path, base]) != base:
        raise inspector.InspectorError(f"{folder}: outside the folder the app may open ({base}).")
    return path
