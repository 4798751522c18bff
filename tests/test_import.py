"""`import inspector` must stay UI-free and cheap (DESIGN.md layers)."""

import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint(','.join(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.strip().splitlines()[-1].split(","))


def test_import_loads_no_ui_library_and_not_even_jax():
    loaded = _modules_after("import inspector")
    assert not loaded & {"panel", "bokeh", "param", "panel_material_ui", "jax"}


def test_using_the_library_loads_no_ui_library():
    code = (
        "import numpy as np, inspector\n"
        "inspector.weighted_sum([{'a': np.ones(2)}, {'a': np.ones(2)}], [1, 2])\n"
        "inspector.describe({'a': 1}); inspector.diff({'a': 1}, {'b': 1})\n"
        "inspector.index([np.ones(3)], ['1:'])\n"
        "inspector.unstack(inspector.stack([[np.ones(2)]]))\n"
        "inspector.run(inspector.weighted_sum, [[np.ones(2)]], [1.0])\n"
    )
    loaded = _modules_after(code)
    assert "jax" in loaded
    assert not loaded & {"panel", "bokeh", "param", "panel_material_ui"}


def test_public_names_resolve():
    import inspector

    for name in inspector.__all__:
        if name in ("show", "Inspector"):
            continue  # these import the UI on purpose
        assert getattr(inspector, name) is not None, name
