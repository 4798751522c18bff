"""The example notebooks: executed by a Jupyter kernel (nbclient), up to date with their
scripts, and the scripts run as plain Python; each prints the figures of SCENARIOS.md."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from .conftest import EXAMPLES

EXEC_MIME = "application/vnd.holoviews_exec.v0+json"

# What each example prints (lines of its output, exactly), from SCENARIOS.md.
PRINTED = {
    "s1_model_averaging": [
        "result dtype: int32",
        "structure: PyTreeDef([[*, *], [*, *]])",
        "result: [[[[26, 11], [21, 24]], [30, 15]], [[[23, 20], [18, 33]], [33, 18]]]",
        "kernels compiled on the second run: 0",
        "sgd step: [0.95, -2.05]",
    ],
    "s2_per_subtree_indexing": [
        "result: [([3.0, 4.0, 5.0], [30.0, 40.0, 50.0], [300.0, 400.0, 500.0]), [1.0, 2.0], "
        "None, ([10.0, 11.0], (None,))]",
        "Cannot index the tree: 3 leaves do not fit the index.",
        "  - [0][0]: index 4 is out of range for axis 0 of size 4",
        "  - [0][2]: index 4 is out of range for axis 0 of size 4",
    ],
    "s3_vmap_ensemble": [
        "vmap over the list fails: vmap got inconsistent sizes for array axes to be mapped:",
        "stacked shapes: [((4, 3, 2), (4, 3)), ((4, 4, 3), (4, 4))]",
        "vmap equals the loop: True",
        "unstack(stack(models)) == models: True",
    ],
    "s5_checkpoint_debugging": [
        "['dense']['kernel']      float32  (3, 4)",
        "['norm']['scale']        float16  (3,)",
        "['dense']['bias']: missing from the second tree (first has float32[3])",
        "['dense']['kernel']: shape (4, 3) vs (3, 4)",
        "['norm']['scale']: dtype float32 vs float16",
        "['norm']['offset']: only in the second tree (float32[3])",
    ],
}
STEMS = sorted(PRINTED)


def _builder():
    spec = importlib.util.spec_from_file_location("build_notebooks",
                                                  EXAMPLES / "build_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_script_is_tested():
    assert [p.stem for p in _builder().scripts()] == STEMS


@pytest.mark.parametrize("stem", STEMS)
def test_the_notebook_is_up_to_date_with_its_script(stem):
    nb = json.loads((EXAMPLES / f"{stem}.ipynb").read_text())
    cells = [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]
    assert cells == _builder().cells_of(EXAMPLES / f"{stem}.py"), \
        "run: .venv/bin/python examples/build_notebooks.py"
    assert all(not c.get("outputs") for c in nb["cells"])  # outputs are not stored


@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_the_notebook_runs_in_a_kernel_and_shows_the_widget(executed, stem):
    nb = executed(stem)
    code = [c for c in nb.cells if c.cell_type == "code"]
    outputs = [o for c in code for o in c.outputs]
    assert [o for o in outputs if o.output_type == "error"] == []
    printed = "".join(o.text for o in outputs if o.output_type == "stream" and
                      o.name == "stdout").splitlines()
    missing = [line for line in PRINTED[stem] if line not in printed]
    assert missing == []
    widget = code[-1].outputs[-1]  # the last cell's value: the inspector
    assert widget.output_type == "execute_result" and EXEC_MIME in widget.data
    assert len(widget.data["text/html"]) < 5_000_000  # the component bundle once, not ~50 times


@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_the_script_runs_as_plain_python(stem):
    out = subprocess.run([sys.executable, str(EXAMPLES / f"{stem}.py")], capture_output=True,
                         text=True, timeout=180, cwd=EXAMPLES)
    assert out.returncode == 0, out.stderr[-3000:]
    missing = [line for line in PRINTED[stem] if line not in out.stdout.splitlines()]
    assert missing == []
