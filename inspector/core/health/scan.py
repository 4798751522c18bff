"""`scan(tree)`: every leaf's NaN/Inf/zero counts, range, moments and norms, in one pass.

A packed tree is scanned per dtype buffer: on the CPU, float32 and 16-bit float buffers where
they lie, by one numba pass (`host_scan.py`, `scan_loops.py`: segments cut at leaf and chunk
boundaries, two threads); elsewhere
with one kernel per dtype over the flat buffer (`kernels.py`: rows of a fixed length, reduced
once; `layout_rows.py`: which rows and masked pieces make each leaf). Plain and lazy trees are
gathered a chunk at a time into such buffers, lazy leaves read one at a time, so a checkpoint
larger than memory is scanned holding a chunk; quantized groups are scanned as their
dequantized values (`quantized.py`). Partials are combined per leaf (and per subtree) on the
host in float64 (`partials.py`)."""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import jax
import numpy as np

from inspector.core import nodes
from inspector.core.devices import resolve_device
from inspector.core.health import host_scan, kernels
from inspector.core.health.aggregate import columns, combine
from inspector.core.health.kernels import N_FIGURES, buffer_kernel, pieces_kernel, work_dtype
from inspector.core.health.layout_rows import block_for, leaf_order, leaf_rows
from inspector.core.health.leaf_stats import LeafStats, LeafTable
from inspector.core.health.partials import leaf_figures
from inspector.core.health.quantized import dequantized_view, has_groups
from inspector.core.lazy import read_ahead
from inspector.core.leaves import leaf_info
from inspector.core.packed import PackedTree, plan_layout
from inspector.core.validate import key_paths

_CHUNK_BYTES = 64 << 20  # plain trees are scanned this many bytes of leaves at a time


@dataclass(frozen=True)
class Scan:
    """The result of `scan`: `leaves` (one `LeafStats` per scanned leaf, in describe order: a
    `LeafTable`, which builds each `LeafStats` when it is read), `skipped` (key paths of leaves
    that are not numeric arrays: strings, complex, opaque), `seconds` (wall time of the scan)."""

    leaves: Sequence[LeafStats]
    skipped: tuple[str, ...] = ()
    seconds: float = 0.0
    _by_path: dict = field(default_factory=dict, repr=False, compare=False)
    _ranges: dict = field(default_factory=dict, repr=False, compare=False)
    _columns: dict = field(default_factory=dict, repr=False, compare=False)

    def _paths(self) -> list[str]:
        if isinstance(self.leaves, LeafTable):
            return self.leaves.paths
        return [s.path for s in self.leaves]

    def _cols(self) -> dict:
        if not self._columns:
            self._columns.update(self.leaves.columns if isinstance(self.leaves, LeafTable)
                                 else columns(self.leaves))
        return self._columns

    def leaf(self, path: str) -> LeafStats:
        """The figures of the leaf at key path `path`.

        Raises:
            KeyError: no scanned leaf has that path.
        """
        if not self._by_path:  # built on the first call (100k leaves: ~10 ms)
            self._by_path.update(zip(self._paths(), range(len(self.leaves)), strict=True))
        return self.leaves[self._by_path[path]]

    def nonfinite(self) -> list[LeafStats]:
        """The leaves holding any NaN or Inf, in tree order."""
        c = self._cols()
        bad = np.flatnonzero((c["nan"] + c["posinf"] + c["neginf"]) > 0) if len(self.leaves) \
            else []
        return [self.leaves[int(i)] for i in bad]

    def subtree(self, path: str) -> LeafStats:
        """The figures of every scanned leaf under `path` taken as one vector (counts summed,
        norms combined, min/max over all, mean/std from combined partials); `""` is the root.

        Raises:
            KeyError: no scanned leaf lies under `path`.

        >>> s = scan({"a": {"x": np.ones(3, np.float32), "y": np.zeros(1, np.float32)}})
        >>> t = s.subtree("['a']")
        >>> t.size, t.zeros, t.mean, round(t.l2 ** 2, 6)
        (4, 1, 0.75, 3.0)
        """
        if not self._ranges:
            self._ranges.update(_subtree_ranges(self._paths()))
        found = self._ranges.get(path)
        if found is None:
            raise KeyError(f"No scanned leaf lies under {path!r}.")
        return combine(path, self._cols(), *found)


_KEY = re.compile(r"""\['(?:[^'\\]|\\.)*'\]|\["(?:[^"\\]|\\.)*"\]|\[[^\]]*\]|\.[^.\[]+""")


def _subtree_ranges(paths: list[str]) -> dict[str, list[int]]:
    """Every inner node's key path -> `[first, end)` of its leaves among `paths` (in
    flattening order a subtree's leaves are contiguous), built once per scan: colouring a
    100k-leaf tree asks for a subtree per row shown."""
    ranges: dict[str, list[int]] = {}
    for i, path in enumerate(paths):
        ends = [0] + [m.end() for m in _KEY.finditer(path)]
        for end in ends:
            ranges.setdefault(path[:end], [i, i + 1])[1] = i + 1
    return ranges


def scan(tree, device=None, progress: Callable[[int, int], None] | None = None) -> Scan:
    """Returns the figures of every leaf of `tree` (`Scan.leaves`, in describe order).

    Args:
        tree: any pytree, a `PackedTree` (one kernel per dtype) or a loaded checkpoint (lazy
            leaves, read one at a time).
        device: where to reduce (a `jax.Device` or a name like `"cpu:0"`; default: JAX's).
        progress: called as `progress(done, total)` (leaves) as the scan goes.

    Raises:
        InspectorError: no device of that name.

    >>> s = scan({"w": np.array([1.0, np.nan, -3.0, 0.0], np.float32)})
    >>> w = s.leaves[0]
    >>> w.path, w.nan, w.zeros, w.min, w.max, w.max_abs
    ("['w']", 1, 1, -3.0, 1.0, 3.0)
    """
    start_time = time.perf_counter()
    device = resolve_device(device)
    if isinstance(tree, PackedTree) and not tree.layout.lead and not has_groups(tree):
        leaves, skipped = _scan_packed(tree, device)
    else:
        if isinstance(tree, PackedTree):
            tree = tree.unpack()
        # quantized weights scanned as their values, one group at a time (quantized.py)
        leaves, skipped = _scan_plain(dequantized_view(tree), device, progress)
    if progress is not None:
        progress(len(leaves) + len(skipped), len(leaves) + len(skipped))
    return Scan(leaves, tuple(skipped), time.perf_counter() - start_time)


_PATHS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_GROUPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _layout_paths(layout) -> list[str]:
    """The key paths of a packed layout's leaves, computed once per layout (layouts are
    interned: every tree of one structure shares them)."""
    found = _PATHS.get(layout)
    if found is None:
        found = _PATHS[layout] = key_paths(layout.structure)
    return found


def _layout_groups(layout) -> dict:
    """Per dtype group of a layout: its members (slot positions), their offsets and sizes,
    computed once per layout (a loop over 100k slots costs more than the scan's kernel)."""
    found = _GROUPS.get(layout)
    if found is None:
        slots = layout.slots
        group = np.array([s.group for s in slots], object)
        offsets = np.array([s.offset for s in slots], np.int64)
        sizes = np.array([s.size for s in slots], np.int64)
        found = {"dtypes": [s.dtype for s in slots], "shapes": [s.shape for s in slots],
                 "sizes": sizes, "groups": {}}
        for g in layout.group_dtypes:
            members = np.flatnonzero(group == g)
            found["groups"][g] = (members, offsets[members], sizes[members])
        _GROUPS[layout] = found
    return found


@lru_cache(maxsize=64)
def _buffer_jit(size: int, block: int, n_pieces: int, work: str, one_pass: str = ""):
    return jax.jit(buffer_kernel(size, block, n_pieces, work, one_pass))


def _scan_packed(tree: PackedTree, device, paths=None):
    """Returns `(LeafTable of the scanned leaves, skipped key paths)` of a packed tree."""
    layout = tree.layout
    paths = _layout_paths(layout) if paths is None else paths
    info = _layout_groups(layout)
    n_slots = len(layout.slots)
    cols = {k: np.zeros(n_slots) for k in ("nan", "posinf", "neginf", "zeros", "min", "max",
                                            "mean", "std", "l2", "max_abs")}
    scanned = np.zeros(n_slots, bool)
    for group, buffer in tree.buffers.items():
        members, offsets, sizes = info["groups"][group]
        work = work_dtype(layout.group_dtypes[group])
        if work is None:
            continue
        size = int(buffer.size)
        if _on_host(buffer, work, device):
            points, start, stop = _host_segments(info, group, size)
            rows = host_scan.host_rows(np.asarray(buffer).reshape(-1), points)
            figures = host_scan.host_figures(rows, start, stop)
            if len(members) == n_slots:  # one group holds every leaf, in order
                cols.update({k: figures[k] for k in cols})
            else:
                for k, col in cols.items():
                    col[members] = figures[k]
            scanned[members] = True
            continue
        one_pass = kernels.ONE_PASS_FORM if _one_pass(device) else ""
        block = block_for(layout.sizes[group], len(members), bool(one_pass),
                          device.platform != "cpu")
        start, stop, row, lo, hi, pieces = _leaf_rows(info, group, size, block)
        rows, n_grid = np.zeros((0, N_FIGURES)), 0
        if size:
            # piece lists padded to a power of two with empty pieces: trees of one buffer size
            # and similar layouts share a kernel
            n_pieces = _bucket(len(row), 16)
            row, lo, hi = (np.pad(v, (0, n_pieces - len(v))) for v in (row, lo, hi))
            kernel = _buffer_jit(size, block, n_pieces, work, one_pass)
            x = buffer if isinstance(buffer, jax.Array) and device in buffer.devices() \
                else jax.device_put(buffer, device)
            grid, piece_rows = jax.device_get(kernel(x, *jax.device_put((row, lo, hi), device)))
            grid = np.asarray(grid) if one_pass == "variadic" else \
                _careful_again(np.asarray(grid), x, size, block, work, device)
            rows, n_grid = np.concatenate([grid, np.asarray(piece_rows)]), len(grid)
        n_rows = np.count_nonzero(pieces >= 0) + np.sum(stop - start)  # the leaves' rows
        if n_rows < 2 * len(members):  # most leaves one row: each leaf's rows one after the
            # other, in float64 (the kernel's are float32), one-row leaves straight from their
            # row (100k leaves of ~270 elements, rows of 2048: 14-32 ms here, against
            # 136-159 ms of reductions over rows of 32)
            order, is_piece, first, end = _leaf_order(info, group, size, block)
            rows = np.asarray(rows[order + is_piece * n_grid], np.float64, order="F")
            figures = host_scan.host_figures(rows, first, end)
        else:  # leaves of many rows (short rows): reduced where they lie (the order's gather
            # of 940k rows cost more than the reductions: 364 against 136 ms)
            figures = leaf_figures(rows, start, stop, np.where(pieces >= 0, pieces + n_grid, -1))
        for k, col in cols.items():
            col[members] = figures[k]
        scanned[members] = True
    if "dtype_column" not in info:
        info["dtype_column"] = np.fromiter(info["dtypes"], object, len(info["dtypes"]))
    table = LeafTable(paths, info["dtypes"], info["shapes"], info["sizes"], cols,
                      info["dtype_column"])
    if scanned.all():
        return table, []
    return table.select(np.flatnonzero(scanned)), [p for p, ok in zip(paths, scanned.tolist(),
                                                                      strict=True) if not ok]


def _one_pass(device) -> bool:
    """Whether whole rows are reduced in one fused kernel (accelerators: `kernels.py`)."""
    return device.platform != "cpu"


def _on_host(buffer, work: str, device) -> bool:
    """Whether a buffer is reduced where it lies on the host (`host_scan.py`): float32 (or
    16-bit floats) on the CPU, scanned on the CPU."""
    if work != "float32" or device.platform != "cpu" or \
            np.dtype(buffer.dtype).name not in host_scan.HOST_DTYPES:
        return False
    return not isinstance(buffer, jax.Array) or all(d.platform == "cpu" for d in buffer.devices())


def _host_segments(info: dict, group, size: int):
    """`host_scan.segments` of one dtype group, computed once per layout and buffer size."""
    cache = info.setdefault("host", {})
    key = (group, size, host_scan.CHUNK)
    found = cache.get(key)
    if found is None:
        _, offsets, sizes = info["groups"][group]
        found = cache[key] = host_scan.segments(offsets, sizes, size)
    return found


def _leaf_rows(info: dict, group, size: int, block: int):
    """`leaf_rows` of one dtype group, computed once per layout, buffer size and row length
    (10-30 ms at 100k leaves: more than an accelerator's kernel)."""
    cache = info.setdefault("rows", {})
    key = (group, size, block)
    found = cache.get(key)
    if found is None:
        _, offsets, sizes = info["groups"][group]
        found = cache[key] = leaf_rows(offsets, sizes, size, block)
    return found


def _leaf_order(info: dict, group, size: int, block: int):
    """`leaf_order` of `_leaf_rows`, computed once per layout, buffer size and row length, and
    only where it is used (layouts of mostly one-row leaves)."""
    cache = info.setdefault("order", {})
    key = (group, size, block)
    found = cache.get(key)
    if found is None:
        start, stop, _, _, _, pieces = _leaf_rows(info, group, size, block)
        found = cache[key] = leaf_order(start, stop, pieces)
    return found


@lru_cache(maxsize=64)
def _pieces_jit(size: int, block: int, work: str):
    return jax.jit(pieces_kernel(size, block, work))


def _careful_again(grid: np.ndarray, x, size: int, block: int, work: str, device):
    """`grid` with its rows whose fast figures are not finite (NaN or Inf in them) replaced by
    their careful figures (one more kernel call, only when there are such rows)."""
    bad = np.flatnonzero(~np.isfinite(grid[:, 2]) | ~np.isfinite(grid[:, 3]))
    if not bad.size:
        return grid
    n = _bucket(len(bad), 16)
    rows = np.pad(bad.astype(np.int32), (0, n - len(bad)))
    lo = np.zeros(n, np.int32)
    hi = np.where(np.arange(n) < len(bad), block, 0).astype(np.int32)
    again = jax.device_get(_pieces_jit(size, block, work)(
        x, *jax.device_put((rows, lo, hi), device)))
    grid = np.array(grid)  # a writable copy, only when rows are replaced
    grid[bad] = np.asarray(again)[:len(bad)]
    return grid


def _bucket(n: int, least: int) -> int:
    """The power of two >= max(n, least)."""
    return 1 << max(int(n) - 1, least - 1).bit_length()


def _scan_plain(tree, device, progress):
    """Leaves gathered a chunk at a time (at most `_CHUNK_BYTES`, or one bigger leaf) into one
    host buffer per dtype whose length is rounded up to a power of two, each chunk scanned as a
    packed tree: one kernel per dtype and buffer size however many leaf shapes there are, lazy
    leaves read one at a time straight into the chunk, memory bounded by a chunk."""
    flat, _ = nodes.flatten(tree, with_path=True)
    todo, skipped = [], []
    for key, leaf in flat:
        path = jax.tree_util.keystr(key)
        shape, dtype, nbytes, _ = leaf_info(leaf)
        work = None if shape is None else work_dtype(dtype)
        if work is None or not getattr(leaf, "is_fully_addressable", True):
            skipped.append(path)
            continue
        todo.append((path, leaf, nbytes))
    out: list[LeafTable] = []
    done = 0
    total = len(flat)
    for chunk in _chunks(todo):
        layout, leaves = plan_layout([leaf for _, leaf, _ in chunk])
        # device buffers rounded up to a power of two (kernels shared between chunks); host
        # buffers exact (nothing to compile, and no padding to reduce)
        buffers = {g: np.zeros(n if _on_host(np.zeros(0, np.dtype(g)), work_dtype(g), device)
                               else _bucket(n, 1 << 16), np.dtype(g))
                   for g, n in layout.sizes.items()}
        for value, slot in zip(read_ahead(leaves), layout.slots, strict=True):
            buffers[slot.group][slot.offset:slot.offset + slot.size] = \
                np.asarray(value).reshape(-1)
            del value
        stats, _ = _scan_packed(PackedTree(layout, buffers), device, [p for p, _, _ in chunk])
        out.append(stats)
        done += len(stats)
        if progress is not None:
            progress(done + len(skipped), total)
    empty = LeafTable([], [], [], [], {k: [] for k in ("nan", "posinf", "neginf", "zeros",
                                                       "min", "max", "mean", "std", "l2",
                                                       "max_abs")})
    return LeafTable.concat(out) if out else empty, skipped


def _chunks(todo):
    chunk, nbytes = [], 0
    for item in todo:
        if chunk and nbytes + item[2] > _CHUNK_BYTES:
            yield chunk
            chunk, nbytes = [], 0
        chunk.append(item)
        nbytes += item[2]
    if chunk:
        yield chunk
