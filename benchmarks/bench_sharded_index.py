"""Opening a sharded safetensors checkpoint in the app: `load` of its index, then `file_info`.

Writes a checkpoint of `--tensors` small tensors over four shards (the safetensors library)
and an index, then times, `--repeats` times each with every cache emptied first:

- `load(index)`: the index, each shard's header, the lazy tree;
- `file_info(index)` right after: the index's metadata and its problems (the shard headers
  read by `load` are reused: a local shard unchanged in size and modification time);
- `file_info(index)` alone (caches emptied): what it costs with no `load` before it.

    .venv/bin/python benchmarks/bench_sharded_index.py            # 100,000 tensors
    .venv/bin/python benchmarks/bench_sharded_index.py --tensors 20000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

import inspector


def write(folder: Path, tensors: int) -> Path:
    weight_map = {}
    per_shard = tensors // 4
    for s in range(4):
        names = {f"model.layers.{s}.{i}.weight": np.zeros(4, np.float32)
                 for i in range(per_shard)}
        save_file(names, str(folder / f"model-{s + 1:05d}-of-00004.safetensors"))
        weight_map.update({n: f"model-{s + 1:05d}-of-00004.safetensors" for n in names})
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 16 * tensors},
                                 "weight_map": weight_map}))
    return index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        index = write(Path(tmp), args.tensors)
        times: dict[str, list[float]] = {"load": [], "file_info after load": [],
                                          "file_info alone": []}
        for _ in range(args.repeats):
            inspector.clear_caches()
            start = time.perf_counter()
            inspector.load(index)
            loaded = time.perf_counter()
            info = inspector.file_info(index)
            times["load"].append(loaded - start)
            times["file_info after load"].append(time.perf_counter() - loaded)
            inspector.clear_caches()
            start = time.perf_counter()
            inspector.file_info(index)
            times["file_info alone"].append(time.perf_counter() - start)
        assert info.problems == () and info.metadata == {"total_size": 16 * args.tensors}
        print(f"{args.tensors:,} tensors in 4 shards, median (min-max) of {args.repeats}:")
        for what, seconds in times.items():
            print(f"  {what:22s} {statistics.median(seconds):.3f} s "
                  f"({min(seconds):.3f}-{max(seconds):.3f})")


if __name__ == "__main__":
    main()
