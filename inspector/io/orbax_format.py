"""orbax checkpoint folders (`StandardCheckpointer` / `PyTreeCheckpointer`): read lazily.

Structure comes from orbax's own metadata files, nothing is restored:

- the tree (keys, container kinds, leaf kinds) from the `_METADATA` JSON file orbax writes;
- each array's shape and dtype from its zarr metadata (`NAME/.zarray`, or `NAME/zarr.json` for
  zarr3), all read concurrently through tensorstore, inside OCDBT (`manifest.ocdbt`) or from
  per-array folders.

These are the files `StandardCheckpointer().metadata(path)` reads too, but that call opens
every array as a tensorstore (about 0.3 ms per leaf: 90 ms for 300 leaves); reading only the
small metadata records takes about a tenth. The tests check both agree. A leaf's data is read
on first use by opening that one array with tensorstore, the array orbax's restore reads.
Python scalars saved by orbax come back as 0-d arrays; strings (`_strings.json`) as str.

Tensorstore opens whatever the folder holds, links included, so before anything is read every
link in the folder is resolved and checked against the load's `root` (`limits`), array names
may not climb out of the folder, and the arrays' total size is charged to the inflate budget
(zarr chunks are compressed) against the bytes the folder stores.
Arrays saved sharded carry the sharding orbax recorded in its `_sharding` file (spec and mesh
axes, shown per leaf by `describe`), read from that small JSON file alone.
"""

from __future__ import annotations

import base64
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from inspector.core.errors import bullet_list
from inspector.core.lazy import LazyArray
from inspector.io.dtypes import dtype_from_name
from inspector.io.file_error import file_error, missing_library
from inspector.io.limits import InflateBudget, confined, current
from inspector.io.locate import locate
from inspector.io.location import LocalFile, Location

MAX_FILES = 1_000_000
"""A checkpoint folder with more entries than this is refused before it is walked further."""

ARRAY_KINDS = ("jax.Array", "np.ndarray", "scalar")
"""orbax leaf kinds (`value_type` in `_METADATA`) stored as zarr arrays."""

EMPTY_KINDS = {
    "None": lambda: None,
    "Dict": dict,
    "List": list,
    "Tuple": tuple,
    "NamedTuple": dict,  # orbax cannot rebuild the class either; its fields were none
    "Unknown": lambda: None,
    "placeholder": lambda: None,  # a leaf deliberately not saved
}
"""orbax leaf kinds that hold no data, and what they are shown as."""

_NO_SHARDING = (
    "Save the checkpoint again; or delete its _sharding file to read the arrays without "
    "their saved layouts (they then show, and restore into a mesh, as replicated)."
)

_SEQUENCE = 1  # orbax's KeyType for list/tuple positions (2 is dict keys and attributes)


def load(path: str | os.PathLike | Location) -> Any:
    """Returns the tree of an orbax checkpoint folder with `LazyArray` leaves.

    Args:
        path: the checkpoint folder (the one holding `_METADATA`, e.g. `ckpt/100/default` for
            a `CheckpointManager` step).

    Returns:
        Nested dicts and lists as orbax recorded them (tuples come back as lists and named
        tuples as dicts, as orbax stores them); arrays are read on first use. Leaves of a
        custom orbax type that stored a zarr array are shown as that array.

    Raises:
        LoadError: `_METADATA` is missing or damaged, an array's metadata is missing or
            damaged, or a leaf is of a custom kind with no array (every such key is named).
    """
    path = locate(path)
    folder = None
    if path.local_path is not None:
        folder = path.local_path.absolute()
        path = LocalFile(folder)
    # a URL's folder is not listed (http has no listing): no links to check, size unknown
    stored = _check_folder(folder) if folder is not None else None
    metadata_file = path.child("_METADATA")
    if not metadata_file.exists():
        raise file_error(
            path,
            "it has no _METADATA file: the checkpoint is unfinished, or was written by an "
            "orbax older than 0.5",
            "Restore it with the orbax that wrote it and save it again.",
        )
    raw = metadata_file.read_all()  # outside the try: a LoadError is a ValueError too
    try:
        metadata = json.loads(raw.decode())
        entries = list(metadata["tree_metadata"].values())
        places = [
            tuple((str(k["key"]), int(k["key_type"])) for k in entry["key_metadata"])
            for entry in entries
        ]
        kinds = [str(entry["value_metadata"]["value_type"]) for entry in entries]
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise file_error(
            path,
            f"its _METADATA file is not orbax tree metadata ({type(exc).__name__}: {exc})",
            "The checkpoint is damaged or unfinished; save it again.",
        ) from exc
    names = [".".join(key for key, _ in place) for place in places]
    for place, name in zip(places, names, strict=True):
        what = f"the array at {_keystr(place)} (folder {name!r})"
        if folder is not None:
            confined(name or ".", folder, path, what)
        elif name.startswith("/") or ".." in name.split("/"):
            raise file_error(path, f"{what} is outside the checkpoint's folder",
                             "Fix the reference.")
    store = _Store(path)
    arrays = [n for n, k in zip(names, kinds, strict=True) if k in ARRAY_KINDS]
    # custom kinds are tried as arrays too: custom orbax type handlers usually write zarr
    custom = [
        n for n, k in zip(names, kinds, strict=True)
        if k not in ARRAY_KINDS and k not in EMPTY_KINDS and k != "string"
    ]  # fmt: skip
    specs = store.specs(arrays, optional=custom)
    total = sum(math.prod(shape) * dtype.itemsize for shape, dtype, _ in specs.values())
    if stored is not None and total > stored:
        InflateBudget(path, stored).charge(total - stored, f"{len(specs)} zarr array(s)")
    strings = _strings(path) if "string" in kinds else {}
    saved = _shardings(path)
    root, unsupported = _Node(), []
    for place, name, kind in zip(places, names, kinds, strict=True):
        if name in specs:
            value = store.leaf(name, *specs[name])
            value.sharding = saved.get(name)
        elif kind == "string":
            value = strings.get(name)
        elif kind in EMPTY_KINDS:
            value = EMPTY_KINDS[kind]()
        else:
            value = None
            unsupported.append(f"{_keystr(place)}: {kind}")
        root.insert(place, value, path)
    if unsupported:
        raise file_error(
            path,
            f"{len(unsupported)} leaf/leaves were saved by a custom orbax type handler and "
            f"hold no array the inspector can read",
            "Save arrays, scalars and strings, or restore with orbax and save the arrays.",
            details=bullet_list(unsupported),
        )
    return root.build(path)


def _check_folder(path: Path) -> int:
    """Returns the bytes the folder stores, after checking every link in it stays in the root."""
    root = current().root
    root = None if root is None else Path(root).resolve()
    stored, count = 0, 0
    for folder, dirs, files in os.walk(path, followlinks=False):
        for name in [*dirs, *files]:
            count += 1
            if count > MAX_FILES:
                raise file_error(path, f"it holds more than {MAX_FILES} files and folders")
            entry = Path(folder, name)
            if entry.is_symlink():
                relative = entry.relative_to(path)
                if root is not None and not entry.resolve().is_relative_to(root):
                    raise file_error(
                        path,
                        f"{relative} is a link to a file outside the folder this app may open",
                        "Copy the files themselves into the checkpoint folder.",
                    )
        for name in files:
            try:
                stored += Path(folder, name).stat().st_size
            except OSError:
                pass  # a dangling link: tensorstore reports it if an array needs it
    return stored


def _keystr(place: tuple[tuple[str, int], ...]) -> str:
    return "".join(f"[{key}]" if kind == _SEQUENCE else f"[{key!r}]" for key, kind in place)


class _Node:
    """A container being rebuilt from key paths: a dict, or a list (sequence keys)."""

    def __init__(self):
        self.kind: int | None = None
        self.children: dict[str, Any] = {}

    def insert(self, place: tuple[tuple[str, int], ...], value: Any, path) -> None:
        node = self
        for depth, (key, kind) in enumerate(place):
            if node.kind not in (None, kind):
                raise file_error(path, f"_METADATA mixes list and dict keys under {place[:depth]}")
            node.kind = kind
            if depth == len(place) - 1:
                node.children[key] = value
            else:
                node = node.children.setdefault(key, _Node())

    def build(self, path) -> Any:
        built = {k: v.build(path) if isinstance(v, _Node) else v for k, v in self.children.items()}
        if self.kind != _SEQUENCE:
            return built
        try:
            return [built[str(i)] for i in range(len(built))]
        except KeyError as exc:
            raise file_error(path, f"_METADATA lists a sequence with keys {list(built)}") from exc


class _Store:
    """The tensorstore key-value store holding the arrays: OCDBT, or plain per-array folders.

    For a URL, tensorstore reads from the same place through its own http / s3 / gcs driver
    (see `remote.tensorstore_spec`); each wait is bounded by the location's timeout.
    """

    def __init__(self, path: Location):
        try:
            import tensorstore as ts
        except ImportError as exc:
            raise missing_library(path, "tensorstore", "reading orbax checkpoints",
                                  "pip install 'pytree-inspector[orbax]'") from exc
        self.ts, self.path = ts, path
        self.timeout = getattr(path, "timeout", None)
        self.ocdbt = path.child("manifest.ocdbt").exists()
        self.base = path.tensorstore_kvstore()
        if self.ocdbt:
            self.kvstore = {"driver": "ocdbt", "base": self.base}
        else:
            self.kvstore = self.base
        self.context = ts.Context()

    def specs(
        self, names: list[str], optional: list[str] = ()
    ) -> dict[str, tuple[tuple[int, ...], np.dtype, str]]:
        """Returns `name -> (shape, dtype, zarr driver)`, reading every array's metadata at once.

        Names in `optional` that have no zarr metadata are left out instead of refused.
        """
        names = [*names, *optional]
        try:
            timeout = self.timeout
            store = self.ts.KvStore.open(self.kvstore, context=self.context).result(timeout)
            pending = {
                name: (store.read(f"{name}/.zarray"), store.read(f"{name}/zarr.json"))
                for name in names
            }
            results = {
                name: (v2.result(timeout), v3.result(timeout)) for name, (v2, v3) in pending.items()
            }
        except Exception as exc:  # tensorstore raises ValueError / OSError variants
            raise file_error(
                self.path,
                f"tensorstore cannot open its arrays ({exc})",
                "The checkpoint is damaged or unfinished; save it again.",
            ) from exc
        specs, problems = {}, []
        for name, (v2, v3) in results.items():
            try:
                if v2.state == "value":
                    specs[name] = (*_zarr2_spec(json.loads(v2.value)), "zarr")
                elif v3.state == "value":
                    specs[name] = (*_zarr3_spec(json.loads(v3.value)), "zarr3")
                elif name not in optional:
                    problems.append(f"{name}: no .zarray or zarr.json")
            except (ValueError, KeyError, TypeError) as exc:
                problems.append(f"{name}: damaged zarr metadata ({exc})")
        if problems:
            raise file_error(
                self.path,
                f"{len(problems)} array(s) listed in _METADATA have no readable metadata",
                "The checkpoint is damaged or unfinished; save it again.",
                details=bullet_list(problems),
            )
        return specs

    def leaf(self, name: str, shape: tuple[int, ...], dtype: np.dtype, driver: str):
        # inside OCDBT an array is a key prefix; on plain files, a folder of the checkpoint
        if self.ocdbt:
            kvstore = {**self.kvstore, "path": f"{name}/"}
        else:
            kvstore = {**self.base, "path": f"{self.base['path']}{name}/"}
        spec = {"driver": driver, "kvstore": kvstore}
        ts, context, path, timeout = self.ts, self.context, self.path, self.timeout

        def read() -> np.ndarray:
            try:
                array = ts.open(spec, open=True, read=True, context=context).result(timeout)
                return np.asarray(array.read().result(None if timeout is None else timeout * 4))
            except Exception as exc:  # tensorstore's errors: data missing, damaged, unreadable
                raise file_error(
                    path,
                    f"the array {name} cannot be read ({exc})",
                    "The checkpoint is damaged; save it again.",
                ) from exc

        return LazyArray(shape, dtype, read, source=f"{path}:{name}")


def _zarr2_spec(meta: dict) -> tuple[tuple[int, ...], np.dtype]:
    dtype = dtype_from_name(meta["dtype"])
    return _shape(meta["shape"]), dtype.newbyteorder("=")


def _zarr3_spec(meta: dict) -> tuple[tuple[int, ...], np.dtype]:
    return _shape(meta["shape"]), dtype_from_name(meta["data_type"])


def _shape(value) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value
    ):
        raise ValueError(f"shape {value!r:.80} is not a list of non-negative integers")
    return tuple(value)


def _shardings(path: Location) -> dict:
    """`name -> SavedSharding` for arrays saved as a `NamedSharding`, from `_sharding`.

    orbax keys the file by the URL-safe base64 of each array's name and stores each sharding
    as JSON text. Entries of another kind (one device) are left out. A `_sharding` file that
    is there but damaged is refused: read past, its arrays would show (and restore into a
    mesh) as replicated, which is not how they were saved.

    Raises:
        LoadError: the file is not a JSON object, or some entries are damaged (each named).
    """
    from jax.sharding import PartitionSpec

    from inspector.core.sharding import SavedSharding

    sharding = path.child("_sharding")
    if not sharding.exists():
        return {}
    try:
        entries = json.loads(sharding.read_all())
    except OSError as exc:
        raise file_error(path, f"its _sharding file cannot be read ({exc})", _NO_SHARDING) from exc
    except UnicodeDecodeError as exc:
        raise file_error(path, f"its _sharding file is not text ({exc})", _NO_SHARDING) from exc
    except json.JSONDecodeError as exc:
        raise file_error(path, f"its _sharding file is not JSON ({exc})", _NO_SHARDING) from exc
    if not isinstance(entries, dict):
        raise file_error(path, "its _sharding file is not a JSON object", _NO_SHARDING)
    out, damaged = {}, []
    for key, text in entries.items():
        try:
            name = base64.urlsafe_b64decode(key.encode()).decode()
            meta = json.loads(text)
            if not isinstance(meta, dict):
                raise TypeError("the entry is not a JSON object")
            if meta.get("sharding_type") != "NamedSharding":
                continue
            spec = PartitionSpec(*(tuple(e) if isinstance(e, list) else e
                                   for e in meta["partition_spec"]))
            axes = dict(zip(meta["axis_names"], map(int, meta["shape"]), strict=True))
            out[name] = SavedSharding(spec, axes)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            damaged.append(f"entry {key!r:.60}: {type(exc).__name__}: {exc}")
    if damaged:
        raise file_error(path, f"its _sharding file has {len(damaged)} damaged entries",
                         _NO_SHARDING, bullet_list(damaged))
    return out


def _strings(path: Location) -> dict[str, str]:
    try:
        raw = path.child("_strings.json").read_all()
    except OSError as exc:
        raise file_error(path, f"its _strings.json cannot be read ({exc})") from exc
    try:
        return json.loads(raw.decode())
    except (OSError, ValueError) as exc:
        raise file_error(path, f"its _strings.json cannot be read ({exc})") from exc
