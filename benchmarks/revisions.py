"""A module of this repository as it was at an earlier git revision, loaded beside the current
one (benchmarks that time "before" against "now" in one process)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path


def module_at(rev: str, path: str, name: str):
    """The file `path` (from the repository root) at git revision `rev`, imported as module
    `name` (registered in `sys.modules`: dataclasses look their module up)."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True,
                            check=True).stdout
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(source)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
