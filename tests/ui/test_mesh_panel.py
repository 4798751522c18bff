"""The mesh panel: mesh presets and errors, specs checked as typed, Shard, the device map, the
timing card's mesh, and the tree view's shardings; through state params on 8 fake devices, and
once in the served page.

8 devices need XLA_FLAGS before JAX starts: `mesh_eight_devices.py` runs in a subprocess and
prints what the session showed; the browser test serves the app with the same flag.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.serving import free_port, session, stop, wait_for

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
ENV = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
           JAX_PLATFORMS="cpu",
           PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture(scope="module")
def record():
    proc = subprocess.run([sys.executable, str(HERE / "mesh_eight_devices.py")], env=ENV,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_presets_and_mesh_errors(record):
    assert record["presets"] == ["data=8", "data=4, model=2", "data=2, model=4", "model=8"]
    assert record["axes"] == "data=4, model=2"
    assert record["mesh_error"] == [
        "A mesh data=4, model=3 needs 12 devices, but there are 8 (cpu). Choose sizes whose "
        "product is 8, e.g. {'data': 4, 'model': 2}.", True]
    assert record["axes_after_preset"] == ["data=4, model=2", "", False]


def test_specs_are_checked_as_typed_every_bad_path_shown(record):
    assert record["fields"] == ["['layers']", "['s']", "['w']"]
    assert record["spec_errors"] == {
        "['layers']": "['layers'][0]: shape (6, 4), spec PartitionSpec('data'): dimension 0 "
                      "(6) does not divide over data=4 (the mesh has data=4, model=2)",
        "['s']": "['s']: shape (), spec PartitionSpec('model'): the spec has 1 entry for a leaf "
                 "of rank 0 (the mesh has data=4, model=2)"}
    assert record["error_shown"] == {"['layers']": True, "['s']": True, "['w']": False}
    assert record["spec_errors_fixed"] == {}


def test_shard_adds_the_sharded_tree_and_the_tree_view_shows_each_leafs_sharding(record):
    assert record["after_shard"] == ["model @ data=4, model=2", "",
                                     ["model", "model @ data=4, model=2"]]
    sep = "\u2003"
    assert record["labels"] == {
        "['layers'][0]": sep.join(["[0]", "float32[6,4]", "96 B",
                                   "P('model') over data=4, model=2"]),
        "['layers'][1]": sep.join(["[1]", "float32[8]", "32 B",
                                   "P('model') over data=4, model=2"]),
        "['s']": sep.join(["['s']", "float32[]", "4 B", "replicated over 8 devices"]),
        "['w']": sep.join(["['w']", "float32[8,4]", "128 B",
                           "P('data', 'model') over data=4, model=2"]),
    }


def test_device_map_and_timing_card_on_the_mesh(record):
    devices = [f"cpu:{i}" for i in range(8)]
    # w 2x2 float32 (16 B) + layers[0] 3x4 (48 B) + layers[1] 4 (16 B) + s replicated (4 B)
    assert record["device_map_input"] == {"device": devices, "selected tree": [84] * 8,
                                          "result": [0] * 8}
    assert record["device_map"] == {"device": devices, "selected tree": [84] * 8,
                                    "result": [84] * 8}
    error, card = record["run"]
    assert error == ""
    assert card["device"] == "8 devices"
    assert card["mesh"] == "data=4, model=2 (SPMD over the mesh)"
    assert record["result_spec"] == "P('data', 'model')"
    np.testing.assert_array_equal(record["result_w"],
                                  0.75 * np.arange(32.0).reshape(8, 4))


@pytest.mark.browser
def test_mesh_tab_in_the_page(browser):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "panel", "serve", "inspector", "--address", "127.0.0.1",
         "--port", str(port), "--allow-websocket-origin", f"127.0.0.1:{port}", "--liveness"],
        cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(f"http://127.0.0.1:{port}/liveness", proc)
        url = f"http://127.0.0.1:{port}/inspector"
        urllib.request.urlopen(url, timeout=120).close()  # the first page builds slowly
        with session(browser, url) as page:
            page.get_by_role("treeitem").first.wait_for()
            page.get_by_role("tab", name="Mesh").click()
            field = page.get_by_label("[0]  list, 2 leaves")
            field.wait_for(timeout=60_000)  # the tab's first build: slow on a loaded machine
            field.fill("data")
            error = page.locator(".spec-error").first
            error.wait_for()
            assert "[0][0]: shape (2, 2), spec PartitionSpec('data'): dimension 0 (2) does " \
                   "not divide over data=4" in error.inner_text()
            field.fill("model")
            error.wait_for(state="detached")
            page.get_by_role("button", name="Shard").click()
            assert page.locator(".bk-Canvas, canvas").count() > 0  # the device map is drawn
            page.get_by_role("tab", name="Operations").click()
            item = page.locator("[role=treeitem]", has_text="P('model') over data=4, model=2")
            item.first.wait_for()
            page.get_by_text("t1 @ data=4, model=2").first.wait_for()  # in the tree list
    finally:
        stop(proc)
