"""Compiled kernels kept on disk across processes, keyed by the inspector's own call key.

JAX's persistent compilation cache (`compile_cache`) still traces and lowers every kernel to
MLIR to compute its key before it looks it up: 0.15-0.4 s per fresh process for a checkpoint's
few kernels here. This cache is looked up first, by a key the inspector knows before tracing:
the call's static key, its donated positions, its arguments' shapes and dtypes, the device
(platform, kind, id, the backend's platform version), jax/jaxlib, the XLA flags, the JAX
settings that change tracing (x64, dtype promotion, matmul precision) and a hash of the
inspector's own sources (a kernel's code is the inspector's: an edited or upgraded inspector
never reuses an older kernel). A hit loads the executable
(`jax.experimental.serialize_executable.deserialize_and_load`, a few ms): no tracing, no
lowering, no compile event.

Only calls whose key fully determines their kernel are stored: keys made of plain values
(str, int, float, bool, None, bytes, tuples of them), with no shardings. That excludes
`run(fn, ...)` of an arbitrary function (its key holds the function object) and sharded calls
(SPMD over a mesh: compiled as before, through JAX's cache).

The files live beside JAX's cache folder, in `<that folder>-executables`
(`~/.cache/pytree-inspector/jax-executables` by default). `INSPECTOR_COMPILATION_CACHE=0`
turns this cache off too; `INSPECTOR_EXECUTABLE_CACHE=0` turns off this one alone, and
`INSPECTOR_EXECUTABLE_CACHE=/a/folder` puts it there (on even where JAX's is off). A file
that cannot be read or loaded (corrupt, written by another version) is compiled again and
replaced.

A kernel that JAX's own cache served cannot be stored: jaxlib 0.10's CPU client serializes a
*deserialized* executable without its machine code (loaded again, it fails with "Function
... not found" when run). So the kernels this cache stores are compiled with JAX's cache
bypassed in that thread (`fresh`: its key includes the module's metadata, which other compiles'
keys do not, and nothing is written to it), and a compile JAX still served (`jax_hits`) is
not stored. Like JAX's cache, a file is unpickled: the folder must be the
user's own. Nothing is evicted: each kernel takes 10-100 KB; delete the folder to empty it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import sys
import tempfile
import threading
from pathlib import Path

import jax
import jaxlib

from inspector.core import caches, compile_cache

__all__ = ["folder", "fresh", "jax_hits", "key_text", "load", "storable", "store"]

ENV = "INSPECTOR_EXECUTABLE_CACHE"
_PLAIN = (str, int, float, bool, type(None), bytes)
_STATE: dict = {"folder": None, "checked": False, "sources": None, "touched": 0}
_LOCK = threading.Lock()
_SKIP_DIRS = {"__pycache__", "ui", "cli"}  # no kernel is made there
_THREAD = threading.local()
JAX_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def _on_event(event: str, **_) -> None:
    if event == JAX_HIT_EVENT:
        _THREAD.hits = getattr(_THREAD, "hits", 0) + 1


jax.monitoring.register_event_listener(_on_event)


def jax_hits() -> int:
    """How many kernels JAX's persistent cache has served the calling thread."""
    return getattr(_THREAD, "hits", 0)


@contextlib.contextmanager
def fresh():
    """In this block, the calling thread's compiles neither come from JAX's persistent cache
    nor go into it (thread-local JAX settings: other threads are untouched)."""
    try:
        from jax._src import config
        settings = (config.compilation_cache_include_metadata_in_key(True),
                    config.persistent_cache_min_compile_time_secs(float("inf")))
    except (ImportError, AttributeError, TypeError):  # another JAX: `jax_hits` still guards
        settings = ()
    with contextlib.ExitStack() as stack:
        for setting in settings:
            stack.enter_context(setting)
        yield


def folder() -> Path | None:
    """The folder kernels are stored in, or None when the cache is off (memoized)."""
    if _STATE["checked"]:
        return _STATE["folder"]
    with _LOCK:
        if not _STATE["checked"]:
            _STATE["folder"] = _find_folder()
            _STATE["checked"] = True
    return _STATE["folder"]


def _find_folder() -> Path | None:
    setting = os.environ.get(ENV)
    if setting is not None:
        if setting.strip().lower() in compile_cache.OFF:
            return None
        where = Path(setting).expanduser()
    else:
        if compile_cache.folder() is None:  # INSPECTOR_COMPILATION_CACHE=0: both off
            return None
        jax_folder = compile_cache.enable()
        if jax_folder is None:
            return None
        where = jax_folder.with_name(jax_folder.name + "-executables")
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # read-only: compile as before
    return where


def _sources() -> str:
    """A hash of the inspector's Python sources (~8 ms, once per process)."""
    if _STATE["sources"] is None:
        root = Path(__file__).resolve().parents[1]
        digest = hashlib.sha256()
        for directory, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            for name in sorted(f for f in files if f.endswith(".py")):
                path = Path(directory) / name
                digest.update(os.fsencode(path.relative_to(root)))
                digest.update(path.read_bytes())
        _STATE["sources"] = digest.hexdigest()
    return _STATE["sources"]


def _plain(value) -> bool:
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return type(value) in _PLAIN


def storable(call, device) -> bool:
    """Whether the kernel of `call` on `device` may be stored: the cache is on, the call's key
    is made of plain values and it has no shardings (its key then decides its kernel)."""
    return (call.shardings is None and call.out_shardings is None
            and isinstance(device, jax.Device) and _plain(call.key) and folder() is not None)


def key_text(call, device, abstract) -> str | None:
    """The text the kernel of `call` on `device` is stored under, or None where it is not
    `storable`."""
    if not storable(call, device):
        return None
    try:
        sources = _sources()
    except OSError:  # sources not readable as files (a zipped install): not stored
        return None
    client = device.client
    config = jax.config
    return repr((
        call.key, tuple(call.donate),
        tuple((tuple(a.shape), str(a.dtype)) for a in abstract),
        (client.platform, client.platform_version, device.device_kind, device.id,
         jax.process_count()),
        (config.jax_enable_x64, config.jax_numpy_dtype_promotion,
         str(config.jax_default_matmul_precision)),
        (jax.__version__, jaxlib.__version__, os.environ.get("XLA_FLAGS", ""),
         sys.version_info[:2], sources),
    ))


def _path(text: str) -> Path:
    return folder() / (hashlib.sha256(text.encode()).hexdigest() + ".kernel")


def load(text: str, device) -> jax.stages.Compiled | None:
    """The stored kernel for `text` on `device`, or None (absent, unreadable, incompatible)."""
    from jax.experimental import serialize_executable

    try:
        with open(_path(text), "rb") as f:
            stored, blob, in_tree, out_tree = pickle.load(f)
        if stored != text:  # another key with the same hash (or a torn file)
            return None
        compiled = serialize_executable.deserialize_and_load(
            blob, in_tree, out_tree, backend=device.client, execution_devices=[device])
    except Exception:  # noqa: BLE001 - any failure means: compile it again
        return None
    _STATE["touched"] += 1
    return compiled


def store(text: str, compiled: jax.stages.Compiled) -> bool:
    """Writes `compiled` under `text` (atomically: a temporary file renamed); returns whether it
    was stored. Failures (a kernel JAX cannot serialize, a full disk) are ignored."""
    from jax.experimental import serialize_executable

    path = _path(text)
    try:
        blob, in_tree, out_tree = serialize_executable.serialize(compiled)
        data = pickle.dumps((text, blob, in_tree, out_tree), protocol=pickle.HIGHEST_PROTOCOL)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(temp, path)
        except BaseException:
            os.unlink(temp)
            raise
    except Exception:  # noqa: BLE001 - a cache: the kernel is compiled, only not kept
        return False
    _STATE["touched"] += 1
    return True


def forget() -> None:
    """Forgets the folder and the sources' hash found so far (the next lookup finds them
    again: a changed setting or an edited source is seen). The files on disk stay."""
    with _LOCK:
        _STATE.update(folder=None, checked=False, sources=None, touched=0)


caches.register("kernel files (on disk; kept)", forget, lambda: _STATE["touched"])
