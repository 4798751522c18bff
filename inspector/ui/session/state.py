"""`InspectorState`: everything one browser session knows, as params that the views watch.

Views only show these params and set them; the state does the work. That keeps each view
testable by setting params (no browser), and keeps sessions apart: the app builds one state
per session. Long work (loading a checkpoint, compiling and timing an op) runs in a worker
thread when `background` is on (the served app), synchronously otherwise (tests, scripts).
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
from inspector.ui.session.held_runs import HeldRuns
from inspector.ui.session.hosts import led_keep, led_run, shared_now, spans_hosts
from inspector.ui.session.loaded import LoadedTree, prepare
from inspector.ui.session.mesh_state import MeshState
from inspector.ui.session.op_settings import OpSettings, settings_classes
from inspector.ui.session.open_state import OpenState
from inspector.ui.session.records import Job, RunRecord
from inspector.ui.session.tree_index import index_for
from inspector.ui.session.tree_view_state import VIEWS, TreeViewState
from inspector.ui.session.worker import Task, Worker, error_text

__all__ = ["InspectorState", "error_text", "REPEAT_DELAY"]

REPEAT_DELAY = 1.0
"""Seconds a served session waits after showing a result before timing its repeats: a user
still changing weights gets each result without waiting for repeats of the last one."""


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
    op = param.Selector(default="weighted_sum", objects=list(settings_classes()),
                        doc="The operation to run (a key of `ops`).")
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
        self.runs = HeldRuns()  # the working set: trees read once, held packed, reused
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
            loaded = LoadedTree(name, loaded.tree, loaded.source, loaded.n_leaves,
                                loaded.n_params, loaded.nbytes)
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

    def stream_progress(self, progress) -> None:
        """Shows how far a run streamed into a file has got (leaves written / total, rate) as
        the status and the progress bar; called by the running thread."""
        from inspector.ui.session.formatting import human_bytes

        self.worker.progress(progress.done, progress.total,
                             f"Writing the result to a file (larger than the memory budget): "
                             f"{progress.done} / {progress.total} leaves, "
                             f"{human_bytes(progress.rate)}/s")

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
        self.runs.new_generation()  # timed repeats running now stop at their next execution
        self.worker.submit("running", self._run_task, coalesce=True)

    def _run_task(self):
        job = self.job()  # built when the run starts, so a queued run uses the latest settings
        device, repeats, eager = self.device, self.repeats, self.compare_eager
        generation = self.runs.new_generation()  # older timed repeats stop
        loaded = dict(self.trees)

        def work():
            # Once, on the working set (read once, then reused): the page shows this result
            # now; the timed repeats follow as their own work (`_repeat_task`).
            rr = self.runs.run_once(job, loaded, device, progress=self.stream_progress)
            index_for(rr.result)  # describe the result here, off the event loop
            eager_s = diff = None
            if eager and job.eager is not None:  # merges have no eager reference
                from inspector.ui.session.eager import max_abs_diff, time_eager

                eager_s, reference = time_eager(job.eager(device), repeats=min(repeats, 3))
                diff = max_abs_diff(rr.result, reference)
            return rr, eager_s, diff

        work = led_run(self, job, work)  # followers run it too when its inputs span hosts

        def done(out):
            rr, eager_s, diff = out
            record = RunRecord.of(len(self.history) + 1, job, rr, eager_s, device, repeats)
            view, same = self.tree_views["result"], self.result_name == job.label
            view.param.update(expanded=view.expanded if same else
                              index_for(rr.result).default_expanded(),
                              path=view.path if same else "")
            self.param.update(result=rr, result_name=job.label, error="", eager_seconds=eager_s,
                              eager_max_diff=diff, history=[*self.history, record],
                              run_status=f"{rr.op} finished in {rr.median_seconds * 1e3:.1f} ms "
                                         f"on {rr.device} (run {record.run})",
                              held=self.runs.held())
            # A result spread over several hosts is timed once: its repeats would be
            # collectives every process must run in step, which the page's cancellable,
            # delayed repeats cannot promise (a follower would wait in one for ever).
            if repeats > 1 and not rr.cost.get("streamed") and not spans_hosts(rr.result):
                def time_it():
                    if self.runs.current(generation):  # no newer run meanwhile
                        self.worker.submit("timing", lambda: self._repeat_task(
                            job, loaded, device, repeats, generation, rr), coalesce=True)

                # Served: not while the user is still changing settings (the session stays
                # free meanwhile, so the next change starts at once).
                self.worker.later(REPEAT_DELAY if self.background else 0, time_it)

        return Task(f"Running {job.op} on {device} …", work, done)

    def _repeat_task(self, job, loaded, device, repeats, generation, first):
        """The timed repeats of the run that gave `first`: after the page showed its result,
        cancelled by the next run; the timing card and history then show their median."""

        def work():
            return self.runs.repeat(job, loaded, device, repeats, generation, first)

        def done(rr):
            if self.runs.current(generation) and self.result is first:
                if self.history:
                    last = dataclasses.replace(
                        self.history[-1], median_ms=rr.median_seconds * 1e3,
                        min_ms=rr.min_seconds * 1e3, max_ms=rr.max_seconds * 1e3, gbps=rr.gbps)
                    self.history = [*self.history[:-1], last]
                self.param.update(result=rr, held=self.runs.held())

        def failed(text):  # a newer run stopped these repeats: nothing to say
            if self.runs.current(generation):
                self.error = text

        return Task(f"Timing {job.op}: {repeats} runs …", work, done, failed)

    @param.depends("keep_result", watch=True)
    def _on_keep_result(self):
        rr, label = self.result, self.result_name
        if rr is None:
            self.error = "Nothing to keep yet: run an operation first."
            return
        self._kept += 1
        base = f"{rr.op}_{self._kept}"
        self.runs.pin(rr.result)  # a loaded tree now: later runs must not write into it

        def work():
            buffers = rr.result.buffers.values() if isinstance(rr.result, inspector.PackedTree) \
                else ()
            if any(getattr(b, "is_deleted", lambda: False)() for b in buffers):
                raise inspector.InspectorError(
                    "The result was replaced by a newer run before it could be kept: keep the "
                    "result shown now.")
            if rr.op == "unstack":
                return [prepare(f"{base}[{i}]", t, f"result of {label}[{i}]")
                        for i, t in enumerate(rr.result)]
            return [prepare(base, rr.result, f"result of {label}")]

        work = led_keep(self, rr.result, work)

        def done(loaded):
            names = [self.add(t) for t in loaded]
            if spans_hosts(rr.result):
                shared_now(self, names)
            self.selected = names[0]

        self.worker.submit("keeping", Task(f"Keeping {label} …", work, done))

    def new_worker(self) -> Worker:
        """The worker this session runs its tasks in."""
        return Worker(self)
