"""`load` and `save`: one entry point per direction, dispatching on the sniffed format."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inspector.core.errors import InspectorError
from inspector.io import (
    gguf_format,
    hdf5_format,
    limits,
    msgpack_format,
    nesting,
    npz_format,
    orbax_format,
    safetensors_format,
    sharded_index,
    torch_format,
)
from inspector.io.file_error import missing_library, reader_bug
from inspector.io.locate import locate
from inspector.io.location import ProgressCallback
from inspector.io.sniff import sniff

LOADERS: dict[str, Callable[[str | os.PathLike], Any]] = {
    "safetensors": safetensors_format.load,
    "safetensors-index": sharded_index.load_index,
    "npy": npz_format.load_npy,
    "npz": npz_format.load_npz,
    "orbax": orbax_format.load,
    "flax-msgpack": msgpack_format.load,
    "hdf5": hdf5_format.load,
    "torch": torch_format.load_zip,
    "torch-legacy": torch_format.load_legacy,
    "gguf": gguf_format.load,
}
"""The reader of each format `sniff` names."""

SAVERS: dict[str, Callable[[dict[str, Any], str | os.PathLike], None]] = {
    "safetensors": safetensors_format.save,
    "npz": npz_format.save,
}
"""The writer of each format `save` writes, by name; the file suffix picks one by default."""

_SUFFIXES = {".safetensors": "safetensors", ".npz": "npz"}

_PACKAGES = {"ml_dtypes": "ml-dtypes", "orbax": "orbax-checkpoint", "yaml": "pyyaml"}
"""The pip name of each module whose pip name differs from its import name."""


_SAVED = "saved"


def load(
    path: str | os.PathLike,
    storage_options: dict | None = None,
    *,
    root: str | os.PathLike | None = None,
    max_inflate: int | None = None,
    mesh=None,
    specs=_SAVED,
    timeout: float | None = None,
    progress: ProgressCallback | None = None,
) -> Any:
    """Returns the pytree stored at `path`, whatever its format, with lazy array leaves.

    The format is told by content (see `sniff`), not by suffix. Leaves are `LazyArray`s:
    shape, dtype and nbytes are known at once; data is read when a leaf is used
    (`np.asarray(leaf)`), and only for the leaves used.

    `path` may be a URL (`https://`, `s3://`, `gs://`, `hf://`, anything fsspec knows; needs
    `pip install 'pytree-inspector[remote]'`): structure then costs a few small range
    requests (a safetensors header, an npz's directory, orbax's metadata), and each leaf
    fetches its own bytes when read.

    Args:
        path: a checkpoint file, or an orbax checkpoint folder; a local path or a URL.
        root: a folder every file the checkpoint refers to (the shards of a safetensors
            index, the files of an orbax folder) must resolve inside, links followed; the
            served app passes its root. By default only names that climb out of the
            checkpoint's folder (`..`, absolute) are refused.
        max_inflate: bytes the load may decompress (or fill) in total, checked against the
            sizes the file declares before anything is inflated; by default
            `limits.INFLATE_RATIO` times the file's size, at least `limits.INFLATE_FLOOR`.
        storage_options: for a URL, options of its fsspec filesystem, e.g.
            `{"endpoint_url": ..., "key": ..., "secret": ...}` for an S3-compatible store
            (the provider's usual environment variables work too).
        timeout: seconds a URL may take to answer before `LoadError` (default 30).
        progress: called with a `ReadProgress` (bytes done / total, rate) as remote leaves
            are read.
        mesh: a `jax.sharding.Mesh` (see `inspector.mesh`) to restore the arrays straight
            into, leaf by leaf, instead of returning lazy leaves.
        specs: with `mesh`, the layout as `inspector.shard` takes it (a prefix tree of
            `PartitionSpec`s, spec text or None). `"saved"` (the default): each array takes the
            spec it was saved with (orbax records it) when the mesh has those axes, else it
            is replicated.

    Returns:
        The tree: nested dicts (and lists, for formats that record them) of `LazyArray`
        leaves, plus the plain Python values some formats store (numbers, strings).

    Raises:
        LoadError: the file is at fault: the path does not exist, is not a format the
            inspector reads, is damaged, refers to files outside its folder (or `root`), or
            would inflate more than `max_inflate`; a URL cannot be reached (not found,
            refused, no answer in time, access denied, truncated answer). The message names
            the file (a URL without credentials) and the problem.
        MissingDependencyError: the format (or the URL's filesystem) needs an optional
            library that is not installed; the message names it and the pip command.
        ReaderBugError: the reader failed in a way no file should make it fail (a bug in the
            inspector, to report); the original exception is its `__cause__`.
        ShardingError: with `mesh`, leaves that do not fit their specs (every one listed).

    >>> import tempfile, numpy as np
    >>> path = save({"w": np.eye(2, dtype=np.float32)}, f"{tempfile.mkdtemp()}/m.safetensors")
    >>> tree = load(path)
    >>> tree["w"].shape, tree["w"].dtype, np.asarray(tree["w"]).tolist()
    ((2, 2), dtype('float32'), [[1.0, 0.0], [0.0, 1.0]])
    """
    tree = _read(locate(path, storage_options, timeout, progress), root, max_inflate)
    if mesh is None:
        return tree
    from inspector.core.sharding import shard

    if specs is _SAVED:
        specs = _saved_specs(tree, mesh)
    return shard(tree, mesh, specs)


def _saved_specs(tree, mesh):
    """Each lazy leaf's saved spec where `mesh` has its axes; None (replicated) elsewhere."""
    import jax

    from inspector.core.lazy import LazyArray

    def spec(leaf):
        saved = getattr(leaf, "sharding", None) if isinstance(leaf, LazyArray) else None
        if saved is None or not set(saved.axes) <= set(mesh.axis_names):
            return None
        return saved.spec

    return jax.tree_util.tree_map(spec, tree)


def _read(path, root, max_inflate):
    fmt = sniff(path)
    bounds = limits.LoadLimits(None if root is None else Path(root), max_inflate)
    try:
        with limits.applied(bounds):
            return LOADERS[fmt](path)
    except InspectorError:
        raise  # the file's fault (LoadError), a missing library, a limit: said by the reader
    except ImportError as exc:  # a library the reader imports that is not installed
        package = _PACKAGES.get((exc.name or "").split(".")[0], exc.name or str(exc))
        raise missing_library(path, package, f"reading {fmt} files") from exc
    except Exception as exc:  # anything else is the reader's bug, never "a damaged file"
        raise reader_bug(path, fmt, exc) from exc


def save(tree: Any, path: str | os.PathLike, format: str | None = None, pieces=None) -> Path:
    """Writes a tree of arrays as safetensors or npz; returns the path written.

    Nested dict keys and list/tuple positions are joined with "." into flat names
    (`{"layers": [{"w": x}]}` -> `"layers.0.w"`); `load` splits them again, so
    `load(save(tree, p))` has the same values, dtypes (bfloat16 included) and dict nesting,
    with lists and tuples as dicts keyed "0", "1", ... None and empty containers are skipped.

    Args:
        tree: nested dicts, lists and tuples whose leaves are NumPy arrays, JAX arrays,
            `LazyArray`s or Python / NumPy scalars; or a packed tree (`inspector.pack`).
        path: the file to write (replaced if it exists, only once writing succeeded).
        format: "safetensors" or "npz"; by default taken from the suffix of `path`.
        pieces: safetensors only (ignored for npz): the data section in chunks spanning
            leaves, as `safetensors_format.save` takes it (streamed ops).

    Returns:
        `path`, as a `pathlib.Path`.

    Raises:
        InspectorError: the format is unknown, a leaf is not an array or a key contains "." or
            "/" (every offending key path is named), or a dtype cannot be stored.
    """
    path = Path(path)
    fmt = format or _SUFFIXES.get(path.suffix)
    if fmt not in SAVERS:
        raise InspectorError(
            f"Cannot save {path}: "
            + (f"unknown format {format!r}" if format else f"no format for suffix {path.suffix!r}")
            + ".\nUse a .safetensors or .npz suffix, or pass format='safetensors' / 'npz'."
        )
    from inspector.core.packed import unpacked  # here: `import inspector.io` stays jax-free

    tree = unpacked(tree)
    if pieces is not None and fmt == "safetensors":
        safetensors_format.save(nesting.flatten(tree), path, pieces=pieces)
    else:
        SAVERS[fmt](nesting.flatten(tree), path)
    return path
