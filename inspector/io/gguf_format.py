"""GGUF files (llama.cpp): structure from the header, values dequantized on demand by `gguf`.

The header (key/values and tensor infos) is walked by `gguf_header`, bounded by the file's
size; no tensor data is read to show the structure. Tensor names split on "." into nested dicts
(`blk.0.attn_q.weight` -> `['blk']['0']['attn_q']['weight']`). Each tensor is a `LazyArray`
of its logical shape (NumPy order: ggml's `ne` reversed): plain types (F32, F16, BF16, F64,
I8-I64) memory-map their bytes as they are; block-quantized types (Q4_0, Q8_0, Q4_K, IQ*, ...)
read their blocks and dequantize them to float32 with `gguf.quants.dequantize`, llama.cpp's own
Python reference. Such leaves carry `quant` text naming the ggml type and the bytes the file
holds, which `describe` shows as `Row.quant`.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from functools import cache
from typing import Any

import numpy as np

from inspector.core.lazy import LazyArray
from inspector.core.node_text import human_bytes
from inspector.io import nesting
from inspector.io.dtypes import dtype_from_name
from inspector.io.file_error import file_error
from inspector.io.gguf_header import GGUFHeader, TensorInfo, read_header
from inspector.io.locate import locate
from inspector.io.location import Location

_PLAIN = {  # ggml type name -> the NumPy dtype its bytes are (little-endian)
    "F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64",
    "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64",
}  # fmt: skip
_RECENT: OrderedDict = OrderedDict()  # (path, size, mtime, inode) -> GGUFHeader
_RECENT_SIZE = 4
_LOCK = threading.Lock()
_INSTALL = "Install it: pip install 'pytree-inspector[gguf]' (or pip install gguf)."


def load(path: str | os.PathLike | Location) -> dict:
    """Returns the tensors of a GGUF file as nested dicts of `LazyArray` (names split on ".").

    Args:
        path: a `.gguf` file.

    Returns:
        Nested dicts; quantized tensors are float32 leaves of their logical shape, dequantized
        when read; others memory-map their bytes.

    Raises:
        LoadError: the header is damaged or hostile (see `gguf_header.read_header`), names
            clash when nested, or the `gguf` package is not installed.
    """
    location = locate(path)
    header = read(location)
    pairs = ((t.name, _leaf(location, t)) for t in header.tensors)
    return nesting.unflatten(pairs, location)


def read(path: str | os.PathLike | Location) -> GGUFHeader:
    """Returns the checked header of a GGUF file: metadata, tensor infos, bytes read.

    >>> import tempfile, numpy as np, gguf
    >>> path = f"{tempfile.mkdtemp()}/m.gguf"
    >>> writer = gguf.GGUFWriter(path, "llama")
    >>> writer.add_context_length(4096)
    >>> writer.add_tensor("w", np.ones((2, 32), np.float32))
    >>> writer.write_header_to_file(); writer.write_kv_data_to_file()
    >>> writer.write_tensors_to_file(); writer.close()
    >>> header = read(path)
    >>> header.metadata["general.architecture"], header.metadata["llama.context_length"]
    ('llama', 4096)
    >>> [(t.name, t.shape, t.type_name) for t in header.tensors]
    [('w', (2, 32), 'F32')]
    """
    location = locate(path)
    key = _cache_key(location)
    with _LOCK:
        hit = _RECENT.get(key) if key is not None else None
    if hit is not None:
        return hit
    header = read_header(location, ggml_types())
    if key is not None:
        with _LOCK:
            _RECENT[key] = header
            while len(_RECENT) > _RECENT_SIZE:
                _RECENT.popitem(last=False)
    return header


def forget() -> None:
    """Drops the headers `read` keeps (benchmarks time cold reads with it)."""
    with _LOCK:
        _RECENT.clear()


def _cache_key(location: Location):
    # The app reads a file's header twice (its tree, then its metadata); a 400k-string
    # tokenizer costs ~0.1 s each time. Local files only, keyed by what a rewrite changes.
    if location.local_path is None:
        return None
    stat = location.local_path.stat()
    return str(location.local_path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino


def metadata(path: str | os.PathLike | Location) -> dict[str, Any]:
    """Returns the key/values of a GGUF file (long arrays as `GGUFArray` summaries)."""
    return read(path).metadata


@cache
def ggml_types() -> dict[int, tuple[str, int, int]]:
    """ggml type code -> (name, values per block, bytes per block), as `gguf` knows them."""
    constants = _gguf("constants")
    return {
        int(t): (t.name, block, nbytes) for t, (block, nbytes) in constants.GGML_QUANT_SIZES.items()
    }


def quant_text(tensor: TensorInfo) -> str:
    """`'Q4_K · 4.5 bits/value · 1.1 MiB in the file'`: how a quantized tensor is stored."""
    n = max(1, math.prod(tensor.shape))
    bits = 8 * tensor.nbytes / n
    return f"{tensor.type_name} · {bits:.3g} bits/value · {human_bytes(tensor.nbytes)} in the file"


def _leaf(location: Location, tensor: TensorInfo) -> LazyArray:
    source = f"{location}:{tensor.name}"
    plain = _PLAIN.get(tensor.type_name)
    if plain is not None:
        dtype = dtype_from_name(plain)
        reader = location.array_reader(tensor.offset, dtype.newbyteorder("<"), tensor.shape)
        return LazyArray(tensor.shape, dtype.newbyteorder("="), reader, source=source)
    return LazyArray(
        tensor.shape,
        np.float32,
        _dequantizer(location, tensor),
        source=source,
        quant=quant_text(tensor),
    )


def _dequantizer(location: Location, tensor: TensorInfo):
    shape = tensor.shape
    rows = shape[:-1] if shape else ()
    row_bytes = tensor.nbytes // max(1, math.prod(rows))
    raw = location.array_reader(tensor.offset, np.dtype(np.uint8), (*rows, row_bytes))

    def read() -> np.ndarray:
        quants = _gguf("quants")
        qtype = _gguf("constants").GGMLQuantizationType(tensor.ggml_type)
        blocks = raw()
        if blocks.size == 0:
            return np.zeros(shape, np.float32)
        try:
            with np.errstate(all="ignore"):  # inf/NaN scales are values to show, not errors
                values = quants.dequantize(blocks, qtype)
        except NotImplementedError:
            raise file_error(
                location,
                f"tensor {tensor.name!r} is {tensor.type_name}, which gguf "
                f"{_gguf_version()} cannot dequantize",
                "Upgrade gguf (pip install -U gguf), or convert the file to another type.",
            ) from None
        return np.asarray(values, np.float32).reshape(shape)

    return read


def _gguf(module: str):
    import importlib

    try:
        return importlib.import_module(f"gguf.{module}")
    except ImportError:
        raise file_error("a GGUF file", "the gguf package is not installed", _INSTALL) from None


def _gguf_version() -> str:
    from importlib.metadata import version

    return version("gguf")
