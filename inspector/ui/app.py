"""The served page: one `InspectorState` per browser session and the views that show it."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from functools import cached_property

import panel as pn
import panel_material_ui as pmui
from panel.util import edit_readonly

from inspector.ui.diff_view import DiffView
from inspector.ui.export import ExportView
from inspector.ui.file_picker import FileOpener
from inspector.ui.health_view import HealthView
from inspector.ui.layout import PAGE_THEME, columns, follow_browser_theme
from inspector.ui.mesh_panel import MeshPanel
from inspector.ui.operation_panel import OperationPanel
from inspector.ui.plot_guard import plot_guard
from inspector.ui.result_view import ResultView
from inspector.ui.run_status import RunStatus
from inspector.ui.session.preselect import COMPARE, OPERATIONS, preselect
from inspector.ui.session.state import InspectorState
from inspector.ui.sidebar import DeviceSelector, ExampleLoader, TreeListView
from inspector.ui.timeline_view import TimelineView
from inspector.ui.tree_view import TreeView
from inspector.ui.upload import MAX_MESSAGE_BYTES
from inspector.ui.working_set_view import WorkingSetView

TITLE = "pytree inspector"
ROOT_ENV = "PYTREE_INSPECTOR_ROOT"
"""The environment variable naming the folder the file picker may open (default: the working
directory), for `panel serve inspector`; the launcher's `--root` sets it directly."""
TABS = ("Operations", "Compare trees", "Mesh", "Health", "Timeline")
FROM_ENV = "from $PYTREE_INSPECTOR_ALLOW_REMOTE"
"""`remote_prefixes` default: what the environment variable says (unset: URLs refused)."""


def default_root() -> str:
    """The folder the file picker may open when none is given: `$PYTREE_INSPECTOR_ROOT`, else
    the working directory."""
    return os.path.abspath(os.environ.get(ROOT_ENV) or os.getcwd())


class InspectorApp(pn.viewable.Viewer):
    """The whole app for one session: the sidebar (trees, download, open, examples, device),
    then two tabs: input | operation | result side by side, and the comparison of two trees.

    Only the list of loaded trees and the input tree are drawn with the page; the rest of the
    sidebar and the operation and result cards join after the first paint, and the other
    views are built when first shown (their tab opened) or first asked for (`app.diff` in a
    test): each costs server time per session and browser time before the tree shows.
    """

    def __init__(self, state: InspectorState, opens_on: str = OPERATIONS, **params):
        super().__init__(**params)
        self.state = state
        self.opens_on = opens_on  # the tab shown first: OPERATIONS, or COMPARE (`preselect`)
        self.trees = TreeListView(state)
        self.examples = ExampleLoader(state)
        self.device = DeviceSelector(state)
        self.input = TreeView(state, source="input", title="Input tree")
        self.run_status = RunStatus(state)
        self.working_set = WorkingSetView(state)
        self.tabs = None

    # built on first use -----------------------------------------------------------------------

    @cached_property
    def files(self) -> FileOpener:
        return FileOpener(self.state)

    @cached_property
    def export(self) -> ExportView:
        return ExportView(self.state)

    @cached_property
    def operation(self) -> OperationPanel:
        return OperationPanel(self.state)

    @cached_property
    def result(self) -> ResultView:
        return ResultView(self.state)

    @cached_property
    def diff(self) -> DiffView:
        return DiffView(self.state)

    @cached_property
    def mesh(self) -> MeshPanel:
        return MeshPanel(self.state)

    @cached_property
    def health(self) -> HealthView:
        return HealthView(self.state)

    @cached_property
    def timeline(self) -> TimelineView:
        return TimelineView(self.state)

    def sidebar(self) -> list:
        rest = pmui.Column(sizing_mode="stretch_width", margin=0)

        def fill():  # after the first paint, as the operation and result cards below
            rest.objects = [self.trees.remove, self.working_set, self.export, pmui.Divider(),
                            self.files, pmui.Divider(), self.examples, pmui.Divider(),
                            self.device]

        pn.state.onload(fill)
        return [self.trees, rest]

    def main(self) -> list:
        column = dict(sizing_mode="stretch_width", margin=(5, 5))
        cards = [dict(title="Operation", **column), dict(title="Result", **column)]
        # The split's own children never change: panel-splitjs 0.4 rebuilds its split from
        # `sizes` when they do, and its drag handler never writes the dragged sizes back (its
        # onDragEnd sets `this.model` in an arrow function), so a later change would undo a drag.
        later_columns = [pmui.Column(pmui.Card(**card), sizing_mode="stretch_width", margin=0)
                         for card in cards]
        operate = columns(pmui.Card(self.input, title="Input tree", **column), *later_columns,
                          sizes=(32, 32, 36), min_widths=(300, 420, 300))

        def fill():  # after the first paint: the input tree shows first
            # New cards, filled as built: adding to a drawn card redraws it twice.
            for holder, view, card in zip(later_columns, (self.operation, self.result), cards,
                                          strict=True):
                holder.objects = [pmui.Card(view, **card)]

        pn.state.onload(fill)
        # The comparison and the mesh are built and drawn only once their tab is opened.
        compare = pmui.Card(title="Compare two trees", collapsible=False, **column)
        mesh = pmui.Card(title="Shard over a device mesh", collapsible=False, **column)
        health = pmui.Card(title="Health of the selected tree", collapsible=False, **column)
        timeline = pmui.Card(title="Across checkpoints", collapsible=False, **column)
        later = {1: (compare, "diff"), 2: (mesh, "mesh"), 3: (health, "health"),
                 4: (timeline, "timeline")}
        first = 1 if self.opens_on == COMPARE else 0
        self.tabs = pmui.Tabs((TABS[0], operate), (TABS[1], compare), (TABS[2], mesh),
                              (TABS[3], health), (TABS[4], timeline), dynamic=True,
                              active=first,
                              sizing_mode="stretch_width", margin=(0, 0))
        # A heatmap cell picked in the timeline shows its two steps in the comparison.
        self.state.health.param.watch(lambda *_: setattr(self.tabs, "active", 1),
                                      "compare_shown")

        def opened(active: int):
            card, view = later.get(active, (None, None))
            if card is not None and not len(card):
                card.append(getattr(self, view))

        self.tabs.param.watch(lambda event: opened(event.new), "active")
        opened(first)
        return [self.run_status, self.tabs]

    def __panel__(self):
        return pmui.Column(pmui.Row(pmui.Column(*self.sidebar(), width=300), *self.main()),
                           sizing_mode="stretch_width")


def new_state(defaults: bool = True, background: bool = True, trees=(),
              root=None, remote_prefixes: list[str] | None = None) -> InspectorState:
    """A session state with the default examples (if `defaults`) and then `trees` (prepared
    `LoadedTree`s) added and preselected (`preselect`: the first selected, the first two set
    up for comparing, trees of one structure set up for their weighted sum).
    `remote_prefixes`: the URLs it may open (None: none; see `create_app`)."""
    return new_session(defaults, background, trees, root, remote_prefixes)[0]


def new_session(defaults: bool = True, background: bool = True, trees=(), root=None,
                remote_prefixes: list[str] | None = None) -> tuple[InspectorState, str]:
    """`new_state`, and the view the page opens on (`preselect.OPERATIONS` or `COMPARE`)."""
    root = default_root() if root is None else str(root)
    state = InspectorState(background=background, file_root=root)
    state.open.remote_prefixes = remote_prefixes
    if defaults:
        state.load_defaults()
    names = [state.add(loaded) for loaded in trees]
    return state, preselect(state, names)


def _stop_following_busy(page: pmui.Page) -> None:
    """Unbinds a Page from the process-wide `pn.state.busy`, which every callback of every
    session toggles.

    Bound, each toggle was sent to every open page and walked its whole model (20 sessions:
    3,360 updates, half the server's time); the operation card shows this session's progress
    instead. Setting `page.busy` drops the ref but not the watcher behind it (param 2.x):
    every callback still ran each open page's ref sync (`Parameters.values()` of the whole
    Page), and `pn.state` kept every page ever built, and its session, alive."""
    with edit_readonly(page):
        page.busy = False
    private = getattr(page, "_param__private", None)
    watchers = getattr(private, "ref_watchers", None)
    if not isinstance(watchers, list):
        return  # another param: nothing known to remove
    for names, watcher in list(watchers):
        if names == ("busy",) and watcher.inst is pn.state:
            pn.state.param.unwatch(watcher)
            watchers.remove((names, watcher))


def create_app(state: InspectorState | None = None, defaults: bool = True,
               background: bool = True, trees=(), root=None, hosts=None,
               remote_prefixes: list[str] | None | str = FROM_ENV) -> pmui.Page:
    """Returns the page for one session (call it once per session: it builds a new state).

    Args:
        state: the session state (a new one when None; the other arguments then fill it).
        defaults: load the default examples (S1, S2, S3, MLP).
        background: run operations and loads in a worker thread (keep True when served).
        trees: `LoadedTree`s to add first (prepared once, shared by every session); the first
            is selected, and the first two are set up for comparing (a, b); trees of one
            structure open on their weighted sum, a first two that differ on their comparison.
        root: the folder the file picker may open (None: `default_root()`; '': no picker).
        hosts: the `hosts.Leader` when served from several hosts (the launcher's
            `--num-processes`): the session's work on trees spread over every host's devices
            is broadcast to the followers, which run it too.
        remote_prefixes: URLs the "Open URL" field may open: None refuses all (no field),
            [] allows any, else only those starting with a prefix; by default what
            `$PYTREE_INSPECTOR_ALLOW_REMOTE` says (see `remote_prefixes_from_env`).
    """
    if state is None:
        if remote_prefixes == FROM_ENV:
            from inspector.ui.session.checkpoint_files import remote_prefixes_from_env

            remote_prefixes = remote_prefixes_from_env()
        state, opens_on = new_session(defaults, background, trees, root, remote_prefixes)
    else:
        opens_on = OPERATIONS
    if hosts is not None:
        state.hosts, state.session_id = hosts, hosts.new_session(list(state.trees))
    app = InspectorApp(state, opens_on=opens_on)
    if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
        # The browser session ended: release its working set, result and trees at once.
        pn.state.on_session_destroyed(lambda context: state.close())
        # A finished job's view updates go out as one message: Bokeh serialises each message
        # with a reference to every model of the page, and a run touched ~20 properties, each
        # sent alone (views with column data follow on the next tick: `ui/next_tick.py`).
        doc = pn.state.curdoc
        state.updates_together = lambda: pn.io.hold(doc)
        if hosts is None:  # several hosts: followers mirror each session; keep Bokeh's pace
            expire_when_closed(pn.state.curdoc)
    page = pmui.Page(title=TITLE, sidebar=app.sidebar(), main=app.main(), sidebar_width=320,
                     busy_indicator=None, theme_config=PAGE_THEME)
    _stop_following_busy(page)
    page.header = [follow_browser_theme(), plot_guard()]
    page.inspector = app  # for tests and the benchmark: the views of this session
    return page


_FROZEN: list[bool] = []


def freeze_long_lived() -> None:
    """Moves every object alive now out of the garbage collector's sight, once per process.

    A server calls it before it builds its first page (`serve` before serving; `main.py`, run
    by `panel serve` per session, in the first session): what is alive then is mostly the
    imported libraries (JAX, Panel, Bokeh, NumPy), alive until the process ends. Full
    collections walked them all: with 20 sessions open, 9 of them took 2.7 s of the server's
    time, up to 0.65 s each, during which no page was answered (1.9 s after). Pages built later
    stay collectable, so a closed session's memory is still released; under `panel serve` the
    first session's bare Bokeh document, made before `main.py` runs, is kept."""
    if not _FROZEN:
        gc.collect()
        gc.freeze()
        _FROZEN.append(True)


UNUSED_SESSION_LIFETIME_MS = 120_000
CHECK_UNUSED_SESSIONS_MS = 1_000


def expire_when_closed(doc) -> None:
    """Has Bokeh destroy this session soon after its page closes (its websocket is lost).

    Bokeh destroys a session once it has had no connection for `unused_session_lifetime`
    (two minutes here, so that pages still loading on a busy server are not dropped), checked
    every `check_unused_sessions` ms: a closed page would hold its memory that long. A session
    whose connection was lost asks for expiration instead (`ServerSession.request_expiration`),
    which the next check (every second) honours if no connection came back meanwhile.
    """
    context = doc.session_context

    def lost(event):
        session = getattr(context, "session", None)
        if session is not None:
            session.request_expiration()

    doc.on_event("connection_lost", lost)


def serve(trees: dict | None = None, root=None, address: str = "127.0.0.1", port: int = 0,
          show: bool = True, examples: bool = True,
          started: Callable[[str], None] | None = None, hosts=None,
          origins: list[str] | None = None,
          remote_prefixes: list[str] | None | str = FROM_ENV, infos: dict | None = None,
          **kwargs) -> None:
    """Serves the app on `address` (this machine only by default) until interrupted, a fresh
    state per browser session; `trees` ({name: tree}, e.g. opened checkpoints) are in every
    session.

    Args:
        trees: trees to show; lazy checkpoint leaves stay lazy (nothing is read up front).
        root: the folder the app's file picker may open (None: `default_root()`).
        port: 0 picks a free port.
        show: open a browser tab.
        examples: also load the built-in example trees.
        started: called with the app's URL once the server listens (the launcher prints it).
        hosts: the `hosts.Leader` of process 0 when served from several hosts.
        origins: hosts (`host[:port]`) whose pages may open the app's websocket; by default
            only the address served and, on 127.0.0.1, localhost.
        remote_prefixes: which URLs the page may open (see `create_app`).
        infos: `{name: inspector.FileInfo}` of trees opened from files: their metadata and
            problems, shown above the tree.
    """
    from inspector.ui.session.loaded import prepare
    from inspector.ui.session.origins import CommandLine

    infos = infos or {}
    prepared = [prepare(name, tree, CommandLine(name), infos.get(name))
                for name, tree in (trees or {}).items()]
    from inspector.ui.session.launcher_warm import keep_warm

    keep_warm(prepared)  # read once by a session, they stay held while the server runs
    if not port:
        import socket

        with socket.socket() as s:
            s.bind((address, 0))
            port = s.getsockname()[1]

    freeze_long_lived()

    def session():
        pn.extension("tabulator")  # as main.py does: the value-diff and leaf tables need it
        return create_app(defaults=examples, trees=prepared, root=root, hosts=hosts,
                          remote_prefixes=remote_prefixes)

    if not origins:
        origins = [f"{address}:{port}"] + ([f"localhost:{port}"] if address == "127.0.0.1"
                                           else [])
    kwargs.setdefault("websocket_max_message_size", MAX_MESSAGE_BYTES)
    # Bokeh discards a session whose page has not connected 15 s after its document was built;
    # with many sessions arriving at once, documents are built one after another on the event
    # loop and a late page would stay blank. Two minutes covers 20 arrivals on 2 busy cores.
    kwargs.setdefault("unused_session_lifetime_milliseconds", UNUSED_SESSION_LIFETIME_MS)
    # Closed pages ask for expiration (`expire_when_closed`); look for them every second.
    kwargs.setdefault("check_unused_sessions_milliseconds", CHECK_UNUSED_SESSIONS_MS)
    server = pn.serve({"inspector": session}, address=address, port=port, show=False,
                      start=False, verbose=False, websocket_origin=list(origins), title=TITLE,
                      **kwargs)  # Ctrl+C stops it: pn.serve handles SIGINT
    if started is not None:
        started(f"http://{address}:{port}/inspector")
    if show:
        server.io_loop.add_callback(server.show, "/inspector")
    server.start()
    server.io_loop.start()
