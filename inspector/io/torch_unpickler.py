"""Reads the pickles inside PyTorch checkpoints without importing torch or running their code.

A pickle is a program: its GLOBAL opcodes import any callable and its REDUCE opcodes call it
(that is how `os.system` ends up run by `torch.load` on an untrusted file). `SafeUnpickler`
resolves globals through `allow_list()`, an explicit allow-list of the names a state dict uses, each
mapped to a harmless stand-in defined here; every other global is refused with a `LoadError`
naming the file and the global. Tensors come back as `TensorRef` records (storage, offset,
shape, strides) and storages as `StorageRef` records; `torch_format` turns them into leaves.

Before unpickling, `scan` walks the opcodes with `pickletools` (which runs nothing) to find
where the pickle ends and to check that every length it declares fits in the bytes present, so
a damaged or forged length fails fast instead of allocating.
"""

from __future__ import annotations

import functools
import io
import os
import pickle
import pickletools
from typing import Any, BinaryIO

import numpy as np

from inspector.core.errors import LoadError
from inspector.io.dtypes import dtype_from_name
from inspector.io.file_error import file_error

# Element types by the names torch pickles; resolved in `allow_list` (bfloat16 needs ml_dtypes).
_STORAGE_DTYPES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
}
_TORCH_DTYPES = {
    "float64": "float64", "double": "float64", "float32": "float32", "float": "float32",
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16",
    "int64": "int64", "long": "int64", "int32": "int32", "int": "int32",
    "int16": "int16", "short": "int16", "int8": "int8", "uint8": "uint8",
    "uint16": "uint16", "uint32": "uint32", "uint64": "uint64", "bool": "bool",
    "complex64": "complex64", "cfloat": "complex64", "complex128": "complex128",
    "cdouble": "complex128", "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz",
}  # fmt: skip


class _Frozen:
    """A stand-in no pickle can change: BUILD (`__setstate__`) and attribute writes refuse.

    The stand-ins are shared by every load in the process; a pickle that set
    `FloatStorage.dtype` would otherwise change how every later checkpoint reads.
    """

    __slots__ = ()

    def __setattr__(self, name, value):
        raise pickle.UnpicklingError(f"the pickle tries to modify {self!r}")

    def __delattr__(self, name):
        raise pickle.UnpicklingError(f"the pickle tries to modify {self!r}")

    def __setstate__(self, state):
        raise pickle.UnpicklingError(f"the pickle tries to modify {self!r}")

    def __reduce__(self):
        raise TypeError(f"{self!r} is a stand-in and cannot be pickled")


class StorageType(_Frozen):
    """Stands in for `torch.FloatStorage` & co.: only the element type is kept."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: np.dtype):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", dtype)

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class TorchDtype(_Frozen):
    """Stands in for `torch.float32` & co. (a tensor's dtype in `_rebuild_tensor_v3`)."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: np.dtype):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", dtype)

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class AllowedFunction(_Frozen):
    """Stands in for an allowed function or class: calls `function`, and nothing can change it.

    The pickle never sees the Python function itself, so it cannot set its `__defaults__`
    or `__dict__` (or a class's attributes) for later loads.
    """

    __slots__ = ("name", "function")

    def __init__(self, name: str, function):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "function", function)

    def __call__(self, *args, **kwargs):
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return self.name


class StorageRef:
    """A storage named by a persistent id: `numel` elements of `dtype`, stored under `key`.

    A legacy-format view into a larger storage has `view_offset` (in elements) into `key`.
    """

    __slots__ = ("key", "dtype", "numel", "view_offset")

    def __init__(self, key: str, dtype: np.dtype, numel: int, view_offset: int = 0):
        self.key, self.dtype, self.numel, self.view_offset = key, dtype, numel, view_offset

    def __setstate__(self, state):
        raise pickle.UnpicklingError("the pickle tries to modify a storage")


class TensorRef:
    """A tensor as the pickle describes it: a strided view of a storage."""

    __slots__ = ("storage", "offset", "shape", "stride", "dtype")

    def __init__(self, storage, offset, shape, stride, dtype):
        if not isinstance(storage, StorageRef):
            raise pickle.UnpicklingError(f"a tensor's storage is a {type(storage).__name__}")
        for name, value in (("size", shape), ("stride", stride)):
            if not isinstance(value, tuple) or not all(_is_count(v) for v in value):
                raise pickle.UnpicklingError(f"a tensor's {name} {value!r} is not a tuple of ints")
        if len(shape) != len(stride) or not _is_count(offset):
            raise pickle.UnpicklingError(
                f"a tensor's size {shape}, stride {stride}, offset {offset!r} are inconsistent"
            )
        self.storage, self.offset, self.shape, self.stride = storage, offset, shape, stride
        self.dtype = storage.dtype if dtype is None else dtype

    def __setstate__(self, state):
        raise pickle.UnpicklingError("the pickle tries to modify a tensor")


class StateDict(dict):
    """Stands in for `collections.OrderedDict`; drops the `_metadata` torch attaches to it."""

    def __setstate__(self, state):
        pass  # torch's per-module version numbers: not part of the tree


class _TensorClass:
    """Stands in for `torch.Tensor` / `torch.nn.Parameter` as `_rebuild_from_type_v2` args."""


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _rebuild_tensor(storage, storage_offset, size, stride):
    return TensorRef(storage, storage_offset, _ints(size), _ints(stride), None)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       metadata=None):  # fmt: skip
    return TensorRef(storage, storage_offset, _ints(size), _ints(stride), None)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       dtype, metadata=None):  # fmt: skip
    if not isinstance(dtype, TorchDtype):
        raise pickle.UnpicklingError(f"a tensor's dtype is a {type(dtype).__name__}")
    return TensorRef(storage, storage_offset, _ints(size), _ints(stride), dtype.dtype)


def _rebuild_parameter(data, requires_grad, backward_hooks, state=None):
    return data  # a Parameter is its tensor, for reading


def _rebuild_from_type_v2(func, new_type, args, state):
    func = func.function if isinstance(func, AllowedFunction) else None
    if func not in _REBUILDERS or not isinstance(args, tuple):
        raise pickle.UnpicklingError("_rebuild_from_type_v2 names a function it may not call")
    return func(*args)


def _torch_size(values=()):
    return _ints(values)


def _latin1_encode(text, encoding="latin1"):
    # Protocol-2 pickles spell bytes objects as _codecs.encode(str, "latin1").
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is allowed for latin1 only")
    return text.encode("latin1")


def _ints(values) -> tuple:
    # torch.Size pickles as a tuple; anything else here would be damage or a trick
    if not isinstance(values, tuple):
        raise pickle.UnpicklingError(f"expected a tuple of ints, got {type(values).__name__}")
    return values


_REBUILDERS = {_rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3, _rebuild_parameter}

_FUNCTIONS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): StateDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch", "Tensor"): _TensorClass,
    ("torch.nn.parameter", "Parameter"): _TensorClass,
    ("torch", "Size"): _torch_size,
    ("_codecs", "encode"): _latin1_encode,
}


@functools.cache
def allow_list() -> dict[tuple[str, str], Any]:
    """Returns every global a PyTorch pickle may name: (module, name) -> its stand-in.

    >>> allow_list()["torch", "BFloat16Storage"].dtype
    dtype(bfloat16)
    >>> ("os", "system") in allow_list()
    False
    >>> allow_list()["torch", "FloatStorage"].dtype = "int8"
    Traceback (most recent call last):
    _pickle.UnpicklingError: the pickle tries to modify torch.FloatStorage
    """
    allowed: dict[tuple[str, str], Any] = {
        (module, name): AllowedFunction(f"{module}.{name}", function)
        for (module, name), function in _FUNCTIONS.items()
    }
    for module in ("torch", "torch.storage"):
        allowed[module, "UntypedStorage"] = StorageType("UntypedStorage", np.dtype("uint8"))
    for name, dtype in _STORAGE_DTYPES.items():
        allowed["torch", name] = StorageType(name, dtype_from_name(dtype))
    for name, dtype in _TORCH_DTYPES.items():
        allowed["torch", name] = TorchDtype(name, dtype_from_name(dtype))
    return allowed


class SafeUnpickler(pickle.Unpickler):
    """A `pickle.Unpickler` that resolves globals only through `allow_list`, storages by id.

    Args:
        data: the pickle's bytes (already checked by `scan`).
        path: the checkpoint, named in errors.
        storages: persistent ids resolve to `StorageRef`s collected here, by key.
    """

    def __init__(self, data: bytes, path: str | os.PathLike, storages: dict[str, StorageRef]):
        super().__init__(io.BytesIO(data))
        self.path, self.storages = path, storages

    def find_class(self, module: str, name: str) -> Any:
        try:
            return allow_list()[module, name]
        except KeyError:
            hint = ""
            if module.startswith("__torch__"):
                hint = " It is a TorchScript archive (torch.jit.save): save its state_dict()."
            raise file_error(
                self.path,
                f"the pickle refers to the global {module}.{name}, which is not on the "
                f"allow-list of names a state dict uses; nothing from the file was run",
                "Load only state dicts of tensors (torch.save(model.state_dict(), path))." + hint,
            ) from None

    def persistent_load(self, saved_id: Any) -> StorageRef:
        if not isinstance(saved_id, tuple) or len(saved_id) not in (5, 6):
            raise pickle.UnpicklingError(f"unknown persistent id {saved_id!r:.80}")
        kind = saved_id[0].decode("ascii") if isinstance(saved_id[0], bytes) else saved_id[0]
        storage_type, key, _location, numel = saved_id[1:5]
        view = saved_id[5] if len(saved_id) == 6 else None
        if kind != "storage" or not isinstance(storage_type, StorageType) or not _is_count(numel):
            raise pickle.UnpicklingError(f"unknown persistent id {saved_id!r:.80}")
        key = str(key)
        root = self.storages.setdefault(key, StorageRef(key, storage_type.dtype, numel))
        if root.numel != numel or root.dtype != storage_type.dtype:
            raise pickle.UnpicklingError(f"storage {key} is declared twice, differently")
        if view is None:
            return root
        # legacy format: (view key, offset, size) of a view into the root storage
        if not (isinstance(view, tuple) and len(view) == 3 and all(map(_is_count, view[1:]))):
            raise pickle.UnpicklingError(f"storage view {view!r:.80} is malformed")
        _, offset, size = view
        if offset + size > numel:
            raise pickle.UnpicklingError(f"a view of storage {key} runs past its end")
        return StorageRef(key, root.dtype, size, view_offset=offset)


def scan(f: BinaryIO, path: str | os.PathLike, limit: int) -> bytes:
    """Returns the bytes of the one pickle starting at `f`'s position, leaving `f` after it.

    Runs nothing: `pickletools.genops` only decodes opcodes. Every length an opcode declares
    must fit in the `limit` bytes that remain.

    Args:
        f: a binary file positioned at a pickle.
        path: the checkpoint, named in errors.
        limit: how many bytes from the position the pickle may span.

    Returns:
        The pickle, up to and including its STOP opcode.

    Raises:
        LoadError: the pickle is malformed or truncated.
    """
    start = f.tell()
    bounded = _Bounded(f, start + limit)
    try:
        for _ in pickletools.genops(bounded):
            pass
    except (ValueError, EOFError, _Truncated) as exc:
        raise file_error(
            path,
            f"a pickle starting at byte {start} is damaged or truncated ({exc})",
            "The file is damaged; save it again.",
        ) from exc
    end = f.tell()
    f.seek(start)
    return f.read(end - start)


def unpickle(data: bytes, path: str | os.PathLike, storages: dict[str, StorageRef]) -> Any:
    """Returns the object a (scanned) PyTorch pickle describes, built from stand-ins only.

    Args:
        data: the pickle.
        path: the checkpoint, named in errors.
        storages: filled with every storage the pickle refers to, by key.

    Returns:
        The object: dicts (`StateDict`), lists, tuples, numbers, strings and `TensorRef`s.

    Raises:
        LoadError: a global is not allowed, or the pickle is malformed.
    """
    try:
        return SafeUnpickler(data, path, storages).load()
    except LoadError:
        raise
    except (
        pickle.UnpicklingError,
        EOFError,
        TypeError,
        ValueError,
        IndexError,
        KeyError,
        AttributeError,
        RecursionError,
        MemoryError,
    ) as exc:
        raise file_error(
            path,
            f"its pickle could not be read as a state dict ({type(exc).__name__}: {exc})",
            "Load only state dicts of tensors (torch.save(model.state_dict(), path)).",
        ) from exc


class _Truncated(Exception):
    pass


class _Bounded:
    """A read-only view of a file that refuses reads past `end` instead of allocating them."""

    def __init__(self, f: BinaryIO, end: int):
        self.f, self.end = f, end

    def read(self, n: int = -1) -> bytes:
        remaining = self.end - self.f.tell()
        if n is None or n < 0:
            n = remaining
        if n > remaining:
            raise _Truncated(f"{n} bytes are declared but only {max(remaining, 0)} remain")
        return self.f.read(n)

    def readline(self) -> bytes:
        return self.f.readline(max(self.end - self.f.tell(), 0))

    def tell(self) -> int:
        return self.f.tell()
