"""Checkpoint files in and out of a session: paths inside the app's root, uploads, downloads.

The served app reads the server's disk for whoever opens the page, so a path is opened only
when it resolves (links followed) inside the root folder the app was started with. Uploads are
small files sent by the browser: they are read whole into memory, so nothing is left on disk.
Downloads are written with `inspector.save` and handed to the browser as bytes.

No Panel here: the session state calls these from its worker thread, tests call them directly.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
from pathlib import Path

import inspector
from inspector.ui.session.formatting import human_bytes
from inspector.ui.session.loaded import LoadedTree, SetupError, prepare

MAX_UPLOAD_BYTES = 100 * 2**20
"""Largest file the upload accepts (bigger checkpoints: put them under the root, use the picker)."""

MAX_DOWNLOAD_BYTES = 2**30
"""Largest tree the app sends to the browser as a file (it travels base64-encoded in memory)."""

EXPORT_FORMATS = {"safetensors": ".safetensors", "npz": ".npz"}
_CHECKPOINT_SUFFIXES = (".safetensors", ".npz", ".npy", ".msgpack", ".h5", ".hdf5", ".pt",
                        ".pth", ".bin", ".ckpt")


def inside_root(root: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Returns `path` resolved (relative to `root`, links followed) when it lies inside `root`.

    Raises:
        SetupError: the path, or what its links point to, is outside `root`; the message
            names the path as given and where it leads.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> inside_root(root, "ckpt.npz") == Path(root).resolve() / "ckpt.npz"
    True
    >>> try:
    ...     inside_root(root, "../x.npz")
    ... except SetupError as e:
    ...     print(str(e).splitlines()[0])  # doctest: +ELLIPSIS
    Cannot open ../x.npz: it resolves to /tmp/x.npz, outside the folder this app may open (...).
    """
    base = Path(root).resolve()
    resolved = (base / path).resolve()
    if resolved.is_relative_to(base):
        return resolved
    lexical = Path(os.path.normpath(base / path))
    via = (f"it is a link to {resolved}, which is" if lexical.is_relative_to(base)
           else f"it resolves to {resolved},")
    raise SetupError(f"Cannot open {os.fspath(path)}: {via} outside the folder this app may "
                     f"open ({base}).\nPut the checkpoint inside that folder, or start the app "
                     f"with --root set to a folder that holds it.")


def open_checkpoints(root: str, paths) -> list[LoadedTree]:
    """Loads each path (a file or an orbax folder) inside `root`, structure only (lazy leaves).

    Raises:
        SetupError: nothing was picked, or a path lies outside `root`.
        LoadError: a path is not a checkpoint the inspector reads (the message names it).
    """
    if not paths:
        raise SetupError("Pick a checkpoint file or folder to open first.")
    out = []
    for p in paths:
        path = inside_root(root, p) if root else Path(p).resolve()
        out.append(prepare(path.name, inspector.load(path), f"file {path.name}"))
    return out


def open_upload(filename: str, data: bytes) -> LoadedTree:
    """Loads an uploaded file (its format sniffed from the bytes), named by its file name.

    The bytes go to a temporary file only for the format readers; every leaf is then read
    into memory and the file removed, so the tree does not depend on it.

    Raises:
        SetupError: the file is empty or bigger than `MAX_UPLOAD_BYTES`.
        LoadError: the bytes are not a checkpoint the inspector reads (the message names the
            uploaded file, not the temporary one).
    """
    import jax

    name = Path(filename or "upload").name or "upload"
    if len(data) > MAX_UPLOAD_BYTES:
        raise SetupError(f"Cannot upload {name}: it is {human_bytes(len(data))}, more than the "
                         f"{human_bytes(MAX_UPLOAD_BYTES)} an upload may be.\nPut it inside the "
                         f"app's root folder and open it with the file picker.")
    folder = tempfile.mkdtemp(prefix="pytree-inspector-upload-")
    try:
        path = Path(folder) / _safe_name(name)
        path.write_bytes(data)
        try:
            tree = inspector.load(path)
            tree = jax.tree.map(
                lambda x: x.read().copy() if isinstance(x, inspector.LazyArray) else x, tree)
        except inspector.InspectorError as exc:
            raise type(exc)(str(exc).replace(os.fspath(path), name)) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return prepare(name, tree, f"upload {name}")


def export_name(tree_name: str, fmt: str) -> str:
    """The download's file name: the tree's name, made file-safe, with the format's suffix.

    >>> export_name("weighted_sum(t1, t2, t3)", "npz")
    'weighted_sum_t1_t2_t3.npz'
    >>> export_name("model.safetensors", "npz")
    'model.npz'
    """
    stem = tree_name
    for suffix in _CHECKPOINT_SUFFIXES:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return f"{_safe_name(stem) or 'tree'}{EXPORT_FORMATS[fmt]}"


def export_bytes(tree, fmt: str) -> io.BytesIO:
    """Writes `tree` as a `fmt` file (`inspector.save`) and returns its bytes.

    Raises:
        InspectorError: a leaf is not an array, a key cannot be stored, or the tree is larger
            than `MAX_DOWNLOAD_BYTES` (the message says how to save it from Python instead).
    """
    if isinstance(tree, inspector.PackedTree):
        tree = tree.unpack()  # `save` takes nested containers of arrays
    total = sum(getattr(leaf, "nbytes", 0) for leaf in _leaves(tree))
    if total > MAX_DOWNLOAD_BYTES:
        raise inspector.InspectorError(
            f"Cannot download this tree: it is {human_bytes(total)}, more than the "
            f"{human_bytes(MAX_DOWNLOAD_BYTES)} the app sends through the browser.\n"
            f"Save it from Python instead: inspector.save(tree, 'path{EXPORT_FORMATS[fmt]}').")
    folder = tempfile.mkdtemp(prefix="pytree-inspector-export-")
    try:
        path = inspector.save(tree, Path(folder) / f"tree{EXPORT_FORMATS[fmt]}", format=fmt)
        return io.BytesIO(path.read_bytes())
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _leaves(tree) -> list:
    import jax

    return jax.tree.leaves(tree)


def _safe_name(name: str) -> str:
    return re.sub(r"[^\w.+-]+", "_", name).strip("_.")
