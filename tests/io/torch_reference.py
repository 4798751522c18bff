"""An independent reader of trusted `torch.save` files, as `torch.load` reads them, for the tests.

It is the reference the inspector's reader is compared with on real third-party files, where
torch itself is not installed: the standard unpickler, with torch's tensor rebuilders written
out in NumPy and every other global imported for real (omegaconf builds its own objects).
Only for the pinned, checksummed corpus files: it runs the pickle's code.
"""

from __future__ import annotations

import collections
import io
import pickle
import struct
import zipfile

import numpy as np

_STORAGES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
             "LongStorage": np.int64, "IntStorage": np.int32, "ByteStorage": np.uint8,
             "BoolStorage": np.bool_}  # fmt: skip


def _rebuild_tensor_v2(storage, offset, size, stride, *_):
    # a view: legacy storages are filled in after the object is read
    return np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=tuple(x * storage.itemsize for x in stride))


class _Unpickler(pickle.Unpickler):
    def __init__(self, f, storage):
        super().__init__(f)
        self.storage = storage  # (key, dtype, numel) -> the storage's elements

    def find_class(self, module, name):
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "torch" and name in _STORAGES:
            return _STORAGES[name]
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        return super().find_class(module, name)  # imports it (fix_imports: py2 names too)

    def persistent_load(self, pid):
        _, dtype, key, _, numel = pid[:5]
        return self.storage(str(key), dtype, numel)


def load_zip(path) -> object:
    """`torch.load` of a zip-format file, tensors as NumPy arrays."""
    with zipfile.ZipFile(path) as archive:
        (pkl,) = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        prefix = pkl[: -len("data.pkl")]

        def storage(key, dtype, numel):
            return np.frombuffer(archive.read(f"{prefix}data/{key}"), dtype, count=numel)

        return _Unpickler(io.BytesIO(archive.read(pkl)), storage).load()


def load_legacy(path) -> object:
    """`torch.load` of a legacy-format file (five pickles, then each storage's count and bytes)."""
    with open(path, "rb") as f:
        buf = io.BytesIO(f.read())
    for _ in range(3):  # magic number, protocol version, system info
        pickle.load(buf)
    storages: dict[str, np.ndarray] = {}
    obj = _Unpickler(buf, lambda key, dtype, n: storages.setdefault(key, np.zeros(n, dtype))).load()
    for key in map(str, pickle.load(buf)):
        (count,) = struct.unpack("<q", buf.read(8))
        array = storages[key]
        array[:] = np.frombuffer(buf.read(count * array.itemsize), array.dtype, count=count)
    return obj
