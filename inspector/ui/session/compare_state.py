"""`CompareState`: the comparison of two loaded trees (the Compare view), as params.

Part of the session state (`InspectorState.compare`): pick `diff_a` and `diff_b` and the
structural diff follows (`diff_index.compare`, in the session's worker); selecting a shared leaf
in the diff tree reads both values (max |a - b|, relative L2, histograms); `diff_compare_values`
reduces every shared leaf of both trees into the value table.
"""

from __future__ import annotations

import param

from inspector.ui.session.formatting import human_bytes
from inspector.ui.session.worker import Task


class CompareState(param.Parameterized):
    """Which two trees are compared, their diff and the values read so far."""

    diff_a = param.String(default="", doc="Name of the expected tree (a: the model).")
    diff_b = param.String(default="", doc="Name of the tree compared with it (b: a checkpoint).")
    diff_result = param.Parameter(default=None, doc="The `TreeDiff` of `diff_a` and `diff_b`.")
    diff_only = param.Boolean(default=False, doc="Show only the nodes that differ.")
    diff_compare_values = param.Event(doc="Compare the values of every shared leaf of a and b.")
    diff_table = param.List(default=[], doc="Whole-tree value diff: one row per leaf and "
                            "subtree (`value_table`), most changed first; [] until asked.")
    diff_histograms = param.Dict(default={}, doc="Per leaf path read so far: histograms of a, "
                                 "b and b - a (`TreeDiff.values_read`).")
    diff_values = param.Dict(default={}, doc="Per leaf path read so far: (max |a-b|, relative "
                             "L2) or why it could not be read.")

    def __init__(self, session, worker, view, **params):
        super().__init__(**params)
        self._session, self._worker, self._view = session, worker, view
        view.param.watch(self._on_diff_path, "path")
        session.param.watch(self._on_diff_trees, "trees")

    def clear(self) -> None:
        """Forgets the comparison (the session closed), without events."""
        with param.parameterized.discard_events(self):
            self.diff_result = None

    @param.depends("diff_a", "diff_b", watch=True)
    def _on_diff_trees(self, *_):
        from inspector.ui.session.diff_index import compare

        trees = self._session.trees
        a, b = trees.get(self.diff_a), trees.get(self.diff_b)
        old = self.diff_result
        if a is None or b is None:
            if old is not None:
                self._view.path = ""
                self.param.update(diff_result=None, diff_values={}, diff_table=[],
                                  diff_histograms={})
            return
        if old is not None and (old.a.name, old.b.name) == (a.name, b.name) \
                and old.a.tree is a.tree and old.b.tree is b.tree:
            return  # another tree was added or removed: this comparison stands

        asked = self._view.path

        def done(out):
            # a node picked while the comparison ran (a heatmap cell) stays selected
            path = self._view.path
            keep = path if path != asked and out.row(path) is not None else ""
            self._view.param.update(path=keep, expanded=out.default_expanded(self.diff_only))
            self.param.update(diff_result=out, diff_values={}, diff_table=[],
                              diff_histograms={})
            if keep:
                self._on_diff_path()  # its values, read now that the comparison is there

        self._worker.submit("comparing", Task(f"Comparing {a.name} with {b.name} …",
                                              lambda: compare(a, b), done), coalesce=True)

    @param.depends("diff_compare_values", watch=True)
    def _on_diff_compare_values(self):
        from inspector.core.diff.values import value_table

        trees = self._session.trees
        a, b = trees.get(self.diff_a), trees.get(self.diff_b)
        if a is None or b is None:
            self._session.error = "Pick the two trees to compare first."
            return

        def done(rows):
            if (self.diff_a, self.diff_b) == (a.name, b.name):
                self.diff_table = rows

        self._worker.submit("comparing values", Task(
            f"Comparing the values of {a.name} and {b.name} …",
            lambda: value_table(a.tree, b.tree, progress=self.values_progress), done),
            coalesce=True)

    def values_progress(self, done: int, total: int, nbytes: int, total_bytes: int) -> None:
        """Shows how far the whole-tree value diff has got (bytes of both trees reduced) as
        the progress bar and the status; called by the running thread."""
        self._worker.progress(
            done, total, f"Comparing values: {done} / {total} leaves, {human_bytes(nbytes)} / "
                         f"{human_bytes(total_bytes)} read",
            percent=100.0 * nbytes / total_bytes if total_bytes else None)

    @param.depends("diff_only", watch=True)
    def _on_diff_only(self):
        if self.diff_result is not None:  # open what the filter leaves, keep what was open
            opened = self.diff_result.default_expanded(self.diff_only)
            self._view.expanded = list(dict.fromkeys([*self._view.expanded, *opened]))

    def _on_diff_path(self, *_):
        diff, path = self.diff_result, self._view.path
        if diff is None or path in self.diff_values or not diff.comparable(path):
            return

        def show(value, histograms):
            if self.diff_result is diff:  # still the same comparison
                self.param.update(diff_values={**self.diff_values, path: value},
                                  diff_histograms={**self.diff_histograms, path: histograms})

        self._worker.submit("reading values", Task(
            f"Reading {path} in both trees …", lambda: diff.values_read(path),
            lambda out: show(*out), failed=lambda text: show(text, {})))
