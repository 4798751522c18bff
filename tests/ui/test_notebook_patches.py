"""The notebook patches: installed explicitly, only for the versions they were written for, and
acting only on inspector cells (other Panel output in the kernel keeps Panel's behaviour)."""

from __future__ import annotations

import panel as pn
import panel_material_ui as pmui
import pytest
from panel.reactive import Reactive
from panel_material_ui.base import MaterialComponent
from panel_material_ui.pane.base import MaterialPaneBase

from inspector.ui import notebook, notebook_patches
from inspector.ui.notebook_patches import PATCHES, PatchSkippedWarning

NAMES = ("bundle once", "stylesheets inline", "no pane echo")
ORIGINALS = {
    (MaterialComponent, "_get_model"): notebook_patches._get_model,
    (MaterialComponent, "_get_properties"): notebook_patches._get_material_properties,
    (Reactive, "_get_properties"): notebook_patches._get_properties,
    (MaterialPaneBase, "_linked_properties"): notebook_patches._pane_links,
}


def test_loading_the_notebook_support_installs_every_patch_for_these_versions():
    notebook.load_notebook_support()
    assert notebook_patches.install() == NAMES
    assert MaterialComponent._get_model is notebook_patches._get_model_in_a_cell
    assert Reactive._get_properties is notebook_patches._get_properties_inline
    assert {target for p in PATCHES for target in p.targets} == set(ORIGINALS)


def test_on_other_versions_each_patch_is_skipped_with_a_warning(monkeypatch):
    for (cls, attr), original in ORIGINALS.items():
        monkeypatch.setattr(cls, attr, original)
    monkeypatch.setattr(notebook_patches, "_INSTALLED", set())
    real = notebook_patches.version
    monkeypatch.setattr(notebook_patches, "version",
                        lambda dist: "1.10.0" if dist == "panel" else real(dist))
    with pytest.warns(PatchSkippedWarning) as caught:
        assert notebook_patches.install() == ()
    messages = [str(w.message) for w in caught]
    assert messages[0] == (
        "inspector: notebook patch 'bundle once' skipped: written for panel 1.9, "
        "panel-material-ui 0.16, found panel 1.10.0, panel-material-ui 0.16.6; without it every "
        "component of a cell carries the 1.4 MB component bundle (cells of ~70 MB).")
    assert [m.split("'")[1] for m in messages] == list(NAMES)
    for (cls, attr), original in ORIGINALS.items():
        assert cls.__dict__[attr] is original, (cls, attr)


def _model(viewable):
    return next(iter(viewable._models.values()))[0]


def test_only_inspector_cells_are_patched():
    notebook.load_notebook_support()
    inside, outside = pmui.Typography("in a cell"), pmui.Typography("elsewhere")
    notebook_patches.cell(pn.Column(inside))._repr_mimebundle_()
    pn.Column(outside)._repr_mimebundle_()
    # outside a cell: Panel's behaviour, the bundle in the component and its text linked back
    assert len(_model(outside).esm) > 1_000_000
    assert "object" in _model(outside).data._callbacks
    # in the cell: the carrier holds the bundle, the pane neither it nor a link of its text
    assert _model(inside).esm == ""
    # its other properties stay linked
    assert set(_model(inside).data._callbacks) == set(_model(outside).data._callbacks) - {"object"}
