"""docs/where-things-live.md stays true: every module it names exists, rows sorted by feature."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "where-things-live.md"


def _rows() -> list[tuple[str, str]]:
    rows = []
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if line.startswith("| ") and cells[0] != "feature":
            rows.append((cells[0], cells[-1]))
    return rows


def test_every_home_named_exists():
    missing = []
    for feature, home in _rows():
        folder = None
        for name in re.findall(r"`([^`]+)`", home):
            if "/" in name:  # a path from the repository root
                path = ROOT / name
                folder = path if name.endswith("/") else path.parent
            elif folder is not None and name.endswith(".py"):  # beside the path before it
                path = folder / name
            else:
                continue
            if "*" not in name and not path.exists():
                missing.append(f"{feature}: {name}")
    assert not missing, "\n".join(missing)
    assert len(_rows()) > 40


def test_rows_are_sorted_by_feature():
    keys = [feature.replace("`", "").lower() for feature, _ in _rows()]
    assert keys == sorted(keys)
