"""HDF5 files (Keras `.h5` weights included): groups become dicts, datasets lazy leaves.

Structure comes from HDF5's own metadata through h5py's low-level API: one `H5Ovisit` pass
lists every group and dataset, then each dataset is opened for its shape and dtype only. (The
high-level `File[...]` objects cost about 0.3 ms each: 120 ms for a 400-leaf model, against
about 15 ms here.) A dataset's data is read when its leaf is used, by opening the file again.

Only a dataset's own bytes in this file are read. A dataset with external raw storage (its
bytes in other files) or a virtual layout (mapping other datasets, in any file) is refused:
an uploaded file could otherwise read the server's disk. Contiguous data must lie inside the
file; whatever a dataset would inflate beyond its stored bytes (compressed or unallocated
chunks) is charged to the load's inflate budget (`limits`).

A dataset with the attribute `dtype="bfloat16"` (Keras' convention: h5py stores bfloat16 as
2-byte opaque data) comes back as bfloat16, and likewise for the other ml_dtypes names.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from inspector.core.errors import InspectorError
from inspector.core.lazy import LazyArray
from inspector.io.dtypes import ML_DTYPE_NAMES, dtype_from_name
from inspector.io.file_error import file_error
from inspector.io.limits import InflateBudget
from inspector.io.locate import locate
from inspector.io.location import Location


def load(path: str | os.PathLike | Location) -> dict:
    """Returns the groups of an HDF5 file as nested dicts, each dataset a `LazyArray`.

    Args:
        path: an HDF5 file (`.h5`, `.hdf5`, Keras `.weights.h5`).

    Returns:
        Nested dicts keyed by group and dataset names. String datasets (names, config) are
        read at once, as str or a NumPy array of str. Datasets that hold no array (object
        references, variable-length sequences, empty dataspaces) are left out; soft and
        external links are not followed; an object reachable by two names shows under the
        first.

    Raises:
        LoadError: h5py cannot open the file; a dataset has external or virtual storage, or
            data outside the file; the datasets would inflate past the load's budget.
    """
    import h5py

    location = path = locate(path)
    remote_file = None
    try:
        if location.local_path is not None:
            fid = h5py.h5f.open(os.fsencode(location.local_path), h5py.h5f.ACC_RDONLY)
        else:  # h5py reads through the file object: its metadata blocks, not the data
            remote_file = h5py.File(location.open(), "r")
            fid = remote_file.id
    except OSError as exc:
        raise file_error(
            path,
            f"h5py cannot read it ({exc})",
            "The file is truncated or damaged; save it again.",
        ) from exc
    try:
        found: list[tuple[bytes, int]] = []
        # list first, open afterwards: opening datasets inside the visit callback is 3x slower
        try:
            h5py.h5o.visit(fid, lambda name, info: found.append((name, info.type)), info=True)
        except (OSError, RuntimeError) as exc:  # HDF5's errors on damaged object headers
            raise file_error(
                path,
                f"its groups cannot be listed ({type(exc).__name__}: {exc})",
                "The file is truncated or damaged; save it again.",
            ) from exc
        root: dict[str, Any] = {}
        size = location.size()
        budget = InflateBudget(location, size)
        for raw_name, kind in found:
            if raw_name == b".":
                continue
            parts = raw_name.decode("utf-8", "replace").split("/")
            *parents, last = parts
            node = root
            for part in parents:
                node = node.setdefault(part, {})
            if kind == h5py.h5o.TYPE_GROUP:
                node.setdefault(last, {})
            elif kind == h5py.h5o.TYPE_DATASET:
                leaf = _opened(h5py, fid, raw_name, location, parts, size, budget)
                if leaf is not None:
                    node[last] = leaf
        return root
    finally:
        (remote_file or fid).close()


def _opened(h5py, fid, raw_name: bytes, location, parts, size: int, budget) -> Any:
    """The dataset's leaf, its storage checked; HDF5's errors on its damaged headers said."""
    try:
        did = h5py.h5d.open(fid, raw_name)
        _check_storage(h5py, did, location, parts, size, budget)
        return _dataset(h5py, did, location, "/" + "/".join(parts))
    except InspectorError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError) as exc:  # how h5py reports HDF5's
        raise file_error(
            location,
            f"the dataset /{'/'.join(parts)} cannot be opened ({type(exc).__name__}: {exc})",
            "The file is truncated or damaged; save it again.",
        ) from exc


def _check_storage(h5py, did, path, parts: list[str], size: int, budget: InflateBudget) -> None:
    where = "".join(f"[{part!r}]" for part in parts)
    plist = did.get_create_plist()
    layout = plist.get_layout()
    if layout == h5py.h5d.VIRTUAL:
        raise file_error(
            path,
            f"the dataset {where} is a virtual dataset (it maps data from other datasets or "
            f"files), which is never followed",
            "Save the data itself in the file (h5py: write the array, not a VirtualLayout).",
        )
    if plist.get_external_count() > 0:
        raise file_error(
            path,
            f"the dataset {where} keeps its data in external files, which are never read",
            "Save the data itself in the file (h5py: create_dataset without external=).",
        )
    stored = did.get_storage_size()
    offset = did.get_offset() if layout == h5py.h5d.CONTIGUOUS else None
    nbytes = did.get_space().get_select_npoints() * did.get_type().get_size()
    if stored > size or (offset is not None and offset + stored > size):
        raise file_error(
            path,
            f"the dataset {where} stores {stored} bytes"
            + (f" at byte {offset}" if offset is not None else "")
            + f", beyond the file's {size} bytes",
            "The file is truncated or damaged; save it again.",
        )
    if nbytes > stored:
        budget.charge(nbytes - stored, f"the dataset {where}")


def _dataset(h5py, did, location: Location, name: str) -> Any:
    space = did.get_space()
    if space.get_simple_extent_type() == h5py.h5s.NULL:
        return None
    dtype = stored = did.dtype
    if stored.kind in "OSU" and h5py.check_string_dtype(stored) is not None:
        return _strings(h5py.Dataset(did))
    if stored.hasobject:
        return None
    if h5py.h5a.exists(did, b"dtype"):
        marker = h5py.Dataset(did).attrs["dtype"]
        if isinstance(marker, bytes):
            marker = marker.decode("ascii", "replace")
        if isinstance(marker, str) and marker in ML_DTYPE_NAMES:
            wanted = dtype_from_name(marker)
            if wanted.itemsize == stored.itemsize:
                dtype = wanted
    if dtype.byteorder == (">" if np.little_endian else "<"):
        # big-endian datasets (written on s390x, or by choice) read in this machine's order:
        # the values, not the bytes, are what every op and view computes on
        dtype = dtype.newbyteorder("=")

    offset = did.get_offset()
    if location.local_path is None and offset is not None and stored.kind in "biufcV":
        # contiguous and unfiltered: read its exact byte range, not h5py's small blocks
        stored_reader = location.array_reader(offset, stored, space.shape)

        def read() -> np.ndarray:
            data = stored_reader()  # already in native order (`mapped_reader` swaps)
            return data if dtype == data.dtype else data.view(dtype)
    else:

        def read() -> np.ndarray:
            try:
                with h5py.File(location.local_path or location.open(), "r") as f:
                    data = np.asarray(f[name][()])
            except InspectorError:
                raise  # a URL that failed: its own message
            except (OSError, ValueError, KeyError, RuntimeError, TypeError) as exc:
                raise file_error(
                    location,
                    f"the dataset {name} cannot be read ({type(exc).__name__}: {exc})",
                    "The file is damaged or changed after it was opened; save it again.",
                ) from exc
            if data.dtype.byteorder not in "=|" and data.dtype.newbyteorder("=") == dtype:
                return data.astype(dtype)  # swapped to native order
            return data if dtype == data.dtype else data.view(dtype)

    return LazyArray(space.shape, dtype, read, source=f"{location}:{name}")


def _strings(dataset) -> str | np.ndarray:
    # Names and config stored as strings are small metadata with no array dtype: read them now.
    data = dataset.asstr(errors="replace")[()]
    return data if isinstance(data, str) else np.asarray(data, dtype=str)
