"""`inspector.show(...)` / `inspector.Inspector(...)`: the app as a live widget in a notebook cell.

    import inspector
    inspector.show(t1=t1, t2=t2, t3=t3)     # the trees, their sums, indexing, stacking, timing

The same state and views as the served app, laid out for the width of a cell. A notebook
output carries its own resources: `show()` loads Panel's notebook support once with every
resource inline (offline, no CDN), plus the icon and Roboto fonts as data URLs on the page (the
inlined CSS points at font files a notebook cannot serve). What Panel and panel-material-ui do
in notebook outputs that an inspector cell cannot live with (a 1.4 MB bundle in every
component, CDN stylesheets for later components, pane text echoed back) is worked around in
`inspector.ui.notebook_patches`, installed here and acting only on inspector cells.

Operations started in the widget run in a worker thread (`NotebookState`): the kernel's event
loop brings their results back, and the kernel stays free meanwhile.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import panel as pn
import panel_material_ui as pmui

from inspector import InspectorError
from inspector.ui import notebook_patches
from inspector.ui.app import InspectorApp
from inspector.ui.plot_guard import plot_guard
from inspector.ui.session.preselect import COMPARE, preselect
from inspector.ui.session.state import InspectorState
from inspector.ui.session.worker import Worker, WorkerAtOnce

SOURCE = "notebook"


class Inspector(pn.viewable.Viewer):
    """The inspector for the trees given, as a notebook widget (display it: last line of a cell).

    A single positional tree is named `tree`, several are `tree0`, `tree1`, ...; keyword trees
    keep their keyword. Trees of one structure are preselected for the weighted sum (uniform
    weights) and for stacking; the first two are set up for comparing, and open on the
    comparison when they differ in structure. `.state` is the session state
    (`InspectorState`): set its params from code to drive the widget, e.g.
    `insp.state.ops['weighted_sum'].weights = [1, 2, 3]`, then `insp.run()`; `.tabs` switches
    between the operations and the comparison.

    Args:
        examples: also load the app's built-in example trees.
        background: run the operations started in the widget in a worker thread (default:
            inside a Jupyter kernel, whose event loop brings the results back). Operations a
            cell's code starts run at once either way.
    """

    def __init__(self, *trees, examples: bool = False, background: bool | None = None,
                 **named):
        super().__init__()
        notebook_patches.install()  # also when shown inside another layout, without `show()`
        if background is None:
            background = _in_kernel()
        self.state = NotebookState(background=background)
        if examples:
            self.state.load_defaults()
        positional = {"tree": trees[0]} if len(trees) == 1 else {
            f"tree{i}": tree for i, tree in enumerate(trees)}
        given = [self.state.add_tree(name, tree, SOURCE)
                 for name, tree in {**positional, **named}.items()]
        opens_on = preselect(self.state, given)
        self.examples = examples
        self.app = app = InspectorApp(self.state)
        card = dict(margin=(5, 5), sizing_mode="stretch_width", collapsible=False)
        operate = pmui.Row(
            pmui.Card(app.operation, title="Operation", width=460, margin=(5, 5),
                      collapsible=False),
            pmui.Card(app.result, title="Result", min_width=380, **card),
            sizing_mode="stretch_width")
        compare = pmui.Card(app.diff, title="Compare two trees", **card)
        health = pmui.Card(app.health, title="Health of the selected tree", **card)
        timeline = pmui.Card(app.timeline, title="Across checkpoints", **card)
        # dynamic: the comparison is drawn only once its tab is opened
        self.tabs = pmui.Tabs(("Operations", operate), ("Compare trees", compare),
                              ("Health", health), ("Timeline", timeline), dynamic=True,
                              active=int(opens_on == COMPARE),
                              sizing_mode="stretch_width", margin=(0, 0))
        # A heatmap cell picked in the timeline shows its two steps in the comparison.
        self.state.health.param.watch(lambda *_: setattr(self.tabs, "active", 1),
                                      "compare_shown")

    def __panel__(self):
        app = self.app
        loader = [app.examples, pmui.Divider()] if self.examples else []
        side = [app.trees, app.trees.remove, pmui.Divider(), *loader, app.device]
        layout = pmui.Column(
            pmui.Row(
                pmui.Card(*side, title="Trees", width=300, margin=(5, 5), collapsible=False),
                pmui.Card(app.input, title="Input tree", min_width=360, margin=(5, 5),
                          collapsible=False, sizing_mode="stretch_width"),
                sizing_mode="stretch_width"),
            self.tabs, plot_guard(), sizing_mode="stretch_width")
        return notebook_patches.cell(layout, sizing_mode="stretch_width")

    def run(self):
        """Runs the current operation now, in this thread; returns its `RunResult` (the widget
        shows it too). For scripts and tests: clicks on Run go to a worker thread.

        Raises:
            InspectorError: the operation failed (the widget shows the same message), or
                another one is running.
        """
        state = self.state
        if state.busy:
            raise InspectorError("An operation is running: run again once it is done.")
        before = len(state.history)
        background, state.background = state.background, False
        try:
            state.param.trigger("run")
        finally:
            state.background = background
        if len(state.history) == before:
            raise InspectorError(state.error or "The operation did not run.")
        return state.result

    def _repr_mimebundle_(self, include=None, exclude=None):
        load_notebook_support()  # shown without `show()`: load the notebook support first
        return super()._repr_mimebundle_(include, exclude)


class NotebookState(InspectorState):
    """The session state of a notebook widget. With `background` on, work asked for in the
    widget (Run, a moved weight) runs in a worker thread, so the kernel stays free; work asked
    for by a cell's code runs at once, so the cell's next line sees its result."""

    def __init__(self, **params):
        super().__init__(**params)
        self.open.remote_prefixes = []  # any URL: the user's own kernel fetches it

    def new_worker(self) -> Worker:
        return WorkerAtOnce(self, _in_widget_message)


def _in_widget_message() -> bool:
    """Whether the kernel is handling a message from a widget (a comm message), not a cell."""
    try:
        from IPython import get_ipython

        parent = get_ipython().kernel.get_parent()
    except Exception:  # no kernel
        return False
    return (parent or {}).get("header", {}).get("msg_type") == "comm_msg"


def show(*trees, examples: bool = False, background: bool | None = None,
         **named) -> Inspector:
    """Returns the inspector widget for these trees (display it: the last line of a cell).

    Loads Panel's notebook support once, with every resource inline, so it works offline.
    Outside a notebook it only builds the widget (nothing is served, nothing blocks).

    Example (in a notebook cell)::

        insp = inspector.show(t1=t1, t2=t2, t3=t3)   # or show(tree): a tree named "tree"
        insp.state.ops["weighted_sum"].weights = [1, 2, 3]
        insp                                         # the widget
    """
    load_notebook_support()
    return Inspector(*trees, examples=examples, background=background, **named)


_LOADED = False


def load_notebook_support() -> None:
    """Loads Panel's notebook extension (inline resources, Tabulator, the fonts) and the
    notebook patches (`inspector.ui.notebook_patches`), once."""
    global _LOADED
    if _LOADED:
        return
    notebook_patches.install()
    pn.extension("tabulator", inline=True, global_css=[font_css()])
    _LOADED = True


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


# Fonts ------------------------------------------------------------------------------------------

_FONT_FILES = re.compile(r"material-icons-[A-Z0-9]+\.woff2|roboto-latin-(ext-)?\d+-normal")


def font_css() -> str:
    """The @font-face rules of panel-material-ui's icon font and Roboto (latin) with the woff2
    files inlined as data URLs, for the notebook page (fonts declared inside a component's
    shadow root are not used by the browser)."""
    css_path = Path(pmui.__file__).parent / "dist" / "material-icons.css"
    rules = []
    for block in re.findall(r"@font-face\s*{[^}]*}", css_path.read_text()):
        woff2 = re.search(r'url\("\./([^"]+\.woff2)"\)', block)
        if woff2 is None or not _FONT_FILES.search(woff2.group(1)):
            continue
        data = base64.b64encode((css_path.parent / woff2.group(1)).read_bytes()).decode()
        src = f'src: url(data:font/woff2;base64,{data}) format("woff2");'
        rules.append(re.sub(r"src:[^;]*;", lambda _, s=src: s, block))
    return "\n".join(rules)
