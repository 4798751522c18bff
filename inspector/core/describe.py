"""`describe(tree)`: the tree as neutral rows, one per node, that every view draws from."""

from __future__ import annotations

import math
from itertools import compress
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from inspector.core import nodes
from inspector.core.gc_pause import gc_paused
from inspector.core.lazy import LazyArray
from inspector.core.leaves import _DTYPE_NAMES, dtype_name, leaf_info
from inspector.core.opaque import Opaque


class Row(NamedTuple):
    """One node of a pytree (immutable; a NamedTuple because 100k-leaf trees make 200k rows,
    and a frozen dataclass costs seven times as much to build).

    Attributes:
        path: the key path in JAX `keystr` form (`['layer1']['w']`, `[0][1]`, `.bias`); `""`
            for the root.
        key: the last step of `path` (`['w']`); `""` for the root.
        depth: 0 for the root.
        kind: `dict`, `list`, `tuple`, `namedtuple`, `dataclass`, `custom`, `None`, `leaf` or
            `opaque` (an `inspector.Opaque` leaf: counted as a leaf, never an array).
        type_name: the Python class name (`dict`, `FrozenDict`, `ndarray`, `LazyArray`; for an
            opaque leaf the class the file names, `ListConfig`).
        shape, dtype: for array-like leaves (`None` for inner nodes and non-array leaves).
        nbytes, n_leaves, n_params: the leaf's own, or subtree totals on inner nodes.
        n_children: direct children (0 for leaves).
        device: where a JAX array lives (`cpu:0`, or `4 devices` when sharded), else `None`.
        sharding: how a leaf is laid out over several devices, in words
            (`PartitionSpec('data', None) over data=4, model=2`, `replicated over 8 devices`,
            or the sharding a checkpoint was saved with); `None` for one device, host arrays
            and inner nodes.
        quant: on the leaf holding a quantized weight's codes, what it is and where its
            scales are (`fp8 e4m3 · 128x128 block scales in ['weight_scale_inv']`), then its
            problems (see `inspector.quant_groups`); on a leaf its file stores quantized (a
            GGUF tensor), how (`'Q4_K · 4.5 bits/value · 1.1 MiB in the file'`, from
            `LazyArray.quant`); `None` elsewhere.
        opaque: for an `Opaque` leaf (kind `opaque`: an object a checkpoint describes but the
            inspector never rebuilds), what it holds in a few words (`‹ListConfig› [3 items]`);
            `None` elsewhere.
    """

    path: str
    key: str
    depth: int
    kind: str
    type_name: str
    shape: tuple[int, ...] | None
    dtype: str | None
    nbytes: int
    n_leaves: int
    n_params: int
    n_children: int
    device: str | None
    sharding: str | None = None
    quant: str | None = None
    opaque: str | None = None


def describe(tree) -> list[Row]:
    """Returns one `Row` per node of `tree`, in pre-order (a parent before its children).

    Children appear in JAX's flattening order, so rows line up with `jax.tree.leaves`:
    **dict keys are shown sorted** (as JAX sorts them; `OrderedDict` keeps its order).
    Inner nodes carry subtree totals. Reads no array data (lazy leaves stay unread).

    Packed trees (`inspector.pack`) are described as the tree they hold.

    Raises:
        TreeDepthError: the tree contains itself (the message names the cycle's key path) or
            nests deeper than `nodes.MAX_DEPTH` levels.

    >>> rows = describe({"b": np.zeros((2, 3), np.float32), "a": [1, None]})
    >>> for r in rows:
    ...     print(repr(r.path), r.kind, r.shape, r.dtype, r.n_params)
    '' dict None None 7
    "['a']" list None None 1
    "['a'][0]" leaf () int32 1
    "['a'][1]" None None None 0
    "['b']" leaf (2, 3) float32 6
    """
    tree = nodes.structure_of(tree)
    rows: list[Row | None] = []
    try:
        with gc_paused():  # 177k rows of a 106k-tensor checkpoint: no collector passes meanwhile
            _walk(tree, "", "", 0, rows)
    except nodes.DepthExceeded:
        raise nodes.too_deep(tree) from None
    finally:
        _FRAGS.clear()
    if _may_hold_quant(rows):
        _mark_quant(tree, rows)
    return rows  # type: ignore[return-value]


_CODE_DTYPES = frozenset({"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"})
_PACKED_DTYPES = frozenset({"uint8", "int32"})  # MXFP4 blocks and scales, GPTQ / AWQ words
_PACKED_KEYS = ("_blocks']", "_scales']", "qweight']")


def _may_hold_quant(rows: list, _dtype=itemgetter(6), _key=itemgetter(1),
                    _packed=_PACKED_DTYPES.__contains__) -> bool:
    # Must cost nothing measurable on trees without quantized weights: a set of the dtypes
    # (C-level), then the names of the uint8 / int32 leaves only (C-level selection).
    dtypes = set(map(_dtype, rows))
    if dtypes & _CODE_DTYPES:
        return True
    if not dtypes & _PACKED_DTYPES:
        return False
    keys = compress(map(_key, rows), map(_packed, map(_dtype, rows)))
    return any(k.endswith(_PACKED_KEYS) for k in keys)


def _mark_quant(tree, rows: list) -> None:
    from inspector.core.quant.rows import mark  # imports JAX: only when needed

    mark(tree, rows)


_FRAGS: dict[str, str] = {}  # a str key -> its `['key']`, for one `describe` call (cleared after)


def _walk(node, path: str, key: str, depth: int, rows: list,
          _ndarray=np.ndarray, _lazy=LazyArray, _row=Row, _name=dtype_name,
          _max_depth=nodes.MAX_DEPTH) -> tuple[int, int, int]:
    # The hot loop of every view: 100k-leaf trees must describe in well under a second, so
    # NumPy leaves and plain dicts skip the generic path, and globals are bound as defaults.
    if type(node) is _ndarray:
        nbytes = node.nbytes
        size = node.size
        rows.append(_row(path, key, depth, "leaf", "ndarray", node.shape, _name(node.dtype),
                         nbytes, 1, size, 0, None))
        return nbytes, 1, size
    if type(node) is _lazy and node.sharding is None:  # a checkpoint's leaf: all known
        size = math.prod(node.shape)
        nbytes = size * node.dtype.itemsize
        rows.append(_row(path, key, depth, "leaf", "LazyArray", node.shape, _name(node.dtype),
                         nbytes, 1, size, 0, None, None, node.quant))
        return nbytes, 1, size
    if type(node) is dict:
        return _walk_dict(node, path, key, depth, rows)
    else:
        kind, kids = nodes.children(node)
    if kind == nodes.LEAF:
        if type(node) is Opaque:
            rows.append(_row(path, key, depth, "opaque", node.name, None, None, 0, 1, 0, 0,
                             None, None, opaque=node.summary()))
            return 0, 1, 0
        shape, dtype, nbytes, device = leaf_info(node)
        n_params = math.prod(shape) if shape is not None else 0
        # on a device, or a checkpoint leaf saved sharded (100k-leaf trees: skip the rest)
        sharding = _sharding_text(node) if device is not None or (
            type(node) is LazyArray and node.sharding is not None) else None
        quant = node.quant if type(node) is LazyArray else None
        rows.append(_row(path, key, depth, kind, type(node).__name__, shape, dtype, nbytes,
                         1, n_params, 0, device, sharding, quant))
        return nbytes, 1, n_params
    if depth >= _max_depth and kids:
        raise nodes.DepthExceeded
    slot = len(rows)
    rows.append(None)
    total_bytes = total_leaves = total_params = 0
    child_depth = depth + 1
    for child_key, child in kids:
        b, n, p = _walk(child, path + child_key, child_key, child_depth, rows)
        total_bytes += b
        total_leaves += n
        total_params += p
    rows[slot] = _row(path, key, depth, kind, type(node).__name__, None, None, total_bytes,
                      total_leaves, total_params, len(kids), None)
    return total_bytes, total_leaves, total_params


def _walk_dict(node: dict, path: str, key: str, depth: int, rows: list, _lazy=LazyArray,
               _new=tuple.__new__, _row=Row, _name=dtype_name, _prod=math.prod,
               _walk=_walk, _names=_DTYPE_NAMES, _id=id, _frags=_FRAGS) -> tuple[int, int, int]:
    # `_walk` for a plain dict, with its checkpoint leaves' rows made here (a checkpoint of
    # 106k tensors: 106k calls fewer), each Row made by tuple.__new__ (no Python __new__),
    # each dtype's name found in `dtype_name`'s table here (a call fewer per leaf)
    if depth >= nodes.MAX_DEPTH and node:
        raise nodes.DepthExceeded
    slot = len(rows)
    rows.append(None)
    append = rows.append
    total_bytes = total_leaves = total_params = 0
    child_depth = depth + 1
    try:
        order = sorted(node)
    except TypeError:  # keys of mixed types: JAX keeps insertion order
        order = list(node)
    for k in order:
        child = node[k]
        if type(k) is str:  # `['key']` made once a call (a checkpoint's keys repeat)
            child_key = _frags.get(k)
            if child_key is None:
                child_key = _frags[k] = f"[{k!r}]"
        else:  # (a str subclass, e.g. a StrEnum, has a repr of its own)
            child_key = f"[{k!r}]"
        if type(child) is _lazy and child.sharding is None:  # a checkpoint's leaf: all known
            size = _prod(child.shape)
            dtype = child.dtype
            nbytes = size * dtype.itemsize
            named = _names.get(_id(dtype))
            append(_new(_row, (path + child_key, child_key, child_depth, "leaf", "LazyArray",
                               child.shape, named[1] if named is not None and named[0] is dtype
                               else _name(dtype), nbytes, 1, size, 0, None, None,
                               child.quant, None)))
            total_bytes += nbytes
            total_leaves += 1
            total_params += size
        else:  # a dict child directly: one frame per level, as `_walk` (MAX_DEPTH levels)
            b, n, p = (_walk_dict if type(child) is dict else _walk)(
                child, path + child_key, child_key, child_depth, rows)
            total_bytes += b
            total_leaves += n
            total_params += p
    rows[slot] = _new(_row, (path, key, depth, nodes.DICT, "dict", None, None, total_bytes,
                             total_leaves, total_params, len(node), None, None, None, None))
    return total_bytes, total_leaves, total_params


def _sharding_text(leaf) -> str | None:
    from inspector.core.sharding import sharding_text  # imports JAX: only for sharded leaves

    return sharding_text(leaf)
