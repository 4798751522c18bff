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


def series(name: str) -> str:
    """A name with each number as `#`: the naming series it belongs to.

    >>> series("ckpt_1000.safetensors"), series("epoch=3-step=1200.ckpt")
    ('ckpt_#.safetensors', 'epoch=#-step=#.ckpt')
    """
    return _NUMBER.sub("#", name)


def checkpoint_folder(folder: str | os.PathLike) -> list[tuple[int, Path]]:
    """Returns `(step, path)` of every checkpoint in `folder`, ordered by step
    (`checkpoint_series`, without the entries it leaves out)."""
    return checkpoint_series(folder)[0]


def checkpoint_series(folder: str | os.PathLike) -> tuple[list[tuple[int, Path]], list[Path]]:
    """Returns `(step, path)` of every checkpoint in `folder`, ordered by step: orbax
    `CheckpointManager` step folders (`1000/default`: the step's item folder) or files (and
    folders) whose names carry a number; and the entries left out. Where the numbered names
    form several series (names alike but for their numbers: `ckpt_#.safetensors` beside a
    stray `fp8.safetensors`) and one series has more entries than any other, the others are
    left out; names without a number are never taken.

    Raises:
        LoadError: nothing in the folder carries a step number, or two entries share one.
    """
    folder = Path(folder)
    numbered: dict[str, list[tuple[int, Path]]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name.endswith((".tmp", ".json")):
            continue
        step = step_number(entry.name)
        if step is not None:
            numbered.setdefault(series(entry.name), []).append((step, entry))
    if not numbered:
        raise LoadError(
            f"{folder}: no checkpoint in it carries a step number (like ckpt_1000.safetensors "
            "or an orbax step folder 1000/). Pass the checkpoints as a list, in order.")
    sizes = sorted((len(v) for v in numbered.values()), reverse=True)
    left_out: list[Path] = []
    if len(sizes) > 1 and sizes[0] > sizes[1]:  # one series is the run: the rest stray
        main = max(numbered, key=lambda k: len(numbered[k]))
        left_out = sorted(e for k, v in numbered.items() if k != main for _, e in v)
        numbered = {main: numbered[main]}
    found: dict[int, list[Path]] = {}
    for entries in numbered.values():
        for step, entry in entries:
            found.setdefault(step, []).append(_item(entry))
    twice = {s: p for s, p in found.items() if len(p) > 1}
    if twice:
        lines = "\n".join(f"  - step {s}: {', '.join(str(x) for x in p)}"
                          for s, p in sorted(twice.items()))
        raise LoadError(f"{folder}: {len(twice)} step numbers name several checkpoints.\n"
                        f"{lines}\nPass the checkpoints as a list, in order.")
    return [(s, p[0]) for s, p in sorted(found.items())], left_out


def _item(entry: Path) -> Path:
    """The checkpoint inside an orbax step folder (its one item folder holding `_METADATA`,
    `default` first), else the entry itself."""
    if not entry.is_dir() or (entry / "_METADATA").exists():
        return entry
    items = sorted(p for p in entry.iterdir() if (p / "_METADATA").exists())
    items.sort(key=lambda p: p.name != "default")
    return items[0] if items else entry
