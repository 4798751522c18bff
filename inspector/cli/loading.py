"""How every subcommand opens a checkpoint: `inspector.load`, a model folder's own file, and
the library's refusal as exit status 2 (`Failed`, which `main` turns into the status)."""

from __future__ import annotations

from pathlib import Path

from inspector.cli.output import Failed, Output


def model_file(folder: Path) -> Path:
    """The file to open for a model folder (as Hugging Face lays one out), else the folder.

    In order: `model.safetensors.index.json`, `model.safetensors`, the folder's one
    `*.safetensors.index.json` or one `*.safetensors`, `pytorch_model.bin`; otherwise the
    folder itself (an orbax checkpoint, which `inspector.load` reads as a folder).

    Raises:
        LoadError: the folder holds several indexes, or several `*.safetensors` files and no
            index naming each tensor's file.
    """
    from inspector.io.file_error import file_error

    for name in ("model.safetensors.index.json", "model.safetensors"):
        if (folder / name).is_file():
            return folder / name
    for pattern in ("*.safetensors.index.json", "*.safetensors"):
        found = sorted(folder.glob(pattern))
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            what = "indexes" if pattern.endswith(".json") else ".safetensors files and no index"
            raise file_error(folder, f"the folder holds {len(found)} {what} "
                             f"({', '.join(p.name for p in found[:4])}, ...)",
                             "Pass the file to open.")
    if (folder / "pytorch_model.bin").is_file():
        return folder / "pytorch_model.bin"
    return folder


def checkpoint_path(path: str) -> str:
    """What to open for `path`: a local folder's model file (`model_file`), else `path`.

    Raises:
        LoadError: as `model_file`.
    """
    from inspector.io.locate import is_url

    if not is_url(path) and Path(path).is_dir():
        return str(model_file(Path(path)))
    return path


def load_or_fail(path: str, out: Output):
    """Returns `inspector.load(path)` (lazy leaves: headers only; a model folder's own file).

    Raises:
        Failed: the library refused it; its message is printed (exit status 2).
    """
    import inspector

    try:
        return inspector.load(checkpoint_path(path))
    except inspector.InspectorError as error:
        raise Failed(out.fail(str(error))) from None


def checkpoint_path_or_fail(path: str, out: Output) -> str:
    """`checkpoint_path(path)`, or `Failed` with the library's message printed."""
    from inspector.core.errors import InspectorError

    try:
        return checkpoint_path(path)
    except InspectorError as error:
        raise Failed(out.fail(str(error))) from None
