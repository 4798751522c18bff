"""The tree of a well-formed local safetensors file, built in one pass (issue 26).

A header of 106,453 tensors (DeepSeek-V3 and its kin have 76k-96k) is 8 MB of JSON. Parsing
it with the standard `json` module is the floor (here it is parsed by `orjson` when installed,
1.5-2x faster, the same values; anything `orjson` refuses, such as integers beyond 64 bits or
`NaN`, goes the careful way, which uses `json`); everything else `load` does per tensor (a
duplicate-key hook for every JSON object, a `TensorEntry`, per-field checks, a reader, a
`LazyArray`, a walk to nest its dotted key) cost 3-5x that. Here the header is parsed in one
call, and one loop makes each tensor's leaf and puts it in its parent dict. Names come
grouped by parent (a header lists a layer's tensors together), so the loop keeps the last
parent and grandparent dicts and compares names with them (no table of every parent keyed
by its long dotted prefix: hashing those cost more than the leaves); a new branch is walked
from the root. The checks the reference makes are done afterwards over columns:

- no repeated key anywhere: the parsed header holds exactly as many strings as the text has
  quote pairs (a repeated key, which `json` drops, leaves more quotes than strings);
- shapes and offsets are lists of non-negative ints (`set(map(type, ...))` over all of them,
  bounds by NumPy);
- each tensor's byte count matches its shape (in the loop: one product per tensor);
- the tensors, ordered by offsets, tile the data section exactly (NumPy over two columns;
  sorted only when the header does not list them in file order already).

Anything else (an escaped quote, a field beyond the three, a packed F4/F6 tensor, a clash of
keys, any check failing) returns None, and `load` takes the careful path of
`safetensors_header.read_header`, which names every problem. The leaves are `LazyArray`s with the
same fields as that path makes; those read in place (`region`) have no reader object.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from inspector.core.lazy import LazyArray, file_of, layout_of
from inspector.io import subbyte
from inspector.io.dtypes import dtype_from_name
from inspector.io.location import LocalFile
from inspector.io.regions import _Mapped
from inspector.io.safetensors_header import DTYPE_NAMES


def _json_loads(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))


try:  # 1.5-2x faster than `json` on a 106k-tensor header here; same values
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a dependency; `json` gives the same tree
    _loads = _json_loads


class _Careful(Exception):
    """Raised inside the pass: leave it to the careful path."""


def load_tree(location: LocalFile, raw: tuple[bytes, int, int]) -> dict | None:
    """The nested dicts of `LazyArray` of a well-formed file, or None (see the module doc).

    Args:
        location: the local file.
        raw: `safetensors_header.header_bytes(location)`.
    """
    data, data_start, size = raw
    try:
        header = _loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(header, dict):
        return None
    metadata = header.pop("__metadata__", None)
    try:
        root, dims, begins, ends = _build(header, location.name, data_start)
    except (_Careful, KeyError, TypeError, ValueError):
        return None
    strings = 5 * len(header) + (0 if metadata is None else 1 + _strings(metadata))
    if data.count(b'"') != 2 * strings:
        return None  # a repeated key (or an escaped quote): the careful path says which
    if not _columns_ok(dims, begins, ends, size - data_start):
        return None
    return root


def _build(header: dict, path: str, data_start: int) -> tuple[dict, list, list, list]:
    kinds: dict[Any, tuple] = {}  # per header, as the careful path: a missing ml_dtypes raises
    prefix = f"{path}:"
    file = file_of(prefix)  # `LazyArray._file`: the file's one string
    root: dict = {}
    dims: list = []
    begins: list = []
    ends: list = []
    new, lazy, prod = object.__new__, LazyArray, math.prod
    extend, add_begin, add_end = dims.extend, begins.append, ends.append
    last_parent = last_grand = None
    last_node = last_up = root
    made: dict[str, dict] = {}  # dicts above the parents' level, by dotted path
    for name, spec in header.items():
        if len(spec) != 3:
            raise _Careful
        shape = spec["shape"]
        extend(shape)  # as written: (2.0,) == (2,), and the shared one may be the other
        shape = tuple(shape)
        begin, end = spec["data_offsets"]
        kind = kinds.get(spec["dtype"])
        if kind is None:
            kind = kinds[spec["dtype"]] = (*_kind(spec["dtype"]), {})
        stored, native, itemsize, in_place, shapes = kind
        shared = shapes.get(shape)  # experts share shapes: one tuple and `LayoutToken` each
        if shared is None:
            shared = shapes[shape] = (shape, layout_of(shape, native))
        shape, layout = shared
        nbytes = prod(shape) * itemsize
        if end - begin != nbytes:
            raise _Careful
        add_begin(begin)
        add_end(end)
        leaf = new(lazy)
        if in_place and nbytes:  # read by its region (`LazyArray._mapped`): no reader object
            leaf.region = (path, data_start + begin)
            leaf._reader = None
        else:
            leaf.region = None
            leaf._reader = _Mapped(path, data_start + begin, stored, shape, "C")
        leaf.shape = shape
        leaf.dtype = native
        leaf.layout = layout
        leaf.source = prefix + name
        leaf._file = file
        leaf._cache = False
        leaf._value = leaf.sharding = leaf.quant = None
        parent, dot, key = name.rpartition(".")
        if not dot:
            node = root
        elif parent == last_parent:  # most often the tensor before had the same parent
            node = last_node
        else:  # a new parent: most often a sibling of the last one
            grand, dot, last = parent.rpartition(".")
            if not dot:
                up = root
            elif grand == last_grand:
                up = last_up
            else:
                up = last_up = _dict_at(root, grand, made)
                last_grand = grand
            node = up.get(last)
            if node is None:
                node = up[last] = {}
            elif type(node) is not dict:
                raise _Careful  # a tensor there, not a dict of keys
            last_parent, last_node = parent, node
        if key in node:
            raise _Careful
        node[key] = leaf
    return root, dims, begins, ends


def _dict_at(root: dict, dotted: str, made: dict) -> dict:
    """The dict at the dotted path `dotted`, made (with its missing ancestors) if absent;
    `made` keeps those found here by their path (a layer's experts share their parent)."""
    node = made.get(dotted)
    if node is not None:
        return node
    parent, dot, last = dotted.rpartition(".")
    up = _dict_at(root, parent, made) if dot else root
    node = up.get(last)
    if node is None:
        node = up[last] = {}
    elif type(node) is not dict:
        raise _Careful  # a tensor there, not a dict of keys
    made[dotted] = node
    return node


def _kind(code: Any) -> tuple[np.dtype, np.dtype, int, bool]:
    """A dtype code's stored dtype, native dtype, item size and whether it reads in place;
    once per code and header. Packed F4 / F6 codes and unknown ones go the careful way."""
    if type(code) is not str or code not in DTYPE_NAMES:
        raise _Careful
    dtype = dtype_from_name(DTYPE_NAMES[code])
    if dtype.name in subbyte.BITS:
        raise _Careful
    stored = dtype.newbyteorder("<")
    native = stored.newbyteorder("=")
    return stored, native, stored.itemsize, stored.byteorder in "=|" or stored.isnative


def _strings(value: Any) -> int:
    """How many JSON strings (keys included) `value` holds."""
    if isinstance(value, str):
        return 1
    if isinstance(value, dict):
        return len(value) + sum(_strings(v) for v in value.values())
    if isinstance(value, list):
        return sum(_strings(v) for v in value)
    return 0


def _columns_ok(dims: list, begins: list, ends: list, data_size: int) -> bool:
    """Every dim and offset a non-negative int (never a bool or float), each range in order,
    and the ranges ordered by offsets tiling the data section exactly."""
    if not begins:
        return data_size == 0
    if set(map(type, dims)) - {int} or (dims and min(dims) < 0):
        return False
    for column in (begins, ends):
        if set(map(type, column)) != {int}:
            return False
    try:
        begin = np.array(begins, np.int64)
        end = np.array(ends, np.int64)
    except OverflowError:  # beyond 64 bits
        return False
    if begin.min() < 0 or (begin > end).any():
        return False
    if not (begin[1:] == end[:-1]).all():  # not in file order: order them by offsets
        order = np.lexsort((end, begin))
        begin, end = begin[order], end[order]
    return bool(begin[0] == 0 and end[-1] == data_size and (begin[1:] == end[:-1]).all())
