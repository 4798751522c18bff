"""`timeline(sources)`: how every leaf moved across a run's checkpoints.

Checkpoints are opened lazily (headers only) and read leaf by leaf: for each key path, its
leaf at each step in turn, each reduced against the same leaf a step before, so every
checkpoint is read once and memory holds a few leaves, not two checkpoints. On the CPU,
float32 leaves are reduced by a numba pass on the worker threads (`host_batches.py`,
`host_step.py`: file-mapped leaves of up to three key paths at once, leaves read into memory
two at a time); other dtypes and devices by the device kernel (`step_kernel.py`). The
figures are kept as sums (`sum x^2`, `sum (x_t - x_{t-1})^2`, `<x_{t-1}, x_t>`, ...) so any
subtree's figure is exact from its leaves' (`Timeline.table`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from inspector.core import nodes
from inspector.core.devices import resolve_device
from inspector.core.diff import diff
from inspector.core.errors import InspectorError
from inspector.core.health import step_kernel as sk
from inspector.core.health.host_batches import Batches, mapped
from inspector.core.health.kernels import work_dtype
from inspector.core.health.sources import checkpoint_series, step_number
from inspector.core.leaves import leaf_info
from inspector.core.packed import unpacked

_DIFFS = ThreadPoolExecutor(1, thread_name_prefix="inspector-timeline-diff")

METRICS = ("rel_change", "cosine", "l2", "max_abs", "nonfinite", "changed")
"""What `Timeline.table` can show: ||x_t - x_{t-1}|| / ||x_{t-1}||, cosine(x_{t-1}, x_t),
||x_t||, max |x_t|, NaN + Inf count, fraction of elements that changed (bitwise)."""


class StructureChange(NamedTuple):
    """A key path that appeared, disappeared or changed shape/dtype at step `label` (against
    the step before): `kind` is `extra` (appeared), `missing` (gone), `shape`, `dtype` or
    `type`; `before`/`after` what each step has there."""

    label: object
    path: str
    kind: str
    before: object
    after: object


class TimelineTable(NamedTuple):
    """A `Timeline.table`: `values[i, t]` is row `rows[i]` (a leaf or subtree key path) at
    step `labels[t]` (NaN where the row has no leaf at that step or no figure, e.g.
    `rel_change` at the first step)."""

    metric: str
    rows: list[str]
    labels: list
    values: np.ndarray


@dataclass
class Timeline:
    """Per leaf and step figures of a run (`timeline` builds it).

    Attributes:
        labels: one per step (the step numbers of a folder, or indices).
        paths: every leaf key path seen at any step, in first-seen tree order.
        sums: (n_paths, n_steps) arrays: `sum_sq`, `max_abs`, `nonfinite`, `diff_sq`,
            `prev_sq`, `dot`, `changed`, `now_sq` (sum x_t^2 where both steps are finite),
            `size`, and the masks `present` (the leaf exists at that step) and `paired` (it
            existed the step before with the same shape and dtype).
        changes: the structural changes between neighbouring steps.
        seconds: wall time.
        left_out: the folder's numbered entries not taken as steps: another naming series
            than the run's (`fp8.safetensors` beside `ckpt_#.safetensors`, `sources.
            checkpoint_series`).
    """

    labels: list
    paths: list[str]
    parts: list[tuple[str, ...]]
    sums: dict[str, np.ndarray]
    changes: list[StructureChange] = field(default_factory=list)
    seconds: float = 0.0
    left_out: list[Path] = field(default_factory=list)

    def frozen(self) -> list[str]:
        """The leaves bitwise equal at every step (present at all of them with one shape and
        dtype; needs two steps or more), in order."""
        if len(self.labels) < 2:
            return []
        s = self.sums
        ok = s["paired"][:, 1:].all(axis=1) & (s["changed"][:, 1:] == 0).all(axis=1)
        return [p for p, f in zip(self.paths, ok, strict=True) if f]

    def first_nonfinite(self) -> dict[str, object]:
        """Each leaf that ever holds NaN/Inf -> the label of the first step where it does."""
        bad = self.sums["nonfinite"] > 0
        return {p: self.labels[int(np.argmax(row))]
                for p, row in zip(self.paths, bad, strict=True) if row.any()}

    def structure_changes(self) -> list[StructureChange]:
        """Key paths that appear, disappear or change shape/dtype at a step, step by step
        (`inspector.diff` between neighbouring checkpoints)."""
        return list(self.changes)

    def table(self, metric: str = "rel_change", depth: int | None = None,
              paths: Sequence[str] | None = None) -> TimelineTable:
        """Returns a paths x labels array of `metric` (one of `METRICS`).

        Args:
            metric: `rel_change`, `cosine`, `l2`, `max_abs`, `nonfinite` or `changed`.
            depth: aggregate leaves into their subtrees this many keys deep (`depth=2`:
                `['blocks']['block_0']`); leaves shallower than that stay leaves.
            paths: aggregate into these subtrees instead (key paths; `""` is the root), e.g.
                the rows a folded tree view shows.

        Subtree figures treat their leaves as one vector: norms from summed squares, relative
        change `sqrt(sum ||dx||^2) / sqrt(sum ||x_prev||^2)`, counts summed, max|x| the max.

        Raises:
            ValueError: an unknown metric.
        """
        if metric not in METRICS:
            raise ValueError(f"Unknown timeline metric {metric!r}; choose one of {METRICS}.")
        if paths is not None:
            rows = list(paths)
            members = [np.array([i for i, p in enumerate(self.paths) if _under(p, r)], np.int64)
                       for r in rows]
        elif depth is not None:
            groups: dict[str, list[int]] = {}
            for i, parts in enumerate(self.parts):
                groups.setdefault("".join(parts[:depth]), []).append(i)
            rows = list(groups)
            members = [np.array(m, np.int64) for m in groups.values()]
        else:
            rows = list(self.paths)
            members = [np.array([i]) for i in range(len(rows))]
        values = np.full((len(rows), len(self.labels)), np.nan)
        for r, m in enumerate(members):
            if len(m):
                values[r] = _aggregate(metric, {k: v[m] for k, v in self.sums.items()})
        return TimelineTable(metric, rows, list(self.labels), values)


def _under(path: str, prefix: str) -> bool:
    return path.startswith(prefix) and (len(path) == len(prefix) or path[len(prefix)] in "[.")


def _aggregate(metric: str, s: dict) -> np.ndarray:
    present, paired = s["present"], s["paired"]
    any_present = present.any(axis=0)
    any_paired = paired.any(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        if metric == "l2":
            out = np.sqrt(np.where(present, s["sum_sq"], 0).sum(axis=0))
            return np.where(any_present, out, np.nan)
        if metric == "max_abs":
            out = np.where(present, s["max_abs"], -np.inf).max(axis=0)
            return np.where(any_present, out, np.nan)
        if metric == "nonfinite":
            return np.where(any_present, np.where(present, s["nonfinite"], 0).sum(axis=0),
                            np.nan)
        diff_sq = np.where(paired, s["diff_sq"], 0).sum(axis=0)
        prev_sq = np.where(paired, s["prev_sq"], 0).sum(axis=0)
        if metric == "rel_change":
            out = np.sqrt(diff_sq) / np.sqrt(prev_sq)
            out = np.where((prev_sq == 0) & (diff_sq == 0), 0.0, out)
        elif metric == "cosine":
            now_sq = np.where(paired, s["now_sq"], 0).sum(axis=0)
            dot = np.where(paired, s["dot"], 0).sum(axis=0)
            out = np.clip(dot / np.sqrt(prev_sq * now_sq), -1.0, 1.0)
            out = np.where((prev_sq == 0) & (now_sq == 0), 1.0, out)
        else:  # changed
            out = (np.where(paired, s["changed"], 0).sum(axis=0)
                   / np.where(paired, s["size"], 0).sum(axis=0))
        return np.where(any_paired, out, np.nan)


def _resolve(sources, labels):
    """`(labels, items, left_out)`: each item a tree or a checkpoint path, in step order;
    the folder's entries left out."""
    left_out: list[Path] = []
    if isinstance(sources, str | os.PathLike) and Path(sources).is_dir() \
            and not (Path(sources) / "_METADATA").exists():
        found, left_out = checkpoint_series(sources)
        items = [p for _, p in found]
        default = [s for s, _ in found]
    else:
        # one checkpoint path (a file, an orbax folder) is one source, not its characters
        items = [sources] if isinstance(sources, str | os.PathLike) else list(sources)
        numbers = [step_number(str(x)) if isinstance(x, str | os.PathLike) else None
                   for x in items]
        default = numbers if all(n is not None for n in numbers) and \
            len(set(numbers)) == len(numbers) else list(range(len(items)))
    labels = list(labels) if labels is not None else default
    if len(labels) != len(items):
        raise ValueError(f"timeline: {len(items)} checkpoints but {len(labels)} labels; give "
                         "one label per checkpoint.")
    return labels, items, left_out


def _open(item, load):
    if isinstance(item, str | os.PathLike):
        if load is None:
            raise InspectorError(
                f"{item}: the core timeline reads no files; call inspector.timeline (it opens "
                "checkpoints with inspector.load) or pass load=.")
        return load(item)
    return unpacked(item)


def timeline(sources, labels: Sequence | None = None, device=None,
             progress: Callable[[int, int], None] | None = None, load=None) -> Timeline:
    """Returns the `Timeline` of a run: per leaf and step `l2`, `max_abs`, NaN/Inf count and,
    against the step before, relative change, cosine and bitwise changes.

    Args:
        sources: the checkpoints in step order (trees, packed trees or paths), or a folder of
            them (orbax `CheckpointManager` step folders, or files whose names carry a number:
            ordered by it).
        labels: one per checkpoint (default: the folder's step numbers, else 0, 1, ...).
        device: where the reductions run.
        progress: `progress(done, total)`: leaf reads so far, of all.
        load: opens a checkpoint path as a tree of lazy leaves (`inspector.timeline` passes
            `inspector.load`; the core reads no files itself).

    Raises:
        LoadError: a checkpoint cannot be read (the file is named), or the folder has none.
        ValueError: labels and checkpoints differ in number.

    >>> a, b = {"w": np.ones(4, np.float32)}, {"w": np.full(4, 2.0, np.float32)}
    >>> t = timeline([a, b, b])
    >>> t.table("rel_change").values.tolist(), t.frozen()
    ([[nan, 1.0, 0.0]], [])
    """
    begin = time.perf_counter()
    device = resolve_device(device)
    labels, items, left_out = _resolve(sources, labels)
    trees = [_open(item, load) for item in items]
    # the structural diffs (pure Python) run beside the reductions, in the waits for them
    changes = _DIFFS.submit(_changes, trees, labels)
    flats = []
    order: dict[str, tuple[str, ...]] = {}
    named: dict[tuple, tuple[str, tuple[str, ...]]] = {}  # key path -> its text, once a run
    for tree in trees:
        flat, _ = nodes.flatten(tree, with_path=True)
        leaves = {}
        for key, leaf in flat:
            # the key types too: dict keys 1, 1.0 and True are equal but print differently
            sig = (key, tuple(type(getattr(k, "key", None)) for k in key))
            found = named.get(sig)
            if found is None:
                parts = tuple(jax.tree_util.keystr((k,)) for k in key)
                found = named[sig] = ("".join(parts), parts)
            order.setdefault(*found)
            leaves[found[0]] = leaf
        flats.append(leaves)
    paths = list(order)
    n, steps = len(paths), len(trees)
    names = ("sum_sq", "max_abs", "nonfinite", "diff_sq", "prev_sq", "dot", "changed", "now_sq",
             "size")
    sums = {k: np.full((n, steps), np.nan) for k in names}
    sums["present"] = np.zeros((n, steps), bool)
    sums["paired"] = np.zeros((n, steps), bool)
    state = [0, sum(len(f) for f in flats), None]
    on_host = device.platform == "cpu"
    batches = Batches(lambda *a: _record(sums, *a), device)
    for i, path in enumerate(paths):
        _path(sums, i, path, flats, batches, device, on_host, state, progress)
    batches.drain()
    if state[2] is not None:
        _resolve_pending(sums, *state[2])
    return Timeline(labels, paths, [order[p] for p in paths], sums, changes.result(),
                    time.perf_counter() - begin, left_out)


def _path(sums, i, path, flats, batches, device, on_host, state, progress):
    """Reduces key path `i`'s leaf at every step (float32 leaves on the CPU by `batches`, on
    the worker threads, while the next path is read).
    `state`: `[leaf reads done, of all, the last dispatched device kernel]` (that kernel's
    figures are fetched after the next leaf is read)."""
    done, total, pending = state
    prev = prev_info = None
    batch: list = []  # this path's float32 leaves on the host: [t, leaf, paired, recorded]
    for t, leaves in enumerate(flats):
        leaf = leaves.get(path)
        info = leaf_info(leaf) if leaf is not None else None
        work = work_dtype(info[1]) if info is not None and info[0] is not None else None
        if work is None:
            prev = prev_info = None
            if leaf is not None:
                done += 1
            continue
        done += 1
        paired = prev is not None and prev_info[:2] == info[:2]
        size = math.prod(info[0])
        if on_host and np.dtype(info[1]) == np.float32 and size:
            # float32 on the CPU: reduced by one numba pass where the leaves lie, all steps of
            # this key path chunk by chunk (host_step.py)
            x = batches.leaf(leaf)
            if not paired:
                batches.submit(i, batch)
                batch = []
            batch.append([t, x, paired, False])
            if not mapped(x) and len(batch) > 1:
                # read into memory (not a file's map): keep two such leaves at most
                batches.submit(i, batch)
                batch = [batch[-1]]
        else:
            # reading this leaf overlaps the kernel dispatched for the one before (JAX
            # runs it asynchronously); its figures are fetched only after the read
            x = jax.device_put(np.asarray(leaf) if not isinstance(leaf, jax.Array)
                               else leaf, device)
            if pending is not None:
                _resolve_pending(sums, *pending)
                pending = None
            pair = (prev if paired else x, x)
            result = sk.step_kernel(size, info[1], work)(*pair) if size else None
            pending = (i, t, result, pair, size, info[1], work, paired)
        prev, prev_info = x, info
        if progress is not None:
            progress(done, total)
    batches.submit(i, batch)
    state[:] = done, total, pending


def _resolve_pending(sums, i, t, result, pair, size, dtype, work, paired):
    """Fetches a dispatched step kernel's figures (reduced again by the careful kernel when
    they are not finite: NaN/Inf in a leaf) and records them."""
    figures = np.zeros(sk.N_FIGURES)
    if size:
        figures = np.asarray(result, np.float64)
        if not np.isfinite(figures).all():  # NaN/Inf in a leaf: tell them apart
            figures = np.asarray(sk.careful_kernel(size, dtype, work)(*pair), np.float64)
    _record(sums, i, t, figures, size, paired)


def _record(sums, i, t, figures, size, paired):
    sums["present"][i, t] = True
    sums["paired"][i, t] = paired
    sums["size"][i, t] = size
    for name, col in (("sum_sq", sk.SUM_SQ), ("max_abs", sk.MAX_ABS),
                      ("nonfinite", sk.NONFINITE)):
        sums[name][i, t] = figures[col]
    if paired:
        for name, col in (("diff_sq", sk.DIFF_SQ), ("prev_sq", sk.PREV_SQ), ("dot", sk.DOT),
                          ("changed", sk.CHANGED), ("now_sq", sk.NOW_SQ)):
            sums[name][i, t] = figures[col]


def _changes(trees, labels) -> list[StructureChange]:
    out = []
    for t in range(1, len(trees)):
        for d in diff(trees[t - 1], trees[t]):
            if d.kind != "value":
                out.append(StructureChange(labels[t], d.path, d.kind, d.a, d.b))
    return out
