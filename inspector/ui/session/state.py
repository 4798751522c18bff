"""`InspectorState`: everything one browser session knows, as params that the views watch.

Views only show these params and set them; the state does the work. That keeps each view
testable by setting params (no browser), and keeps sessions apart: the app builds one state
per session. Long work (loading a checkpoint, compiling and timing an op) runs in a worker
thread when `background` is on (the served app), synchronously otherwise (tests, scripts).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager

import param

import inspector
from inspector import examples
from inspector.core import memory
from inspector.ui.session.example_sets import EXAMPLE_SETTINGS, example_trees
from inspector.ui.session.health_state import HealthState
from inspector.ui.session.held_runs import Cancelled, HeldRuns
from inspector.ui.session.hosts import led_keep, led_run, shared_now, spans_hosts
from inspector.ui.session.loaded import LoadedTree, prepare
from inspector.ui.session.mesh_state import MeshState
from inspector.ui.session.op_settings import OpSettings, settings_classes
from inspector.ui.session.records import Job, RunRecord
from inspector.ui.session.tree_index import index_for
from inspector.ui.session.tree_view_state import VIEWS, TreeViewState


def error_text(exc: BaseException, root: str = "") -> str:
    """An error as the app shows it: the inspector's own messages whole (they name the key
    paths and the fix), anything else with its type and the last line of its traceback; files
    relative to `root`, never a server path outside it (`relative_to_root`)."""
    from inspector.ui.session.checkpoint_files import relative_to_root

    if isinstance(exc, inspector.InspectorError):
        return relative_to_root(str(exc), root)
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f"\n  at {where[0].filename}:{where[0].lineno}" if where else ""
    return relative_to_root(f"Unexpected {type(exc).__name__}: {exc}{at}", root)


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
    open_paths = param.List(default=[], doc="Checkpoint files or folders to open (in file_root).")
    open_error = param.String(default="", doc="Why the last open or upload failed ('' after "
                              "a success); the trees already loaded stay.")
    remote_prefixes = param.List(default=None, allow_None=True, doc="URL prefixes `open_url` "
                                 "may open ([]: any URL); None: URLs are refused (a served app "
                                 "without --allow-remote).")
    open_url_text = param.String(default="", doc="The checkpoint URL `open_url` opens.")
    open_url = param.Event(doc="Opens `open_url_text` (structure only), if URLs are allowed.")

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

    # Comparing two trees (the diff view) -----------------------------------------------------
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
    open_files = param.Event(doc="Open the checkpoints in `open_paths`.")
    remove_tree = param.Event(doc="Remove the selected tree.")

    background = param.Boolean(default=False, doc="Run long work in a worker thread (the served "
                               "app); off, it runs at once, which tests rely on.")

    def __init__(self, **params):
        super().__init__(**params)
        # Per tree view ('input', 'result', 'diff'): its expanded nodes, selection and search.
        self.tree_views = {name: TreeViewState(name=f"{name} tree") for name in VIEWS}
        self.tree_views["diff"].param.watch(self._on_diff_path, "path")
        names = [inspector.device_name(d) for d in inspector.devices()]
        self.param.device.objects = names
        if self.device not in names:
            self.device = names[0]
        self._queue: list = []
        self._kept = 0
        self.mesh = MeshState(self)  # the mesh and the specs; its panel sets them
        self.health = HealthState(self, error_text)  # the scan and the timeline
        self.runs = HeldRuns()  # the working set: trees read once, held packed, reused
        self.hosts = None  # the `hosts.Leader` when served from several hosts
        self.session_id = 0
        # What a finished job's view updates run inside: the served app holds the page's
        # document there, so they reach the browser as one message, not one per change.
        self.updates_together: Callable[[], AbstractContextManager] = contextlib.nullcontext
        self._progress_shown = 0.0
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
        self._queue.clear()
        # Without events: the page's views are gone (updating their Bokeh models would raise
        # and leave the rest of this undone).
        with param.parameterized.discard_events(self):
            self.param.update(result=None, history=[], trees={}, held=[], diff_result=None)
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
            update["diff_a"], update["diff_b"] = (names.get(n, n) for n in settings["diff"])
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

        def done(loaded, exc):
            if exc is not None:
                self.error = error_text(exc, self.file_root)
                return
            self._add_example(name, loaded, True)

        self._submit(lambda: (f"Loading {name} …", work, done))

    @param.depends("open_files", watch=True)
    def _on_open_files(self):
        from inspector.ui.session.checkpoint_files import open_checkpoints

        paths, root = list(self.open_paths), self.file_root
        self._submit(lambda: (f"Opening {len(paths)} checkpoint(s) …",
                              lambda: open_checkpoints(root, paths), self._opened))

    @param.depends("open_url", watch=True)
    def _on_open_url(self):
        from inspector.ui.session.checkpoint_files import open_remote

        url, prefixes = self.open_url_text, self.remote_prefixes
        self._submit(lambda: ("Opening the URL …",
                              lambda: [open_remote(url, prefixes, self.read_progress)],
                              self._opened))

    def _progress_due(self, done, total) -> bool:
        """Whether a progress report is shown now: the last one always, the others at most
        every 0.2 s (they come from the working thread, per leaf or block)."""
        now = time.monotonic()
        if done < total and now - self._progress_shown < 0.2:
            return False
        self._progress_shown = now
        return True

    def read_progress(self, progress) -> None:
        """Shows a remote read's progress (bytes / total, rate) as the status; called by the
        reading thread, at most every 0.2 s."""
        from inspector.ui.session.formatting import human_bytes

        if not self._progress_due(progress.done, progress.total):
            return
        self.status = (f"Reading {progress.source}: {human_bytes(progress.done)} / "
                       f"{human_bytes(progress.total)}, {human_bytes(progress.rate)}/s")

    def stream_progress(self, progress) -> None:
        """Shows how far a run streamed into a file has got (leaves written / total, rate) as
        the status and the progress bar; called by the running thread, at most every 0.2 s."""
        from inspector.ui.session.formatting import human_bytes

        if not self._progress_due(progress.done, progress.total):
            return
        self.param.update(
            progress=100.0 * progress.done / max(progress.total, 1),
            status=f"Writing the result to a file (larger than the memory budget): "
                   f"{progress.done} / {progress.total} leaves, "
                   f"{human_bytes(progress.rate)}/s")

    def open_upload(self, filename: str, data) -> None:
        """Loads an uploaded checkpoint (bytes, or the temporary file `UploadInput` received),
        named by its file name, off the event loop."""
        from inspector.ui.session.checkpoint_files import open_upload

        self._submit(lambda: (f"Reading {filename} …",
                              lambda: [open_upload(filename, data)], self._opened))

    def _opened(self, loaded, exc) -> None:
        if exc is not None:  # say why; every tree loaded before stays
            self.open_error = error_text(exc, self.file_root)  # the picker shows it
            return
        names = [self.add(t) for t in loaded]
        self.param.update(selected=names[0], open_paths=[], open_error="")

    @param.depends("remove_tree", watch=True)
    def _on_remove_tree(self):
        name = self.selected
        if name not in self.trees:
            return
        trees = {k: v for k, v in self.trees.items() if k != name}
        for settings in self.ops.values():
            settings.forget(name)
        self.param.update(trees=trees, selected=next(iter(trees), ""))

    # Comparing --------------------------------------------------------------------------------

    @param.depends("diff_a", "diff_b", "trees", watch=True)
    def _on_diff_trees(self):
        from inspector.ui.session.diff_index import compare

        a, b = self.trees.get(self.diff_a), self.trees.get(self.diff_b)
        old = self.diff_result
        if a is None or b is None:
            if old is not None:
                self.tree_views["diff"].path = ""
                self.param.update(diff_result=None, diff_values={}, diff_table=[],
                                  diff_histograms={})
            return
        if old is not None and (old.a.name, old.b.name) == (a.name, b.name) \
                and old.a.tree is a.tree and old.b.tree is b.tree:
            return  # another tree was added or removed: this comparison stands

        def done(out, exc):
            if exc is not None:
                self.error = error_text(exc, self.file_root)
                return
            self.tree_views["diff"].param.update(path="", expanded=out.default_expanded(
                self.diff_only))
            self.param.update(diff_result=out, diff_values={}, diff_table=[],
                              diff_histograms={})

        self._submit(lambda: (f"Comparing {a.name} with {b.name} …", lambda: compare(a, b),
                              done), coalesce="diff")

    @param.depends("diff_compare_values", watch=True)
    def _on_diff_compare_values(self):
        from inspector.ui.session.value_table import value_table

        a, b = self.trees.get(self.diff_a), self.trees.get(self.diff_b)
        if a is None or b is None:
            self.error = "Pick the two trees to compare first."
            return

        def done(rows, exc):
            if exc is not None:
                self.error = error_text(exc)
                return
            if (self.diff_a, self.diff_b) == (a.name, b.name):
                self.diff_table = rows

        self._submit(lambda: (f"Comparing the values of {a.name} and {b.name} …",
                              lambda: value_table(a.tree, b.tree, progress=self.values_progress),
                              done), coalesce="values")

    def values_progress(self, done: int, total: int, nbytes: int, total_bytes: int) -> None:
        """Shows how far the whole-tree value diff has got (bytes of both trees reduced) as
        the progress bar and the status; called by the running thread, at most every 0.2 s."""
        from inspector.ui.session.formatting import human_bytes

        if not self._progress_due(done, total):
            return
        self.param.update(
            progress=100.0 * nbytes / total_bytes if total_bytes else 100.0 * done / total,
            status=f"Comparing values: {done} / {total} leaves, {human_bytes(nbytes)} / "
                   f"{human_bytes(total_bytes)} read")

    @param.depends("diff_only", watch=True)
    def _on_diff_only(self):
        if self.diff_result is not None:  # open what the filter leaves, keep what was open
            opened = self.diff_result.default_expanded(self.diff_only)
            view = self.tree_views["diff"]
            view.expanded = list(dict.fromkeys([*view.expanded, *opened]))

    def _on_diff_path(self, *_):
        diff, path = self.diff_result, self.tree_views["diff"].path
        if diff is None or path in self.diff_values or not diff.comparable(path):
            return

        def done(out, exc):
            if self.diff_result is diff:  # still the same comparison
                shown = error_text(exc, self.file_root) if exc is not None else out[0]
                self.param.update(diff_values={**self.diff_values, path: shown},
                                  diff_histograms={**self.diff_histograms,
                                                   path: {} if exc is not None else out[1]})

        self._submit(lambda: (f"Reading {path} in both trees …",
                              lambda: diff.values_read(path), done))

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
        self._submit(self._run_task, coalesce="run")

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

        def done(out, exc):
            if exc is not None:
                self.error = error_text(exc, self.file_root)
                return
            rr, eager_s, diff = out
            record = RunRecord.of(len(self.history) + 1, job, rr, eager_s, device, repeats)
            view, same = self.tree_views["result"], self.result_name == job.label
            view.param.update(expanded=view.expanded if same else
                              index_for(rr.result).default_expanded(),
                              path=view.path if same else "")
            self.param.update(result=rr, result_name=job.label, error="", eager_seconds=eager_s,
                              eager_max_diff=diff, history=[*self.history, record],
                              run_status=f"{rr.op} finished in {rr.median_seconds * 1e3:.1f} ms "
                                         f"on {rr.device} (run {record.run})" + (
                                  f" · read {rr.read_gbps:.3g} GB/s, kernel {rr.gbps:.3g} GB/s"
                                  if getattr(rr, "read_bytes", 0) else ""),
                              held=self.runs.held())
            # A result spread over several hosts is timed once: its repeats would be
            # collectives every process must run in step, which the page's cancellable,
            # delayed repeats cannot promise (a follower would wait in one for ever).
            if repeats > 1 and not rr.cost.get("streamed") and not spans_hosts(rr.result):
                def time_it():
                    if self.runs.current(generation):  # no newer run meanwhile
                        self._submit(lambda: self._repeat_task(job, loaded, device, repeats,
                                                               generation, rr),
                                     coalesce="repeat")

                # Served: not while the user is still changing settings (the session stays
                # free meanwhile, so the next change starts at once).
                self._later(REPEAT_DELAY if self.background else 0, time_it)

        return f"Running {job.op} on {device} …", work, done

    def _repeat_task(self, job, loaded, device, repeats, generation, first):
        """The timed repeats of the run that gave `first`: after the page showed its result,
        cancelled by the next run; the timing card and history then show their median."""

        def work():
            return self.runs.repeat(job, loaded, device, repeats, generation, first)

        def done(rr, exc):
            if isinstance(exc, Cancelled) or not self.runs.current(generation):
                return
            if exc is not None:
                self.error = error_text(exc)
                return
            if self.result is first:
                if self.history:
                    last = dataclasses.replace(
                        self.history[-1], median_ms=rr.median_seconds * 1e3,
                        min_ms=rr.min_seconds * 1e3, max_ms=rr.max_seconds * 1e3, gbps=rr.gbps)
                    self.history = [*self.history[:-1], last]
                self.param.update(result=rr, held=self.runs.held())

        return f"Timing {job.op}: {repeats} runs …", work, done

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

        def done(loaded, exc):
            if exc is not None:
                self.error = error_text(exc, self.file_root)
                return
            names = [self.add(t) for t in loaded]
            if spans_hosts(rr.result):
                shared_now(self, names)
            self.selected = names[0]

        self._submit(lambda: (f"Keeping {label} …", work, done))

    # Work off the event loop ------------------------------------------------------------------

    def _submit(self, make, coalesce: str | None = None) -> None:
        """Queues `make() -> (status, work, done)`; runs it now if nothing else is running.

        `work()` runs in a worker thread (when `background`), `done(out, exc)` back on the
        session's event loop. A run asked for while another runs replaces any queued run, so
        dragging a weight slider runs the latest weights, not every step of the drag.
        """
        if coalesce:
            self._queue = [q for q in self._queue if q[1] != coalesce]
        self._queue.append((make, coalesce))
        if not self.busy:
            self._next()

    def _next(self) -> None:
        while self._queue:
            make, _ = self._queue.pop(0)
            try:
                status, work, done = make()
            except Exception as exc:  # bad settings: say why, keep everything else
                self.error = error_text(exc, self.file_root)
                continue
            self.param.update(busy=True, status=status, progress=None)
            if self.background:
                param.parameterized.async_executor(lambda w=work, d=done: self._in_thread(w, d))
                return
            self._complete(done, *_call(work))
        self.param.update(busy=False, status="", progress=None)

    def _later(self, seconds: float, fn) -> None:
        """Calls `fn()` on the session's event loop (with the document lock) after `seconds`;
        at once when 0 or not in the background."""
        if not seconds or not self.background:
            fn()
            return

        async def wait():
            await asyncio.sleep(seconds)

            async def call():
                fn()

            call.lock = True  # as `finish` in `_in_thread`: views update Bokeh models
            param.parameterized.async_executor(call)

        param.parameterized.async_executor(wait)

    async def _in_thread(self, work, done):
        # Runs on the session's event loop without the document lock (Panel's default for
        # async callbacks), so the session stays responsive while `work` runs in a thread.
        out, exc = await asyncio.to_thread(_call, work)

        async def finish():
            with self.updates_together():
                self._complete(done, out, exc)
                self._next()

        # Views update Bokeh models directly (chart sources), which needs the document lock:
        # `lock = True` is what `panel.io.with_lock` sets, and Panel's executor honours it.
        finish.lock = True
        param.parameterized.async_executor(finish)

    def _complete(self, done, out, exc) -> None:
        try:
            done(out, exc)
        except Exception as e:  # a view failing to show a result must not wedge the queue
            self.error = error_text(e, self.file_root)


def _call(work):
    try:
        return work(), None
    except Exception as exc:
        # The traceback keeps the frames' locals (a run's input and output buffers) alive for
        # as long as the error is; only where it happened is shown (`error_text`).
        traceback.clear_frames(exc.__traceback__)
        return None, exc
