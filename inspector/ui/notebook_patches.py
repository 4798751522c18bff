"""Workarounds for Panel's notebook output, kept in one place and applied by `install()`.

An inspector cell (`cell(...)`, the root `inspector.show()` displays) is about 50
panel-material-ui components sent over a notebook comm with every resource inline. Upstream
behaviour that makes such a cell large, online or glitchy, and what each patch does about it:

- `bundle once` (panel-material-ui 0.16, `MaterialComponent._get_model` / `_get_properties`,
  https://github.com/panel-extensions/panel-material-ui/blob/v0.16.6/src/panel_material_ui/base.py):
  with `pn.extension(inline=True)` every component carries the whole 1.4 MB JavaScript bundle
  in its `esm` (a 78 MB cell). The page compiles the bundle once and caches it by its hash, so
  in an inspector cell only the cell's first component (the carrier) keeps it. The icon classes,
  which a served app gets with the bundle's CSS, go into each component's `css_bundle`.
- `stylesheets inline` (Panel 1.9, `Viewable._render_model` / `get_root` call
  `panel.io.notebook.patch_inline_stylesheets` at the first render only,
  https://github.com/holoviz/panel/blob/v1.9.4/panel/viewable.py): a component added later, or
  a pane whose text changes (it re-sends all its properties), would fetch its stylesheets from
  the CDN. In inspector cells they are inlined too, one sheet per URL and cell.
- `no pane echo` (panel-material-ui 0.16, `MaterialComponent._linked_properties` links a pane's
  `object`; Panel 1.9 `Syncable._link_props` / `_comm_change`,
  https://github.com/holoviz/panel/blob/v1.9.4/panel/reactive.py): over a comm the page could
  send a pane's earlier text back while a newer one was on its way (seen: the status line stuck
  on its own escaped HTML, `<p>&lt;p&gt;Running …`). A pane of an inspector cell does not sync
  its text back; its text is never edited in the page.

Every patch acts only on components rendered into an inspector cell over a comm with inline
resources; other Panel output in the same kernel keeps Panel's behaviour. Each is written for
the Panel / panel-material-ui minor versions it names and is skipped, with a
`PatchSkippedWarning`, on any other version (the widget still works, only less well: larger
cells, CDN stylesheets, or the echo). Drop a patch once upstream behaves.
"""

from __future__ import annotations

import contextvars
import re
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import panel as pn
import panel_material_ui as pmui
from bokeh.models import ImportedStyleSheet
from panel.io.notebook import replace_inline_css
from panel.reactive import Reactive
from panel_material_ui.base import MaterialComponent
from panel_material_ui.pane.base import MaterialPaneBase


class PatchSkippedWarning(UserWarning):
    """A notebook patch was not installed: the installed Panel is not the one it was written for."""


@dataclass(frozen=True)
class Patch:
    """One workaround: what it replaces, for which versions, and how to put it in place."""

    name: str
    versions: dict[str, tuple[int, int]]  # distribution -> (major, minor) it was written for
    targets: tuple[tuple[type, str], ...]  # (class, attribute) it replaces
    apply: Callable[[], None]
    without: str  # what the widget lacks when the patch is skipped


_INSTALLED: set[str] = set()


def install() -> tuple[str, ...]:
    """Installs the notebook patches (once); returns the names of those now installed.

    A patch written for other Panel / panel-material-ui versions than the installed ones is
    skipped with a `PatchSkippedWarning` saying what the widget lacks without it.
    """
    for patch in PATCHES:
        if patch.name in _INSTALLED:
            continue
        found = {dist: _minor(version(dist)) for dist in patch.versions}
        if found != patch.versions:
            have = ", ".join(f"{d} {version(d)}" for d in patch.versions)
            want = ", ".join(f"{d} {v[0]}.{v[1]}" for d, v in patch.versions.items())
            warnings.warn(
                f"inspector: notebook patch '{patch.name}' skipped: written for {want}, found "
                f"{have}; without it {patch.without}.", PatchSkippedWarning, stacklevel=2)
            continue
        patch.apply()
        _INSTALLED.add(patch.name)
    return tuple(p.name for p in PATCHES if p.name in _INSTALLED)


def _minor(text: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", text).groups()
    return int(major), int(minor)


# The cell ---------------------------------------------------------------------------------------

_CARRIERS: weakref.WeakSet = weakref.WeakSet()
_CELL_ROOTS: set[str] = set()  # ids of the root models of inspector cells
_CELL_SHEETS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # doc: {url: sheet}
_IN_CELL = contextvars.ContextVar("inspector_cell_model", default=False)


class Cell(pn.Column):
    """The root of an inspector cell: its first child carries the component bundle."""


def cell(*objects, **params) -> Cell:
    """Returns the root of an inspector cell holding `objects`: what the patches act on."""
    return Cell(_carrier(), *objects, **params)


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


# bundle once -------------------------------------------------------------------------------------

_get_model = MaterialComponent._get_model
_get_material_properties = MaterialComponent._get_properties
_ICON_CSS: list[str] = []  # read when the patch is installed


def _get_model_in_a_cell(self, doc, root=None, parent=None, comm=None):
    """`MaterialComponent._get_model`, made to fit an inspector cell.

    Marks the cell (its root and document) when the carrier is created: the components created
    after it in the cell get their properties from `_material_properties_in_a_cell`. The root
    (Panel's design wrapper), created before it, is fixed here; a new model is not in the
    document yet, so changing it sends no extra message. While the model is built, `_IN_CELL`
    says whether it belongs to an inspector cell (read by the pane-echo patch).
    """
    in_cell = comm is not None and (
        self in _CARRIERS or (root is not None and root.ref["id"] in _CELL_ROOTS))
    token = _IN_CELL.set(in_cell)
    try:
        model = _get_model(self, doc, root, parent, comm)
    finally:
        _IN_CELL.reset(token)
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
    model.css_bundle = _ICON_CSS[0]
    return model


def _material_properties_in_a_cell(self, doc):
    """`MaterialComponent._get_properties` in an inspector cell: no bundle (but in the carrier)
    and the icon classes. Used for new components and for updates: a pane whose text changes
    (`pmui.Typography`, e.g. the status line) re-sends all its properties, the bundle too."""
    props = _get_material_properties(self, doc)
    if (doc is None or doc not in _CELL_SHEETS or not pn.config.inline
            or props.get("bundle") in (None, "url")):
        return props
    props["css_bundle"] = _ICON_CSS[0]
    if self not in _CARRIERS:
        props["esm"] = ""
    return props


def _install_bundle_once() -> None:
    _ICON_CSS[:] = [icon_css()]
    MaterialComponent._get_model = _get_model_in_a_cell
    MaterialComponent._get_properties = _material_properties_in_a_cell


# stylesheets inline ------------------------------------------------------------------------------

_get_properties = Reactive._get_properties


def _get_properties_inline(self, doc):
    """`Reactive._get_properties` with Panel's CDN stylesheets inlined in inspector cells
    (documents marked by the carrier), one inline sheet per URL and cell."""
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


def _install_stylesheets_inline() -> None:
    Reactive._get_properties = _get_properties_inline


# no pane echo ------------------------------------------------------------------------------------

_pane_links = MaterialPaneBase._linked_properties


@property
def _pane_links_in_a_cell(self) -> tuple[str, ...]:
    # read while the pane's model is built (`_link_props`): in an inspector cell, `object` is
    # not linked back from the page
    links = _pane_links.fget(self)
    return tuple(p for p in links if p != "object") if _IN_CELL.get() else links


def _install_no_pane_echo() -> None:
    MaterialPaneBase._linked_properties = _pane_links_in_a_cell


_WRITTEN_FOR = {"panel": (1, 9), "panel-material-ui": (0, 16)}

PATCHES = (
    Patch("bundle once", _WRITTEN_FOR,
          ((MaterialComponent, "_get_model"), (MaterialComponent, "_get_properties")),
          _install_bundle_once,
          "every component of a cell carries the 1.4 MB component bundle (cells of ~70 MB)"),
    Patch("stylesheets inline", {"panel": (1, 9)}, ((Reactive, "_get_properties"),),
          _install_stylesheets_inline,
          "components added to a cell later fetch their stylesheets from the CDN"),
    Patch("no pane echo", _WRITTEN_FOR, ((MaterialPaneBase, "_linked_properties"),),
          _install_no_pane_echo,
          "a status line may show its own earlier text sent back by the page"),
)
