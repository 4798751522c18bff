"""PyTorch checkpoints (`torch.save`: `.pt`, `.pth`, `.bin`) read without torch or pickle code.

Two layouts exist:

- zip (torch >= 1.6): `ARCHIVE/data.pkl` describes the object; each storage's raw bytes are the
  uncompressed member `ARCHIVE/data/KEY`, memory-mapped in place; `ARCHIVE/byteorder` says
  little or big endian.
- legacy (`_use_new_zipfile_serialization=False`): five pickles in a row (magic number,
  protocol version, system info, the object, the list of storage keys), then each storage as
  an 8-byte little-endian element count followed by its bytes, in that list's order.

The pickles are read by `torch_unpickler` (an allow-list, no code run). Each tensor becomes a
`LazyArray` that maps its storage and takes its strided view; tensors sharing a storage share
the file bytes. String keys nest on "." (`nesting`), at every dict level. Objects of other
classes (omegaconf, argparse, ...) become `inspector.Opaque` leaves (`pickle_objects`).
"""

from __future__ import annotations

import io
import math
import os
import struct
import zipfile
from typing import Any

import numpy as np

from inspector.core.lazy import LazyArray
from inspector.io import nesting
from inspector.io.file_error import file_error
from inspector.io.limits import InflateBudget
from inspector.io.locate import locate
from inspector.io.location import Location
from inspector.io.pickle_objects import Foreign, key_text, to_opaque
from inspector.io.pickle_scan import scan
from inspector.io.torch_unpickler import StorageRef, TensorRef, TorchDtype, unpickle
from inspector.io.zip_members import ZIP_ERRORS, data_offset, open_archive, read_member

LEGACY_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL_VERSION = 1001
MAX_PICKLE_BYTES = 1 << 30  # data.pkl describes tensors, it does not hold them
MAX_DEPTH = 256  # deeper nesting is damage (or an attack), not a state dict
_RESAVE = "The file is damaged or truncated; save it again (torch.save(model.state_dict(), path))."


class _Region:
    """Where a storage's bytes are: in the file at `offset`, or in a compressed zip member.

    `order` is the byte order the file was written in, "<" or ">".
    """

    def __init__(self, order: str, offset: int | None, member: str | None = None):
        self.order, self.offset, self.member = order, offset, member


def load_zip(path: str | os.PathLike | Location) -> Any:
    """Returns the object of a zip-format `torch.save` file, tensors as `LazyArray`.

    Args:
        path: the checkpoint.

    Returns:
        The saved object with dicts as dicts (string keys nested on "."), lists, tuples,
        numbers and strings as they were, every tensor a memory-mapped leaf, and every other
        object an `Opaque` leaf (built from the pickle's data; nothing imported or called).

    Raises:
        LoadError: the pickle names a global that runs code (nothing is run), it is a
            TorchScript archive, a storage is missing or the wrong size, or a tensor's view
            runs past its storage.
    """
    path = locate(path)
    archive, f = open_archive(path, _RESAVE)
    with archive, f:
        names = set(archive.namelist())
        pkl = next((n for n in names if n.count("/") == 1 and n.endswith("/data.pkl")), None)
        if pkl is None:
            raise file_error(path, "the zip has no ARCHIVE/data.pkl", _RESAVE)
        prefix = pkl[: -len("data.pkl")]
        if any(n.startswith(f"{prefix}code/") for n in names):
            raise file_error(
                path,
                "it is a TorchScript archive (torch.jit.save): it holds code "
                f"({prefix}code/); refused, nothing from the file was run",
                "Save its state_dict() (torch.save(model.state_dict(), path)) and load that.",
            )
        info = archive.getinfo(pkl)
        if info.file_size > MAX_PICKLE_BYTES:
            raise file_error(path, f"{pkl} declares {info.file_size} bytes", _RESAVE)
        budget = InflateBudget(path, path.size())
        if info.compress_type != zipfile.ZIP_STORED:
            budget.charge(info.file_size, pkl)
        data = read_member(archive, pkl, path, _RESAVE)
        scan(io.BytesIO(data), path, len(data))
        byteorder = b"little"
        if f"{prefix}byteorder" in names:
            byteorder = read_member(archive, f"{prefix}byteorder", path, _RESAVE).strip()
        if byteorder not in (b"little", b"big"):
            raise file_error(path, f"its byteorder record says {byteorder!r:.40}", _RESAVE)
        storages: dict[str, StorageRef] = {}
        obj = unpickle(data, path, storages)
        regions = {}
        path.prefetch(f, [_local_header_span(archive, f"{prefix}data/{key}") for key in storages])
        for key, storage in storages.items():
            member = f"{prefix}data/{key}"
            if member not in names:
                raise file_error(path, f"storage {key} has no member {member}", _RESAVE)
            member_info = archive.getinfo(member)
            needed = storage.numel * storage.dtype.itemsize
            if member_info.file_size != needed:
                raise file_error(
                    path,
                    f"storage {key} holds {member_info.file_size} bytes but the pickle "
                    f"declares {storage.numel} x {storage.dtype} = {needed}",
                    _RESAVE,
                )
            try:
                offset = data_offset(f, member_info)
            except ValueError as exc:
                raise file_error(path, str(exc), _RESAVE) from exc
            if offset is None:  # compressed: inflated whole whenever one of its tensors is read
                budget.charge(member_info.file_size, member)
            regions[key] = _Region("<" if byteorder == b"little" else ">", offset, member)
    _check_expansion(obj, path, len(data))
    return _convert(obj, path, regions, ())


def _local_header_span(archive: zipfile.ZipFile, member: str) -> tuple[int, int]:
    try:
        info = archive.getinfo(member)
    except KeyError:
        return (0, 0)
    start = info.header_offset
    return start, start + 30 + len(info.orig_filename.encode()) + len(info.extra) + 64


def load_legacy(path: str | os.PathLike | Location) -> Any:
    """Returns the object of a legacy-format `torch.save` file, tensors as `LazyArray`.

    Args:
        path: the checkpoint (written with `_use_new_zipfile_serialization=False`).

    Returns:
        As `load_zip`.

    Raises:
        LoadError: as `load_zip`, or the header pickles are not torch's, or a storage's
            recorded element count disagrees with the pickle or runs past the end of the file.
    """
    path = locate(path)
    size = path.size()
    storages: dict[str, StorageRef] = {}
    with path.open() as f:
        header = [unpickle(scan(f, path, size - f.tell()), path, {}) for _ in range(3)]
        magic, protocol, sys_info = header
        if magic != LEGACY_MAGIC_NUMBER or protocol != LEGACY_PROTOCOL_VERSION:
            raise file_error(path, "its header is not torch.save's legacy header", _RESAVE)
        little = not isinstance(sys_info, dict) or sys_info.get("little_endian", True)
        data = scan(f, path, size - f.tell())
        obj = unpickle(data, path, storages)
        keys = unpickle(scan(f, path, size - f.tell()), path, {})
        if (
            not isinstance(keys, list)
            or not all(isinstance(k, str | int) for k in keys)
            or set(map(str, keys)) != set(storages)
        ):
            raise file_error(path, "its list of storage keys does not match the pickle", _RESAVE)
        regions, position = {}, f.tell()
        for key in map(str, keys):
            storage = storages[key]
            f.seek(position)
            raw = f.read(8)
            if len(raw) < 8:
                raise file_error(path, f"it ends before storage {key}", _RESAVE)
            (count,) = struct.unpack("<q", raw)
            end = position + 8 + count * storage.dtype.itemsize
            if count != storage.numel or end > size:
                raise file_error(
                    path,
                    f"storage {key} records {count} elements at byte {position}, the pickle "
                    f"declares {storage.numel}, and the file has {size} bytes",
                    _RESAVE,
                )
            regions[key] = _Region("<" if little else ">", position + 8)
            position = end
    _check_expansion(obj, path, len(data))
    return _convert(obj, path, regions, ())


def _check_expansion(obj: Any, path, pickle_bytes: int) -> None:
    """Refuses an object whose tree is far larger than its pickle, cyclic, or too deep.

    A pickle can refer to one container many times (BINGET): 40 levels of a list holding the
    previous one twice is 135 bytes and 2**40 nodes once expanded. Legitimate state dicts
    spend at least one pickle byte per node they expand to, so the expanded tree is bounded
    by the pickle's size; this counts it with each distinct container measured once (memoized
    by identity), so the count itself costs only the pickle's size.
    """
    limit = 4 * pickle_bytes + 1_000
    sizes: dict[int, int] = {}
    active: set[int] = set()
    records: dict[int, _Recorded] = {}

    def size(node: Any, keys: tuple) -> int:
        if isinstance(node, Foreign):
            node = records.get(id(node)) or records.setdefault(id(node), _recorded(node))
        elif not isinstance(node, (dict, list, tuple)):
            return 1
        ident = id(node)
        if ident in sizes:
            return sizes[ident]
        where = "".join(f"[{k!r:.40}]" for k in keys) or "the root"
        if ident in active and type(node) is _Recorded:
            return 1  # an object refers back to one enclosing it (omegaconf's `_parent`)
        if ident in active:
            raise file_error(
                path, f"its pickle builds a cycle: the container at {where} contains itself",
                _RESAVE,
            )
        if len(keys) >= MAX_DEPTH:
            raise file_error(path, f"its pickle nests deeper than {MAX_DEPTH} levels at "
                             f"{where}", _RESAVE)
        active.add(ident)
        items = node.items() if isinstance(node, dict) else enumerate(node)
        total = 1
        for key, child in items:
            total += size(child, (*keys, key))
            if isinstance(node, dict):
                total += size(key, (*keys, key))
            if total > limit:
                raise file_error(
                    path,
                    f"its {pickle_bytes}-byte pickle expands to more than {limit} objects "
                    f"(at {where}): it refers to the same containers over and over",
                    _RESAVE,
                )
        active.discard(ident)
        sizes[ident] = total
        return total

    size(obj, ())


class _Recorded(list):
    """What a `Foreign` record holds, as one list the expansion check walks (cached by id)."""


def _recorded(obj: Foreign) -> _Recorded:
    return _Recorded([*obj.args, *obj.kwargs.values(), obj.state, *obj.items,
                      *(x for pair in obj.mapping for x in pair)])


def _convert(obj: Any, path, regions: dict[str, _Region], keys: tuple, memo=None) -> Any:
    memo = ({}, set()) if memo is None else memo  # Opaques made, by id; records being made
    if isinstance(obj, Foreign) or (isinstance(obj, type) and issubclass(obj, Foreign)):
        return to_opaque(obj, lambda v: _plain(v, path, regions, keys, memo), *memo)
    if isinstance(obj, dict):  # StateDict too: the OrderedDict stand-in
        items = [(key_text(k), _convert(v, path, regions, (*keys, k), memo))
                 for k, v in obj.items()]
        if all(isinstance(k, str) for k, _ in items):
            return nesting.unflatten(items, path)
        return dict(items)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_convert(v, path, regions, (*keys, i), memo)
                         for i, v in enumerate(obj))
    if isinstance(obj, TensorRef):
        return _tensor(obj, path, regions[obj.storage.key], keys)
    if isinstance(obj, StorageRef):  # a bare storage: its elements, flat
        return _tensor(TensorRef(obj, 0, (obj.numel,), (1,), None), path, regions[obj.key], keys)
    if isinstance(obj, TorchDtype):
        return repr(obj)
    return obj


def _plain(obj: Any, path, regions: dict[str, _Region], keys: tuple, memo: dict) -> Any:
    """A value inside an `Opaque`'s state: containers as they are (keys not nested on ".")."""
    if isinstance(obj, Foreign) or (isinstance(obj, type) and issubclass(obj, Foreign)):
        return _convert(obj, path, regions, keys, memo)
    if isinstance(obj, dict):
        return {key_text(k): _plain(v, path, regions, keys, memo) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v, path, regions, keys, memo) for v in obj)
    return _convert(obj, path, regions, keys, memo)


def _tensor(ref: TensorRef, path, region: _Region, keys: tuple) -> LazyArray:
    source = f"{path}:{''.join(f'[{k!r}]' for k in keys)}"
    storage = ref.storage
    dtype = ref.dtype.newbyteorder(region.order)
    # a storage view (legacy) starts `view_offset` elements of the storage's dtype in; a
    # tensor's offset and strides count elements of its own dtype (they differ for v3 tensors
    # on untyped byte storages)
    start_byte = storage.view_offset * storage.dtype.itemsize
    available = (storage.numel * storage.dtype.itemsize) // dtype.itemsize
    numel = math.prod(ref.shape)
    repeated = [i for i, (n, s) in enumerate(zip(ref.shape, ref.stride, strict=True))
                if n > 1 and s < 1]  # fmt: skip
    if numel and repeated:
        raise file_error(
            path,
            f"the tensor {source} ({dtype}{list(ref.shape)}, stride {list(ref.stride)}) has "
            f"stride 0 along dimension {repeated[0]}: it repeats its storage's elements",
            "Save a tensor that owns its elements (tensor.contiguous() or .clone()).",
        )
    if numel > available:
        raise file_error(
            path,
            f"the tensor {source} ({dtype}{list(ref.shape)}, stride {list(ref.stride)}) has "
            f"{numel} elements, more than its {available}-element storage holds",
            "Save a tensor that owns its elements (tensor.contiguous() or .clone()).",
        )
    last = ref.offset + sum((n - 1) * s for n, s in zip(ref.shape, ref.stride, strict=True))
    if numel and last >= available:
        raise file_error(
            path,
            f"the tensor {source} ({dtype}{list(ref.shape)}, offset {ref.offset}, stride "
            f"{list(ref.stride)}) reaches element {last} of a {available}-element storage",
            _RESAVE,
        )
    native = dtype.newbyteorder("=")

    def read() -> np.ndarray:
        if numel == 0:
            return np.empty(ref.shape, native)
        try:
            raw = _storage_bytes(path, region, start_byte, available * dtype.itemsize)
        except (*ZIP_ERRORS, KeyError) as exc:
            raise file_error(
                path,
                f"the storage of {source} cannot be read ({type(exc).__name__}: {exc})",
                "The file is damaged or changed after it was opened; save it again.",
            ) from exc
        flat = np.frombuffer(raw, dtype=dtype, count=available)
        view = np.lib.stride_tricks.as_strided(
            flat[ref.offset :],
            shape=ref.shape,
            strides=tuple(s * dtype.itemsize for s in ref.stride),
            writeable=False,
        )
        if not view.flags.c_contiguous:
            view = np.ascontiguousarray(view)
        return view if dtype == native else view.astype(native)

    return LazyArray(ref.shape, native, read, source=source)


def _storage_bytes(location: Location, region: _Region, start: int, nbytes: int):
    if region.offset is not None:
        return location.array_reader(region.offset + start, np.dtype(np.uint8), (nbytes,))()
    with location.open() as raw, zipfile.ZipFile(raw) as archive:
        info = archive.getinfo(region.member)
        begin, end = _local_header_span(archive, region.member)
        location.prefetch(raw, [(begin, end + info.compress_size)])
        return archive.read(region.member)[start : start + nbytes]
