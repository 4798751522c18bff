"""`inspector.show(...)` / `inspector.Inspector(...)`: the app as a live widget in a notebook cell.

    import inspector
    inspector.show(t1=t1, t2=t2, t3=t3)     # the trees, their sums, indexing, stacking, timing

The same state and views as the served app, laid out for the width of a cell. A notebook
output carries its own resources, and Panel's notebook support needed four things more:

- Offline: `show()` loads Panel's notebook support once with every resource inline (no CDN),
  plus the icon and Roboto fonts as data URLs on the page (the inlined CSS points at font files
  a notebook cannot serve) and panel-material-ui's icon classes in each component.
- Size: panel-material-ui puts its whole 1.4 MB JavaScript bundle into every component of a
  notebook output (about 50 here: a 78 MB cell). The page compiles the bundle once and caches
  it by the bundle's hash, so in an inspector cell only the first component the page sets up
  carries it (about 2 MB a cell), and components sent later carry none.
- Stylesheets: Panel inlines them for a cell's first render only; components added later, and
  panes whose text changes, would fetch theirs from the CDN. They are inlined too.
- Echoes: over the comm, the page could send a pane's earlier text back while a newer one was
  on its way; a pane's text is not synced back from the page.

Operations started in the widget run in a worker thread (`NotebookState`): the kernel's event
loop brings their results back, and the kernel stays free meanwhile. These fixes patch three
panel-material-ui methods and one Panel method; all but the echo one act only on inspector
cells rendered inline for a notebook.
"""

from __future__ import annotations

import base64
import re
import weakref
from pathlib import Path

import panel as pn
import panel_material_ui as pmui
import param
from bokeh.models import ImportedStyleSheet
from panel.io.notebook import replace_inline_css
from panel.reactive import Reactive
from panel_material_ui.base import MaterialComponent
from panel_material_ui.pane.base import MaterialPaneBase

from inspector import InspectorError
from inspector.ui.app import InspectorApp
from inspector.ui.session.state import InspectorState

SOURCE = "notebook"


class Inspector(pn.viewable.Viewer):
    """The inspector for the trees given, as a notebook widget (display it: last line of a cell).

    A single positional tree is named `tree`, several are `tree0`, `tree1`, ...; keyword trees
    keep their keyword. Trees of one structure are preselected for the weighted sum (uniform
    weights) and for stacking; the first two are set up for comparing, and two trees that
    differ open on the comparison. `.state` is the session state (`InspectorState`): set its
    params from code to drive the widget, e.g. `insp.state.ops['weighted_sum'].weights =
    [1, 2, 3]`, then `insp.run()`; `.tabs`
    switches between the operations and the comparison.

    Args:
        examples: also load the app's built-in example trees.
        background: run the operations started in the widget in a worker thread (default:
            inside a Jupyter kernel, whose event loop brings the results back). Operations a
            cell's code starts run at once either way.
    """

    def __init__(self, *trees, examples: bool = False, background: bool | None = None,
                 **named):
        super().__init__()
        if background is None:
            background = _in_kernel()
        self.state = NotebookState(background=background)
        if examples:
            self.state.load_defaults()
        positional = {"tree": trees[0]} if len(trees) == 1 else {
            f"tree{i}": tree for i, tree in enumerate(trees)}
        given = [self.state.add_tree(name, tree, SOURCE)
                 for name, tree in {**positional, **named}.items()]
        same = _preselect(self.state, given)
        self.examples = examples
        self.app = app = InspectorApp(self.state)
        card = dict(margin=(5, 5), sizing_mode="stretch_width", collapsible=False)
        operate = pmui.Row(
            pmui.Card(app.operation, title="Operation", width=460, margin=(5, 5),
                      collapsible=False),
            pmui.Card(app.result, title="Result", min_width=380, **card),
            sizing_mode="stretch_width")
        compare = pmui.Card(app.diff, title="Compare two trees", **card)
        # dynamic: the comparison is drawn only once its tab is opened
        self.tabs = pmui.Tabs(("Operations", operate), ("Compare trees", compare), dynamic=True,
                              active=int(len(given) == 2 and not same),
                              sizing_mode="stretch_width", margin=(0, 0))

    def __panel__(self):
        app = self.app
        loader = [app.examples, pmui.Divider()] if self.examples else []
        side = [app.trees, pmui.Divider(), *loader, app.device]
        layout = pmui.Column(
            pmui.Row(
                pmui.Card(*side, title="Trees", width=300, margin=(5, 5), collapsible=False),
                pmui.Card(app.input, title="Input tree", min_width=360, margin=(5, 5),
                          collapsible=False, sizing_mode="stretch_width"),
                sizing_mode="stretch_width"),
            self.tabs, sizing_mode="stretch_width")
        return _Cell(_carrier(), layout, sizing_mode="stretch_width")

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

    remote_prefixes = param.List(default=[], allow_None=True, doc="URL prefixes `open_url` may "
                                 "open: any, in a notebook (the user's own kernel fetches them).")

    def _submit(self, make, coalesce: str | None = None) -> None:
        if not self.background or _in_widget_message():
            super()._submit(make, coalesce)
            return
        self.background = False
        try:
            super()._submit(make, coalesce)
        finally:
            self.background = True


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
    """Loads Panel's notebook extension (inline resources, Tabulator, the fonts) once."""
    global _LOADED
    if _LOADED:
        return
    pn.extension("tabulator", inline=True, global_css=[font_css()])
    _LOADED = True


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _preselect(state: InspectorState, names: list[str]) -> bool:
    """Selects the first tree, sets up the ops for the trees of its structure and the first two
    trees for comparing; returns whether all the trees have one structure."""
    if not names:
        return True
    first = state.trees[names[0]].index.rows
    same = [n for n in names if _same_structure(state.trees[n].index.rows, first)]
    update: dict = {"selected": names[0]}
    if len(same) >= 2:
        state.ops["weighted_sum"].param.update(trees=same, weights=[1 / len(same)] * len(same))
        state.ops["stack"].trees = same
    if len(names) >= 2:
        update.update(diff_a=names[0], diff_b=names[1])
    state.param.update(**update)
    return len(same) == len(names)


def _same_structure(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        (x.path, x.kind, x.shape, x.dtype) == (y.path, y.kind, y.shape, y.dtype)
        for x, y in zip(a, b, strict=True))


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


# One copy of the component bundle per cell, stylesheets inline ---------------------------------

_CARRIERS: weakref.WeakSet = weakref.WeakSet()
_CELL_ROOTS: set[str] = set()
_CELL_SHEETS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # doc: {url: sheet}


class _Cell(pn.Column):
    """The root of an inspector cell: its first child carries the component bundle."""


def _carrier() -> pmui.Typography:
    # A pmui leaf as the root's first child: the page sets up (Bokeh "finalizes") a cell's
    # models children first and in order, so this is the cell's first component to load the
    # bundle; the others find it in the page's module cache.
    carrier = pmui.Typography("", margin=0, height=0, visible=False)
    _CARRIERS.add(carrier)
    return carrier


def icon_css() -> str:
    """panel-material-ui's icon classes (`.material-icons`): in a served app they come with
    the bundle's CSS, which notebook outputs do not get."""
    css = (Path(pmui.__file__).parent / "dist" / "panel-material-ui.bundle.css").read_text()
    return "".join(re.findall(r"\.material-icons[\w-]*\{[^}]*\}", css))


_get_model = MaterialComponent._get_model
_get_material_properties = MaterialComponent._get_properties


def _get_model_in_a_cell(self, doc, root=None, parent=None, comm=None):
    """`MaterialComponent._get_model`, made to fit an inspector cell (see the module doc).

    Marks the cell (its root and document) when the carrier is created: the components created
    after it in the cell get their properties from `_material_properties_in_a_cell`. The root
    (Panel's design wrapper), created before it, is fixed here; a new model is not in the
    document yet, so changing it sends no extra message.
    """
    model = _get_model(self, doc, root, parent, comm)
    if comm is None or not pn.config.inline or model.bundle in (None, "url"):
        return model
    ref = (root or model).ref["id"]  # no root: this is the root
    if self in _CARRIERS:
        _CELL_ROOTS.add(ref)
        _CELL_SHEETS.setdefault(doc, {})
    elif ref in _CELL_ROOTS:
        model.esm = ""
    else:
        return model
    model.css_bundle = _ICON_CSS
    return model


def _material_properties_in_a_cell(self, doc):
    """`MaterialComponent._get_properties` in an inspector cell: no bundle (but in the carrier)
    and the icon classes. Used for new components and for updates: a pane whose text changes
    (`pmui.Typography`, e.g. the status line) re-sends all its properties, the bundle too."""
    props = _get_material_properties(self, doc)
    if (doc is None or doc not in _CELL_SHEETS or not pn.config.inline
            or props.get("bundle") in (None, "url")):
        return props
    props["css_bundle"] = _ICON_CSS
    if self not in _CARRIERS:
        props["esm"] = ""
    return props


_get_properties = Reactive._get_properties


def _get_properties_inline(self, doc):
    """`Reactive._get_properties` with Panel's CDN stylesheets inlined in inspector cells.

    Panel inlines the stylesheets of a cell's first render only: a component added later, or a
    pane whose text changes (it re-sends all its properties), would fetch them from the CDN.
    One inline sheet per URL and cell, shared by its components.
    """
    props = _get_properties(self, doc)
    sheets = _CELL_SHEETS.get(doc) if doc is not None else None
    if sheets is None or "stylesheets" not in props or not pn.config.inline:
        return props
    inlined = []
    for sheet in props["stylesheets"]:
        if isinstance(sheet, ImportedStyleSheet):
            url = sheet.url
            if url not in sheets:
                sheets[url] = replace_inline_css(sheet)
            sheet = sheets[url]
        inlined.append(sheet)
    props["stylesheets"] = inlined
    return props


_pane_links = MaterialPaneBase._linked_properties


@property
def _pane_links_without_text(self) -> tuple[str, ...]:
    # A pane's text is never edited in the page, so it is not synced back from it. Over a
    # notebook's comm the page sent an earlier text back while a newer one was on its way
    # (seen: the status line stuck on its own escaped HTML, `<p>&lt;p&gt;Running …`).
    return tuple(p for p in _pane_links.fget(self) if p != "object")


_ICON_CSS = icon_css()
MaterialPaneBase._linked_properties = _pane_links_without_text
MaterialComponent._get_model = _get_model_in_a_cell
MaterialComponent._get_properties = _material_properties_in_a_cell
Reactive._get_properties = _get_properties_inline
