"""`InspectorState`: everything one browser session knows, as params that the views watch.

Views only show these params and set them; the state does the work. That keeps each view
testable by setting params (no browser), and keeps sessions apart: the app builds one state
per session. This module holds the trees, the selection, the op settings (the job), the result
and the history; beside it, each with its own params: `worker` (every long task, run in a
worker thread when `background` is on, at once otherwise; one error policy; `running` names
the task), `open` (`OpenState`: files, uploads, URLs), `compare` (`CompareState`: the diff),
`mesh` (`MeshState`), `health` (`HealthState`); `run_tasks` runs the op, times and keeps it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Callable
from contextlib import AbstractContextManager

import param

import inspector
from inspector import examples
from inspector.core import memory
from inspector.ui.session.compare_state import CompareState
from inspector.ui.session.example_sets import EXAMPLE_SETTINGS, example_trees
from inspector.ui.session.health_state import HealthState
from inspector.ui.session.job_runner import JobRunner
from inspector.ui.session.loaded import LoadedTree, prepare
from inspector.ui.session.mesh_state import MeshState
from inspector.ui.session.op_settings import OpSettings, settings_classes
from inspector.ui.session.open_state import OpenState
from inspector.ui.session.records import Job, RunRecord
from inspector.ui.session.run_marks import mark
from inspector.ui.session.run_tasks import REPEAT_DELAY, keep_task, run_task
from inspector.ui.session.tree_index import index_for
from inspector.ui.session.tree_view_state import VIEWS, TreeViewState
from inspector.ui.session.worker import Task, Worker, error_text

__all__ = ["InspectorState", "error_text", "REPEAT_DELAY"]


class InspectorState(param.Parameterized):
    """One session of the inspector: loaded trees, op settings, results and history."""

    # Loaded trees -----------------------------------------------------------------------------
    trees = param.Dict(default={}, doc="Loaded trees by name (`LoadedTree`), in load order.")
    selected = param.String(default="", doc="Name of the tree shown as input (indexed, unstacked).")
    device = param.Selector(default=None, objects=[], doc="Device the operations run on.")
    example = param.Selector(default=examples.DEFAULT_EXAMPLES[0], objects=list(examples.EXAMPLES),
                             doc="Built-in example that `load_example` loads.")
    file_root = param.String(default="", doc="Folder the file picker may open ('' hides it); "
                             "paths outside it are refused.")

    # Operation settings -----------------------------------------------------------------------
    op = param.Selector(default=next(iter(settings_classes())), objects=list(settings_classes()),
                        doc="The operation to run (a key of `ops`; the first tab's op at first).")
    ops = param.Dict(default={}, doc="Each op's settings (`OpSettings`) by op name: set their "
                     "params to set up a run, e.g. `ops['weighted_sum'].weights = [1, 2, 3]`.")
    auto_run = param.Boolean(default=True, doc="Re-run the op as soon as a live setting changes "
                             "(a weight slider), once it ran on these trees.")
    repeats = param.Integer(default=5, bounds=(1, 200), doc="Timed executions per run.")
    compare_eager = param.Boolean(default=False, doc="Also time the un-jitted jax.tree.map op.")

    # What the settings will do ----------------------------------------------------------------
    preview = param.String(default="", doc="What the current op will produce (dtypes, shapes).")
    form_error = param.String(default="", doc="Why the current op cannot run as set, or ''.")
    field_errors = param.Dict(default={}, doc="The current op's form errors by field id (an "
                              "index that does not parse).")

    # Results ----------------------------------------------------------------------------------
    result = param.Parameter(default=None, doc="The last successful `RunResult` (kept on errors).")
    result_name = param.String(default="", doc="What the result is (`weighted_sum(t1, t2, t3)`).")
    eager_seconds = param.Number(default=None, allow_None=True,
                                 doc="Median time of the un-jitted reference, when asked for.")
    eager_max_diff = param.Number(default=None, allow_None=True,
                                  doc="max |compiled - eager| over the result's leaves.")
    history = param.List(default=[], item_type=RunRecord,
                         doc="One `RunRecord` per successful run, oldest first.")
    error = param.String(default="", doc="The last failure, whole ('' after a success).")
    busy = param.Boolean(default=False, doc="Whether work is running for this session.")
    running = param.String(default="", doc="What runs now, by name ('comparing', 'running', "
                           "'scanning', ...: `Worker.submit`), '' when nothing does.")
    status = param.String(default="", doc="What the running work is doing.")
    progress = param.Number(default=None, allow_None=True, bounds=(0, 100), doc="How far the "
                            "running work has got, in percent (a run streamed into a file: "
                            "leaves written), or None when it cannot tell.")
    run_status = param.String(default="", doc="The last finished run, announced to screen "
                              "readers (`weighted_sum finished in 12.3 ms on cpu:0`).")
    held = param.List(default=[], doc="What this session's working set holds (`Holding`s: "
                      "tree, device, host or device memory, bytes).")

    # Tree views (each view's expanded nodes, selection and search: `tree_views`) --------------
    search_regex = param.Boolean(default=False, doc="Read searches as regular expressions.")

    # Downloads --------------------------------------------------------------------------------
    export_source = param.Selector(default="input", objects=["input", "result"],
                                   doc="Which tree a download writes: the selected one or "
                                   "the result.")
    export_format = param.Selector(default="safetensors", objects=["safetensors", "npz"],
                                   doc="The file format a download writes.")
    export_error = param.String(default="", doc="Why the last download failed ('' after a "
                                "success).")

    # Actions ----------------------------------------------------------------------------------
    run = param.Event(doc="Run the current operation.")
    keep_result = param.Event(doc="Add the result as a loaded tree (so operations chain).")
    load_example = param.Event(doc="Load the trees of `example`.")
    remove_tree = param.Event(doc="Remove the selected tree.")

    background = param.Boolean(default=False, doc="Run long work in a worker thread (the served "
                               "app); off, it runs at once, which tests rely on.")

    def __init__(self, **params):
        super().__init__(**params)
        # Per tree view ('input', 'result', 'diff'): its expanded nodes, selection and search.
        self.tree_views = {name: TreeViewState(name=f"{name} tree") for name in VIEWS}
        names = [inspector.device_name(d) for d in inspector.devices()]
        self.param.device.objects = names
        if self.device not in names:
            self.device = names[0]
        self.worker = self.new_worker()  # runs the work off the event loop, one error policy
        self.open = OpenState(self, self.worker)  # opening files, uploads, URLs
        self.compare = CompareState(self, self.worker, self.tree_views["diff"])  # the diff
        self._kept = 0
        self.mesh = MeshState(self)  # the mesh and the specs; its panel sets them
        self.health = HealthState(self)  # the scan and the timeline
        self.runs = JobRunner()  # runs jobs on the working set: trees read once, held packed
        self.hosts = None  # the `hosts.Leader` when served from several hosts
        self.session_id = 0
        # What a finished job's view updates run inside: the served app holds the page's
        # document there, so they reach the browser as one message, not one per change.
        self.updates_together: Callable[[], AbstractContextManager] = contextlib.nullcontext
        self.ops = {name: cls() for name, cls in settings_classes().items()}
        self.param.op.objects = list(self.ops)  # ops registered after this module loaded too
        for settings in self.ops.values():
            settings.param.watch(self._update_preview, settings.watched())
            if settings.live:
                settings.param.watch(lambda *_, s=settings: self._on_live(s), list(settings.live))
            if settings.follows_selection:
                settings.tree = self.selected
                settings.param.watch(self._on_settings_tree, "tree")
        self._update_preview()

    @property
    def settings(self) -> OpSettings:
        """The settings of the current op (`ops[op]`)."""
        return self.ops[self.op]

    def refresh_held(self) -> None:
        """Shows what the working set holds now (after a run, an eviction, a budget change)."""
        self.held = self.runs.held()

    def close(self) -> None:
        """Releases everything this session held (its browser session ended): the working
        set, the result, the history and the loaded trees; freed memory goes back to the OS."""
        self.runs.close()
        self.worker.clear()
        self.compare.clear()
        # Without events: the page's views are gone (updating their Bokeh models would raise
        # and leave the rest of this undone).
        with param.parameterized.discard_events(self):
            self.param.update(result=None, history=[], trees={}, held=[])
        # Buffers can hang in reference cycles (an exception's traceback holds the frames of
        # the run it stopped): collect them now, not whenever the cyclic collector next runs.
        gc.collect()
        memory.give_back()

    # Loading ----------------------------------------------------------------------------------

    def add(self, loaded: LoadedTree, select: bool = False) -> str:
        """Adds a prepared tree under a unique name; returns the name used."""
        name = self._unique(loaded.name)
        if name != loaded.name:
            loaded = dataclasses.replace(loaded, name=name)
        self.trees = {**self.trees, name: loaded}
        if select or not self.selected:
            self.selected = name
        return name

    def add_tree(self, name: str, tree, source: str = "added", select: bool = False) -> str:
        """Describes, packs and adds a pytree (synchronously); returns the name used."""
        return self.add(prepare(name, tree, source), select)

    def load_example_now(self, name: str, settings: bool = True) -> dict[str, str]:
        """Loads a built-in example at once; returns {example's tree name: name used}."""
        return self._add_example(name, example_trees(name), settings)

    def load_defaults(self, names=examples.DEFAULT_EXAMPLES) -> None:
        """Loads the default examples (small: well under 0.5 s) with every example's settings,
        the first example's last, so its op and first tree are what the session opens on."""
        renamed = {name: self.load_example_now(name, settings=False) for name in names}
        for name in reversed(names):
            if name in EXAMPLE_SETTINGS:
                self.apply_settings(EXAMPLE_SETTINGS[name], renamed[name])
        first = next(iter(renamed[names[0]].values()), None)
        if first and not self.settings.follows_selection:
            self.selected = first

    def _unique(self, name: str) -> str:
        if name not in self.trees:
            return name
        n = 2
        while f"{name} ({n})" in self.trees:
            n += 1
        return f"{name} ({n})"

    def _add_example(self, name: str, loaded: list[LoadedTree], settings: bool) -> dict:
        renamed = {t.name: self.add(t) for t in loaded}
        if settings:
            self.selected = next(iter(renamed.values()), self.selected)
            if name in EXAMPLE_SETTINGS:
                self.apply_settings(EXAMPLE_SETTINGS[name], renamed)
        return renamed

    def apply_settings(self, settings: dict, names: dict | None = None) -> None:
        """Applies an example's settings: `op` (the op to show), each op's values by op name
        (`{"weighted_sum": {"trees": [...], "weights": [...]}}`), `diff` (two tree names);
        `names` maps the example's tree names to the names they were loaded under."""
        names = names or {}
        focus: dict[str, list] = {}
        for op, values in settings.items():
            if op in self.ops:
                focus[op] = self.ops[op].apply(values, names, self.trees)
        update: dict = {}
        if "diff" in settings:
            a, b = (names.get(n, n) for n in settings["diff"])
            self.compare.param.update(diff_a=a, diff_b=b)
        if "op" in settings:
            update["op"] = settings["op"]
            if focus.get(settings["op"]):
                update["selected"] = focus[settings["op"]][0]
        self.param.update(**update)

    @param.depends("load_example", watch=True)
    def _on_load_example(self):
        name = self.example

        def work():
            return example_trees(name)

        self.worker.submit("loading", Task(f"Loading {name} …", work,
                                           lambda loaded: self._add_example(name, loaded, True)))

    @param.depends("remove_tree", watch=True)
    def _on_remove_tree(self):
        name = self.selected
        if name not in self.trees:
            return
        trees = {k: v for k, v in self.trees.items() if k != name}
        for settings in self.ops.values():
            settings.forget(name)
        self.param.update(trees=trees, selected=next(iter(trees), ""))

    # Selection --------------------------------------------------------------------------------

    @param.depends("selected", watch=True)
    def _on_selected(self):
        for settings in self.ops.values():
            if settings.follows_selection and settings.tree != self.selected:
                settings.tree = self.selected
        loaded = self.trees.get(self.selected)
        self.tree_views["input"].param.update(
            path="", search="", expanded=loaded.index.default_expanded() if loaded else [])

    def shown(self, source: str):
        """`(name, tree, TreeIndex)` that the `source` tree view shows ('input' or 'result'),
        or None when there is nothing to show."""
        if source == "input":
            loaded = self.trees.get(self.selected)
            return None if loaded is None else (loaded.name, loaded.tree, loaded.index)
        if self.result is None:
            return None
        return self.result_name, self.result.result, index_for(self.result.result)

    def _on_settings_tree(self, event):
        if event.new and event.new != self.selected and event.new in self.trees:
            self.selected = event.new

    def _on_live(self, settings: OpSettings):
        # Only once these very trees ran with this op: then the kernel is compiled and a
        # re-run costs about the run itself, so a slider can drive it.
        last = self.history[-1] if self.history else None
        if (self.auto_run and settings is self.settings and last is not None
                and last.op == settings.op and list(last.trees) == settings.uses()):
            self.param.trigger("run")

    # Previews ---------------------------------------------------------------------------------

    @param.depends("op", "trees", watch=True)
    def _update_preview(self, *_):
        if not self.ops:
            return  # still in __init__
        text, error, field_errors = self.settings.preview(self.trees)
        self.param.update(preview=text, form_error=error, field_errors=dict(field_errors))

    # Running ----------------------------------------------------------------------------------

    def job(self) -> Job:
        """The job the current op's settings describe.

        Raises:
            InspectorError: the settings are incomplete or an index cannot be parsed.
        """
        return self.settings.job(self.trees)

    @param.depends("run", watch=True)
    def _on_run(self):
        mark("run event", self)
        self.runs.new_generation()  # timed repeats running now stop at their next execution
        self.worker.submit("running", lambda: run_task(self), coalesce=True)

    @param.depends("keep_result", watch=True)
    def _on_keep_result(self):
        if self.result is None:
            self.error = "Nothing to keep yet: run an operation first."
            return
        self._kept += 1
        self.worker.submit("keeping", keep_task(self, f"{self.result.op}_{self._kept}"))

    def new_worker(self) -> Worker:
        """The worker this session runs its tasks in."""
        return Worker(self)
