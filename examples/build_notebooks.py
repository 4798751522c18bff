"""Writes each `examples/s*.py` script (cells marked `# %%`) as a notebook beside it.

    .venv/bin/python examples/build_notebooks.py

The scripts are the source of truth: each runs as a plain script, and the notebooks are
generated from them so the two never drift apart (tests/notebooks checks they are up to date).
Outputs are not stored: run the notebook to see them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).parent
# `insp  # noqa: B018 (...)`: ruff's note on a cell's displayed last line, not for readers.
_NOQA = re.compile(r"\s+# noqa\b.*$", re.MULTILINE)


def scripts() -> list[Path]:
    """The example scripts, in order."""
    return sorted(HERE.glob("s[0-9]*.py"))


def cells_of(script: Path) -> list[tuple[str, str]]:
    """Returns the script's `# %%` sections as `(kind, source)`, kind 'markdown' or 'code'."""
    cells = []
    for chunk in script.read_text().split("# %%")[1:]:
        header, _, body = chunk.partition("\n")
        body = body.strip("\n")
        if header.strip() == "[markdown]":
            lines = (line.removeprefix("# ").removeprefix("#") for line in body.splitlines())
            cells.append(("markdown", "\n".join(lines)))
        else:
            cells.append(("code", _NOQA.sub("", body)))
    return cells


def notebook_for(script: Path) -> nbformat.NotebookNode:
    """Returns the notebook whose cells are the script's `# %%` sections (no outputs)."""
    new = {"markdown": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell}
    nb = nbformat.v4.new_notebook(cells=[new[kind](source) for kind, source in cells_of(script)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def main() -> int:
    for script in scripts():
        target = script.with_suffix(".ipynb")
        nb = notebook_for(script)
        for i, cell in enumerate(nb.cells):  # stable ids: a rebuild changes nothing
            cell["id"] = f"{script.stem[:2]}-{i:02d}"
        nbformat.write(nb, target)
        print(f"wrote {target.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
