"""Checkpoint files in and out of a session: paths inside the app's root, uploads, downloads.

The served app reads the server's disk for whoever opens the page, so a path is opened only
when it resolves (links followed) inside the root folder the app was started with, and so is
every file a checkpoint refers to (`inspector.load(..., root=)`). Messages shown in the page
name files relative to the root and never a server path outside it (`relative_to_root`).
Uploads arrive in chunks into a temporary file (`upload.UploadInput`, capped while receiving);
they are read whole into memory with a tighter inflate budget and the file removed. Downloads
are written with `inspector.save` and handed to the browser as bytes.

No Panel here: the session state calls these from its worker thread, tests call them directly.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import shutil
import tempfile
from pathlib import Path

import inspector
from inspector.ui.session.formatting import human_bytes
from inspector.ui.session.loaded import LoadedTree, SetupError, prepare
from inspector.ui.session.origins import File, Upload, Url

MAX_UPLOAD_BYTES = 100 * 2**20
"""Largest file the upload accepts (bigger checkpoints: put them under the root, use the picker)."""

UPLOAD_PREFIX = "pytree-inspector-upload-"
"""Temporary folders holding uploads start so (the only ones `open_upload` removes)."""

MAX_UPLOAD_INFLATE_BYTES = 256 * 2**20
"""Most an upload may decompress in total (its leaves are all read into memory)."""

MAX_DOWNLOAD_BYTES = 2**30
"""Largest tree the app sends to the browser as a file (it travels base64-encoded in memory)."""

REMOTE_ENV = "PYTREE_INSPECTOR_ALLOW_REMOTE"
"""`1` lets the served app open any URL; a comma-separated list, only URLs with those prefixes."""

REMOTE_OFF = (
    "Opening URLs is off in this app (a server must not fetch addresses for whoever opens its "
    "page).\nStart it with --allow-remote (and --remote-prefix PREFIX to allow only some), or "
    f"set {REMOTE_ENV}=1 (or to comma-separated URL prefixes)."
)

EXPORT_FORMATS = {"safetensors": ".safetensors", "npz": ".npz"}
_CHECKPOINT_SUFFIXES = (".safetensors", ".npz", ".npy", ".msgpack", ".h5", ".hdf5", ".pt",
                        ".pth", ".bin", ".ckpt")


def inside_root(root: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Returns `path` resolved (relative to `root`, links followed) when it lies inside `root`.

    Raises:
        SetupError: the path, or what its links point to, is outside `root`; the message
            names the path as given, never where it leads (a server path outside the root).

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> inside_root(root, "ckpt.npz") == Path(root).resolve() / "ckpt.npz"
    True
    >>> try:
    ...     inside_root(root, "../x.npz")
    ... except SetupError as e:
    ...     print(str(e).splitlines()[0])
    Cannot open ../x.npz: it is outside the folder this app may open.
    """
    base = Path(root).resolve()
    resolved = (base / path).resolve()
    if resolved.is_relative_to(base):
        return resolved
    lexical = Path(os.path.normpath(base / path))
    shown = lexical.relative_to(base) if lexical.is_relative_to(base) else Path(path)
    what = ("it is a link to a file outside" if lexical.is_relative_to(base)
            else "it is outside")
    raise SetupError(f"Cannot open {shown}: {what} the folder this app may open.\nPut the "
                     f"checkpoint inside that folder, or start the app with --root set to a "
                     f"folder that holds it.")


_ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/-])/[^\s:'\"()\[\],;]*")  # not inside a URL


def relative_to_root(text: str, root: str | os.PathLike | None) -> str:
    """Returns `text` with every absolute path shown relative to `root`, or by its name alone
    when it lies outside (a server path the page must not show).

    >>> relative_to_root("Cannot load /srv/ckpt/sub/m.npz: bad. (see /usr/lib/x.py:3)", "/srv/ckpt")
    'Cannot load sub/m.npz: bad. (see x.py:3)'
    >>> relative_to_root("Cannot open s3://models/m.npz or https://host/x/m.npz", "/srv")
    'Cannot open s3://models/m.npz or https://host/x/m.npz'
    """
    base = Path(root).resolve() if root else None

    def shown(match: re.Match) -> str:
        path = Path(match.group(0))
        if base is not None and path.is_relative_to(base):
            return str(path.relative_to(base))
        return path.name or match.group(0)

    return _ABSOLUTE_PATH.sub(shown, text)


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
        try:
            tree = inspector.load(path, root=root or None)
            info = shown_info(inspector.file_info(path, root=root or None), root)
        except inspector.InspectorError as exc:
            raise type(exc)(relative_to_root(str(exc), root)) from None
        shown = path.relative_to(Path(root).resolve()).as_posix() if root else str(path)
        out.append(prepare(path.name, tree, File(shown, root=bool(root)), info))
    return out


def shown_info(info, root: str | os.PathLike | None):
    """`info` (an `inspector.FileInfo`) with paths in its problems shown relative to `root`."""
    problems = tuple(relative_to_root(p, root) for p in info.problems)
    return dataclasses.replace(info, problems=problems)


def remote_prefixes_from_env(value: str | None = None) -> list[str] | None:
    """The URL prefixes `$PYTREE_INSPECTOR_ALLOW_REMOTE` allows: None (off), [] (any URL).

    >>> remote_prefixes_from_env(""), remote_prefixes_from_env("1")
    (None, [])
    >>> remote_prefixes_from_env("s3://models/, https://hf.co/")
    ['s3://models/', 'https://hf.co/']
    """
    value = (os.environ.get(REMOTE_ENV, "") if value is None else value).strip()
    if value.lower() in ("", "0", "false", "no", "off"):
        return None
    if value.lower() in ("1", "true", "yes", "on", "*"):
        return []
    return [prefix.strip() for prefix in value.split(",") if prefix.strip()]


def open_remote(url: str, prefixes: list[str] | None, progress=None) -> LoadedTree:
    """Loads the checkpoint at `url` (structure only), if the app's policy allows the URL.

    Args:
        url: an http(s)://, s3://, gs://, hf:// ... URL.
        prefixes: None refuses every URL (the served app's default); [] allows any; else the
            URL must start with one of them.
        progress: passed to `inspector.load` (remote leaf reads report to it).

    Raises:
        SetupError: the text is no URL, URLs are off, or the URL has none of the prefixes.
        LoadError: the URL cannot be read or is not a checkpoint (the message names it).
    """
    from inspector.io.locate import is_url
    from inspector.io.remote.failures import redact

    url = url.strip()
    if not is_url(url):
        raise SetupError(f"Cannot open {url!r}: it is not a URL.\nType an address such as "
                         "https://host/model.safetensors, s3://bucket/ckpt/ or hf://org/model/x.")
    if prefixes is None:
        raise SetupError(f"Cannot open {redact(url)}: {REMOTE_OFF}")
    if prefixes and not any(url.startswith(prefix) for prefix in prefixes):
        raise SetupError(f"Cannot open {redact(url)}: this app opens only URLs starting with "
                         f"{', '.join(prefixes)}.")
    tree = inspector.load(url, progress=progress)
    name = redact(url).split("?")[0].rstrip("/").rsplit("/", 1)[-1] or redact(url)
    return prepare(name, tree, Url(redact(url)))


def open_upload(filename: str, data: bytes | os.PathLike) -> LoadedTree:
    """Loads an uploaded file (its format sniffed from the bytes), named by its file name.

    Args:
        filename: the name the browser gave (only its last part is used).
        data: the bytes, or the temporary file `UploadInput` received them into (removed
            here, whatever happens).

    Every leaf is read into memory (with at most `MAX_UPLOAD_INFLATE_BYTES` decompressed) and
    the file removed, so the tree does not depend on it.

    Raises:
        SetupError: the file is empty or bigger than `MAX_UPLOAD_BYTES`.
        LoadError: the bytes are not a checkpoint the inspector reads (the message names the
            uploaded file, not the temporary one).
    """
    import jax

    name = Path(filename or "upload").name or "upload"
    received = None if isinstance(data, bytes) else Path(data)
    folder = tempfile.mkdtemp(prefix=UPLOAD_PREFIX)
    try:
        size = len(data) if received is None else received.stat().st_size
        if size > MAX_UPLOAD_BYTES:
            raise SetupError(f"Cannot upload {name}: it is {human_bytes(size)}, more than the "
                             f"{human_bytes(MAX_UPLOAD_BYTES)} an upload may be.\nPut it inside "
                             f"the app's root folder and open it with the file picker.")
        path = Path(folder) / _safe_name(name)
        if received is None:
            path.write_bytes(data)
        else:
            shutil.move(received, path)
        try:
            tree = inspector.load(path, root=folder, max_inflate=MAX_UPLOAD_INFLATE_BYTES)
            info = shown_info(inspector.file_info(path, root=folder), folder)
            tree = jax.tree.map(
                lambda x: x.read().copy() if isinstance(x, inspector.LazyArray) else x, tree)
        except inspector.InspectorError as exc:
            text = str(exc).replace(os.fspath(path), name)
            raise type(exc)(relative_to_root(text, folder)) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if received is not None:
            received.unlink(missing_ok=True)
            if received.parent.name.startswith(UPLOAD_PREFIX):  # UploadInput's own folder
                shutil.rmtree(received.parent, ignore_errors=True)
    return prepare(name, tree, Upload(name), info)


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
