"""The objects of a pickle that are not tensor machinery: described inertly, or refused.

A checkpoint's pickle may name any global. Those that exist to run code (`os.system`,
`builtins.eval`, `subprocess.Popen`, ...) refuse the file: `refusal` says which. Every other
one (omegaconf's `ListConfig`, `argparse.Namespace`, `pathlib.PosixPath`, an enum) resolves to
a `Foreign` class made for this one load: "calling" it, or restoring it with BUILD, APPENDS or
SETITEMS, only records what the pickle passes. Nothing is imported and nothing of the file is
called. `to_opaque` then turns each recorded object into an `inspector.Opaque`.
"""

from __future__ import annotations

import _compat_pickle
import pickle
from typing import Any

from inspector.core.opaque import BACK_REFERENCE, Opaque
from inspector.io.pickle_numpy import numpy_value

# Modules (and their submodules) whose globals run code, touch the system or load more
# pickles: naming any of them is asking to run something.
_CODE_MODULES = frozenset({
    "os", "posix", "nt", "subprocess", "_posixsubprocess", "_winapi", "sys", "shutil",
    "socket", "_socket", "importlib", "imp", "zipimport", "runpy", "pickle", "_pickle",
    "cPickle", "copy_reg", "marshal", "ctypes", "_ctypes", "webbrowser", "code", "codeop",
    "pty", "multiprocessing", "asyncio", "threading", "_thread", "signal", "pdb", "bdb",
    "pydoc", "timeit", "cProfile", "profile", "trace", "doctest", "ensurepip", "pip",
    "setuptools", "distutils", "venv", "io", "_io", "tempfile", "urllib", "http", "ftplib",
    "smtplib", "telnetlib", "requests", "dill", "cloudpickle", "joblib", "operator",
    "_operator", "functools", "_functools", "codecs", "inspect", "gc", "site", "sysconfig",
    "platform", "mmap", "resource", "fcntl", "select", "selectors", "pwd", "grp", "msvcrt",
    "winreg", "_winreg", "atexit", "types.CodeType", "types.FunctionType", "types.MethodType",
    "types.LambdaType", "types.ModuleType", "types.BuiltinFunctionType", "types.CellType",
    "numpy.testing", "numpy.f2py", "numpy.distutils", "numpy.lib.npyio", "numpy.lib.format",
    "torch.hub", "torch.jit", "torch.ops", "torch._ops", "torch.classes", "torch.package",
    "torch.serialization", "torch.utils.cpp_extension", "torch._dynamo", "torch.compiler",
    "torch._C", "torch.load", "torch.save", "torch.distributed.rpc",
})  # fmt: skip

# The builtins a pickle may name: inert types and constants. Any other builtin (eval, exec,
# compile, getattr, setattr, __import__, open, input, breakpoint, globals, vars, ...) refuses.
_INERT_BUILTINS = frozenset({
    "object", "type", "int", "float", "complex", "bool", "str", "bytes", "bytearray", "list",
    "tuple", "dict", "set", "frozenset", "slice", "range", "Ellipsis", "NotImplemented",
    "Exception", "ValueError", "TypeError", "KeyError", "RuntimeError",
})  # fmt: skip


def canonical(module: str, name: str) -> tuple[str, str]:
    """The Python 3 spelling of a global written by a protocol 0-2 pickle (`__builtin__`)."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[module, name]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def refusal(module: str, name: str) -> str | None:
    """Returns why the global `module.name` refuses the file, or None when it may be kept.

    >>> refusal("os", "system"), refusal("builtins", "eval") is not None
    ('this file asks to run os.system', True)
    >>> refusal("omegaconf.listconfig", "ListConfig") is None
    True
    """
    dotted = f"{module}.{name}"
    if module == "builtins":
        return None if name in _INERT_BUILTINS else f"this file asks to run {dotted}"
    parts = module.split(".")
    if any(".".join(parts[:i]) in _CODE_MODULES for i in range(1, len(parts) + 1)):
        return f"this file asks to run {dotted}"
    if dotted in _CODE_MODULES:
        return f"this file asks to run {dotted}"
    if (module, name) in (("copyreg", "_reconstructor"), ("copyreg", "__newobj__")):
        return None
    if module == "copyreg" or (module == "_codecs" and name != "encode"):
        return f"this file asks to run {dotted}"
    return None


class _ForeignType(type):
    """The metaclass of the per-load classes: BUILD onto the class itself is refused."""

    @property
    def __setstate__(cls):  # a data descriptor: found before the instances' method
        def refuse(state):
            raise pickle.UnpicklingError(f"the pickle tries to modify the class {cls.dotted}")

        return refuse


class Foreign(metaclass=_ForeignType):
    """A recorded object of a class the file names: what the pickle passed, nothing run."""

    __slots__ = ("args", "kwargs", "state", "items", "mapping")
    dotted = ""  # set on each per-load subclass

    def __new__(cls, *args, **kwargs):
        self = object.__new__(cls)
        self.args, self.kwargs, self.state = args, kwargs, None
        self.items, self.mapping = [], []
        return self

    def __init__(self, *args, **kwargs):
        pass  # REDUCE calls the class: everything was recorded by __new__

    def __setstate__(self, state):
        self.state = state

    def append(self, value):
        self.items.append(value)

    def extend(self, values):
        self.items.extend(values)

    def add(self, value):  # ADDITEMS onto a set subclass
        self.items.append(value)

    def __setitem__(self, key, value):
        self.mapping.append((key, value))

    def __reduce__(self):
        raise TypeError(f"a recorded {self.dotted} cannot be pickled")


def foreign_class(module: str, name: str) -> type:
    """A fresh `Foreign` subclass standing for the global `module.name` (one per load)."""
    return type(name, (Foreign,), {"__slots__": (), "dotted": f"{module}.{name}"})


def _reconstructor(cls, base, state=None):
    # copyreg._reconstructor(cls, base, state): base.__new__(cls, state), recorded
    if not (isinstance(cls, type) and issubclass(cls, Foreign)):
        raise pickle.UnpicklingError("copyreg._reconstructor names a class it may not build")
    return cls() if state is None else cls(state)


def _newobj(cls, *args):
    if not (isinstance(cls, type) and issubclass(cls, Foreign)):
        raise pickle.UnpicklingError("copyreg.__newobj__ names a class it may not build")
    return cls(*args)


RECONSTRUCTORS = {("copyreg", "_reconstructor"): _reconstructor,
                  ("copyreg", "__newobj__"): _newobj}


def to_opaque(obj: Any, convert, memo: dict[int, Opaque], active: set[int]) -> Opaque:
    """Returns the `Opaque` for a recorded `Foreign` object or a bare `Foreign` class (or the
    NumPy scalar or array a recorded NumPy call describes: `pickle_numpy`).

    Args:
        obj: the recorded object (or class).
        convert: turns a nested value (a tensor, a container) into its plain form.
        memo: `Opaque`s already made, by the recorded object's id (shared objects stay shared).
        active: ids of the objects being converted (a reference back to one becomes an
            `Opaque` whose state is `BACK_REFERENCE`).
    """
    if isinstance(obj, type):
        return Opaque(obj.dotted)
    value = numpy_value(obj)
    if value is not None:  # a NumPy scalar or array: a value, decoded from its bytes
        return value
    ident = id(obj)
    if ident in active:
        return Opaque(obj.dotted, BACK_REFERENCE)
    if ident in memo:
        return memo[ident]
    active.add(ident)
    parts: dict[str, Any] = {}
    if obj.args:
        parts["args"] = [convert(a) for a in obj.args]
    if obj.kwargs:
        parts["kwargs"] = {str(k): convert(v) for k, v in obj.kwargs.items()}
    if obj.state is not None:
        parts["state"] = convert(obj.state)
    if obj.mapping:
        parts["items"] = {key_text(k): convert(v) for k, v in obj.mapping}
    elif obj.items:
        parts["items"] = [convert(v) for v in obj.items]
    active.discard(ident)
    if len(parts) == 1:
        (kind, state), = parts.items()
        if kind == "args" and len(state) == 1:
            state = state[0]
    else:
        state = parts or None
    memo[ident] = opaque = Opaque(obj.dotted, state)
    return opaque


def key_text(key: Any) -> Any:
    """A dict key as a tree may hold it: plain keys as they are, a recorded object by its name."""
    if isinstance(key, Foreign):  # an enum member, mostly: ‹Precision› 'bf16-mixed'
        name = key.dotted.rsplit(".", 1)[-1]
        plain = len(key.args) == 1 and isinstance(key.args[0], str | int | float | bool)
        return f"\u2039{name}\u203a {key.args[0]!r}" if plain else f"\u2039{name}\u203a"
    if isinstance(key, type) and issubclass(key, Foreign):
        return f"\u2039{key.dotted.rsplit('.', 1)[-1]}\u203a"
    return key
