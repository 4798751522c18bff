"""Structure of a 106,453-tensor safetensors file in one process, CPU time: the one-pass tree
(`io.safetensors_tree.load_tree`, gc paused as `load` pauses it) now and at git revision REV
(its `safetensors_tree.py` loaded beside the current one), against `json.loads` of the header
read from the file, alternated; then `describe` of the loaded tree.

    PYTHONPATH=. python benchmarks/bench_structure.py [--compare REV] [--rounds 10]
        [--dir /tmp/bench_io]

CPU time in one process is steadier than `bench_io.py --only structure` (a fresh process per
figure, wall time) on a busy machine, but it is not that target's measure: both are reported
in docs/quant-speed.md. The file is `bench_io.many_tensors`' (written once if absent).
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_io import many_tensors  # noqa: E402
from revisions import module_at  # noqa: E402

import inspector  # noqa: E402
from inspector.core.gc_pause import gc_paused  # noqa: E402
from inspector.io import safetensors_header, safetensors_tree  # noqa: E402
from inspector.io.locate import locate  # noqa: E402


def at_revision(rev: str):
    """`inspector/io/safetensors_tree.py` as it was at git revision `rev`, as a module."""
    return module_at(rev, "inspector/io/safetensors_tree.py", "safetensors_tree_previous")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--compare", metavar="REV")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--dir", default="/tmp/bench_io")
    args = p.parse_args()
    path = Path(args.dir) / "many-106453.safetensors"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        many_tensors(path)

    def tree_of(module):
        def run():
            location = locate(path)
            with gc_paused():
                return module.load_tree(location, safetensors_header.header_bytes(location))
        return run

    def json_floor():
        with open(path, "rb") as f:
            return json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))

    jobs = {"now": tree_of(safetensors_tree), "json": json_floor}
    if args.compare:
        jobs[args.compare] = tree_of(at_revision(args.compare))
    times: dict = {name: [] for name in jobs}
    times["describe"] = []
    for i in range(args.rounds):
        for name, job in list(jobs.items())[:: 1 if i % 2 else -1]:  # alternated
            start = time.process_time()
            tree = job()
            times[name].append(time.process_time() - start)
            if name == "now":
                start = time.process_time()
                inspector.describe(tree)
                times["describe"].append(time.process_time() - start)
            del tree
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"{path.name}, CPU time in one process, medians of {args.rounds} alternated rounds: "
          + ", ".join(f"{name} {med[name] * 1e3:.0f} ms ({min(t) * 1e3:.0f}-{max(t) * 1e3:.0f})"
                      for name, t in times.items()))
    print(f"load_tree / json: now {med['now'] / med['json']:.2f}" + (
        f", {args.compare} {med[args.compare] / med['json']:.2f}" if args.compare else ""))


if __name__ == "__main__":
    main()
