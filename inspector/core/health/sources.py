"""A run's checkpoints in step order: a folder of orbax `CheckpointManager` steps or of files
whose names carry a number, or a list given in order."""

from __future__ import annotations

import os
import re
from pathlib import Path

from inspector.core.errors import LoadError

_NUMBER = re.compile(r"(\d+)")


def step_number(name: str) -> int | None:
    """The last number in a file or folder name (`ckpt_1000.safetensors` -> 1000), or None.

    >>> step_number("ckpt_1000.safetensors"), step_number("model.npz")
    (1000, None)
    """
    found = _NUMBER.findall(Path(name).name.split(".")[0]) or _NUMBER.findall(Path(name).name)
    return int(found[-1]) if found else None


def checkpoint_folder(folder: str | os.PathLike) -> list[tuple[int, Path]]:
    """Returns `(step, path)` of every checkpoint in `folder`, ordered by step: orbax
    `CheckpointManager` step folders (`1000/default`: the step's item folder) or files (and
    folders) whose names carry a number.

    Raises:
        LoadError: nothing in the folder carries a step number, or two entries share one.
    """
    folder = Path(folder)
    found: dict[int, list[Path]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name.endswith((".tmp", ".json")):
            continue
        step = step_number(entry.name)
        if step is None:
            continue
        found.setdefault(step, []).append(_item(entry))
    if not found:
        raise LoadError(
            f"{folder}: no checkpoint in it carries a step number (like ckpt_1000.safetensors "
            "or an orbax step folder 1000/). Pass the checkpoints as a list, in order.")
    twice = {s: p for s, p in found.items() if len(p) > 1}
    if twice:
        lines = "\n".join(f"  - step {s}: {', '.join(str(x) for x in p)}"
                          for s, p in sorted(twice.items()))
        raise LoadError(f"{folder}: {len(twice)} step numbers name several checkpoints.\n"
                        f"{lines}\nPass the checkpoints as a list, in order.")
    return [(s, p[0]) for s, p in sorted(found.items())]


def _item(entry: Path) -> Path:
    """The checkpoint inside an orbax step folder (its one item folder holding `_METADATA`,
    `default` first), else the entry itself."""
    if not entry.is_dir() or (entry / "_METADATA").exists():
        return entry
    items = sorted(p for p in entry.iterdir() if (p / "_METADATA").exists())
    items.sort(key=lambda p: p.name != "default")
    return items[0] if items else entry
