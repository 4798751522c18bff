"""Sharded safetensors checkpoints (`*.safetensors.index.json`): checked against their shards.

A Hugging Face index maps each tensor name to the shard file holding it. Real folders drift
from their index: a shard missing after an interrupted download, a leftover shard of another
export (a 4-bit conversion beside the bf16 one), a tensor written to two shards, or a shard
that holds tensors the index never mentions. `check_index` lists every such problem from the
shards' headers alone (no tensor data is read); `load_index` loads the tensors the index and
the shards agree on, so one bad shard does not hide the rest, and the app shows the problems.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from inspector.core import caches
from inspector.core.errors import InspectorError, bullet_list
from inspector.core.gc_pause import gc_paused
from inspector.io import nesting
from inspector.io.file_error import file_error
from inspector.io.limits import confined
from inspector.io.locate import locate
from inspector.io.location import LocalFile, Location
from inspector.io.safetensors_format import lazy_leaf
from inspector.io.safetensors_header import TensorEntry, read_header, read_json

KINDS = ("missing_file", "damaged_file", "missing_tensor", "stray_tensor", "duplicate",
         "stray_file", "dtype_mix")  # fmt: skip
"""Every `IndexProblem.kind`, in the order `check_index` lists them."""

CHECKPOINT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf")
"""Files beside an index that are checkpoints it should name (else a `stray_file`)."""


@dataclass(frozen=True)
class IndexProblem:
    """One way a sharded checkpoint disagrees with its index.

    Attributes:
        kind: one of `KINDS`: `missing_file` (a shard the index names is absent),
            `damaged_file` (a shard's header is unreadable), `missing_tensor` (the index maps
            a tensor to a shard that does not hold it), `stray_tensor` (a shard holds a tensor
            the index does not map to it), `duplicate` (a tensor held by two shards or more),
            `stray_file` (a checkpoint file beside the index that it never names), `dtype_mix`
            (a shard whose main dtype differs from the checkpoint's wide-float one: a leftover
            of a quantized or other-precision export? A quantized checkpoint's wide-float
            shards, an FP8 model's bf16 embeddings, are not flagged).
        path: the tensor's name (`model.layers.0.mlp.up_proj.weight`) or the shard's file name.
        detail: what is wrong, in words.
    """

    kind: str
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}: {self.detail}"


@dataclass
class _Survey:
    index: Location
    weight_map: dict[str, str]
    metadata: dict  # the index's `metadata` object ({} when it has none)
    shards: dict[str, Location]
    results: dict[str, dict[str, TensorEntry] | IndexProblem]  # per shard: header, or why not

    @cached_property
    def headers(self) -> dict[str, dict[str, TensorEntry]]:
        """The headers of the shards that could be read."""
        return {n: r for n, r in self.results.items() if isinstance(r, dict)}

    @cached_property
    def problems(self) -> list[IndexProblem]:
        """Every problem, by kind then name (worked out when asked: `load_index` needs none
        unless nothing loads)."""
        problems = [r for r in self.results.values() if isinstance(r, IndexProblem)]
        problems += _tensor_problems(self.weight_map, self.headers)
        problems += _stray_files(self.index, set(self.shards))
        problems += _dtype_mix(self.headers)
        order = {kind: i for i, kind in enumerate(KINDS)}
        problems.sort(key=lambda p: (order[p.kind], p.path))
        return problems


def check_index(path: str | os.PathLike | Location) -> list[IndexProblem]:
    """Returns every disagreement between a sharded checkpoint's index and its shards.

    Reads the index and each shard's header (no tensor data). Files beside the index are
    listed only for a local index (`stray_file`).

    Args:
        path: a `*.safetensors.index.json` file.

    Returns:
        The problems, by kind (see `KINDS`) then name; empty when all agree.

    Raises:
        LoadError: the index itself is unreadable (not JSON, no `weight_map`) or names a
            shard outside its folder.

    >>> import json, tempfile, numpy as np, inspector
    >>> folder = tempfile.mkdtemp()
    >>> _ = inspector.save({"a": np.ones(2, np.float32)}, f"{folder}/s1.safetensors")
    >>> with open(f"{folder}/model.safetensors.index.json", "w") as f:
    ...     json.dump({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}, f)
    >>> for problem in check_index(f"{folder}/model.safetensors.index.json"):
    ...     print(problem.kind, problem.path)
    missing_file s2.safetensors
    """
    return _survey(locate(path)).problems


def index_facts(path: str | os.PathLike | Location) -> tuple[dict, list[IndexProblem]]:
    """Returns `(the index's metadata object, check_index's problems)` from one read of the
    index (`file_info` shows both)."""
    survey = _survey(locate(path))
    return survey.metadata, survey.problems


def load_index(path: str | os.PathLike | Location) -> dict:
    """Returns the tensors of a sharded checkpoint (`*.safetensors.index.json`) as one tree.

    Every tensor the index maps to a shard that holds it is loaded (lazily: headers only);
    tensors of missing or damaged shards, and tensors a shard lacks, are left out
    (`check_index` lists them, and the app shows them above the tree).

    Raises:
        LoadError: the index is unreadable, names a shard outside its folder (or `root`), or
            no tensor at all can be loaded (every problem is listed).
    """
    with gc_paused():  # 100k tensors make ~1M objects: no collector passes over them meanwhile
        survey = _survey(locate(path))
        prefixes = {shard: f"{location}:" for shard, location in survey.shards.items()}
        pairs = [
            (name, lazy_leaf(survey.shards[shard], survey.headers[shard][name], prefixes[shard]))
            for name, shard in survey.weight_map.items()
            if name in survey.headers.get(shard, {})
        ]
        if not pairs and survey.weight_map:
            raise file_error(
                survey.index,
                "no tensor of its weight_map can be loaded",
                "Download the shards the index names next to it.",
                details=bullet_list(str(p) for p in survey.problems),
            )
        return nesting.unflatten(pairs, survey.index)


_LAST: dict[tuple, dict] = {}  # the shard headers last read: {(index, shards as found): ...}
_LAST_LOCK = threading.Lock()
caches.register_mapping("sharded index headers", _LAST, _LAST_LOCK)


def _survey(index: Location) -> _Survey:
    """The index and its shards' headers, and every problem found. Opening a checkpoint
    (`load_index`) and then its file facts (`file_info`: `check_index`) read the shard headers
    once: for a local index, the headers last read are reused while the index names the same
    shards and each still has the size and modification time it had (a remote checkpoint's
    shards are read each time: telling whether they changed costs what reading does)."""
    weight_map, metadata = _read_index(index)
    names = list(dict.fromkeys(weight_map.values()))
    shards = {name: _shard_location(index, name) for name in names}
    key = None
    if index.local_path is not None:
        key = (str(index), tuple((name, _stamp(shards[name])) for name in names))
    with _LAST_LOCK:
        results = _LAST.get(key) if key is not None else None
    if results is None:
        results = _read_headers(index, names, shards)
        if key is not None:
            with _LAST_LOCK:
                _LAST.clear()
                _LAST[key] = results
    return _Survey(index, weight_map, metadata, shards, results)


def _stamp(shard: Location) -> tuple | None:
    """A local shard's (size, modification time in ns), or None where it is absent."""
    try:
        st = os.stat(shard.local_path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _read_headers(index: Location, names: list[str], shards: dict[str, Location]) -> dict:
    """Each shard's header as {tensor name: entry}, or the `IndexProblem` why it has none."""

    def header(name: str):
        shard = shards[name]
        if not shard.exists() or shard.is_dir():
            return IndexProblem(
                "missing_file", name, "the index names it, but it is not beside the index"
            )
        try:
            return {entry.name: entry for entry in read_header(shard)}
        except InspectorError as exc:
            return IndexProblem("damaged_file", name, str(exc).split("\n")[0])

    # remote shards' headers are fetched concurrently (local ones cost microseconds each)
    with ThreadPoolExecutor(max_workers=1 if index.local_path else 8) as pool:
        return dict(zip(names, pool.map(header, names), strict=True))


def _read_index(index: Location) -> tuple[dict[str, str], dict]:
    """The index's weight_map and its metadata object ({} when it has none)."""
    content = read_json(index, index.size(), "the index")
    weight_map = content.get("weight_map") if isinstance(content, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise file_error(
            index,
            "the index has no 'weight_map' object of tensor name -> shard file name",
            "Pass a Hugging Face style *.safetensors.index.json, or one of its shards.",
        )
    metadata = content.get("metadata")
    return weight_map, metadata if isinstance(metadata, dict) else {}


def _shard_location(index: Location, shard: str) -> Location:
    if index.local_path is not None:
        return LocalFile(confined(shard, index.local_path.parent, index, f"shard {shard!r}"))
    if Path(shard).is_absolute() or ".." in Path(shard).parts:
        raise file_error(
            index, f"shard {shard!r} is outside the index's folder", "Fix the weight_map."
        )
    return index.sibling(shard)


def _tensor_problems(weight_map, headers) -> list[IndexProblem]:
    problems = []
    holders: dict[str, list[str]] = {}
    for shard, entries in headers.items():
        for name in entries:
            holders.setdefault(name, []).append(shard)
    for name, shard in weight_map.items():
        if shard in headers and name not in headers[shard]:
            elsewhere = holders.get(name)
            where = f"; it is in {', '.join(elsewhere)}" if elsewhere else ""
            problems.append(
                IndexProblem(
                    "missing_tensor",
                    name,
                    f"the index maps it to {shard}, which does not hold it{where}",
                )
            )
    for name, shards in holders.items():
        if len(shards) > 1:
            mapped = weight_map.get(name)
            said = f"; the index names {mapped}" if mapped else "; the index does not name it"
            problems.append(
                IndexProblem(
                    "duplicate", name, f"held by {len(shards)} shards: {', '.join(shards)}{said}"
                )
            )
        elif weight_map.get(name) != shards[0]:
            mapped = weight_map.get(name)
            said = f"maps it to {mapped}" if mapped else "does not name it"
            problems.append(
                IndexProblem("stray_tensor", name, f"{shards[0]} holds it, but the index {said}")
            )
    return problems


def _stray_files(index: Location, named: set[str]) -> list[IndexProblem]:
    folder = index.local_path.parent if index.local_path is not None else None
    if folder is None:
        return []
    named_paths = {os.path.normpath(n) for n in named}
    return [
        IndexProblem(
            "stray_file",
            child.name,
            "a checkpoint file beside the index that its "
            "weight_map never names (a leftover of another export?)",
        )
        for child in sorted(folder.iterdir())
        if child.name.endswith(CHECKPOINT_SUFFIXES)
        and child.is_file()
        and child.name not in named_paths
    ]


def _is_codes(dtype: str) -> bool:
    """Whether a dtype holds quantized codes (float8, packed integers) rather than weights."""
    return dtype.startswith(("float8", "float4", "float6", "uint", "int")) or dtype == "bool"


def _dtype_mix(headers: dict[str, dict[str, TensorEntry]]) -> list[IndexProblem]:
    per_shard: dict[str, Counter] = {}
    overall: Counter = Counter()
    for shard, entries in headers.items():
        by_dtype: Counter = Counter()  # keyed by the dtype itself: its name costs microseconds
        for entry in entries.values():
            by_dtype[entry.dtype] += entry.nbytes // max(1, entry.dtype.itemsize)
        counts = Counter()
        for dtype, n in by_dtype.items():
            counts[dtype.name] += n
        per_shard[shard] = counts
        overall += counts
    if len(per_shard) < 2 or not overall:
        return []
    main, _ = overall.most_common(1)[0]
    problems = []
    for shard, counts in per_shard.items():
        if not counts:
            continue
        own, n = counts.most_common(1)[0]
        if own != main and not _is_codes(main):
            problems.append(
                IndexProblem(
                    "dtype_mix",
                    shard,
                    f"holds mostly {own} ({n:,} values) while the checkpoint is mostly {main}: "
                    f"a leftover of another export (e.g. a quantized one)?",
                )
            )
    return problems
