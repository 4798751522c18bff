"""`pytree-inspector show` of a 100,000-tensor safetensors file against the library's own
`load` + `describe` of it (issue 28's target: the command, interpreter start included, within
1.3 x the library's time + 0.3 s).

    PYTHONPATH=. python benchmarks/bench_cli.py [--tensors 100000] [--repeats 3]

Each figure is the median of `--repeats` fresh processes (the library's and the commands'
interleaved, round by round), so every one pays what a user pays:
- `library`: `inspector.load(path)` + `inspector.describe(tree)` timed inside the process
  (after `import inspector`), and the same process's whole wall time beside it;
- `show`, `show --all`, `show --json --all`: `python -m inspector show ...` to /dev/null, wall
  time from spawn to exit.
The file: layers of identical blocks (which `show` folds), written by `inspector.save`.

With `--merge-mb M`, also `pytree-inspector merge` of a linear mergekit YAML over two float32
checkpoints of M MiB each (244 tensors, as a 304M-parameter model has at M = 1160): the wall
time of the whole command, and the time and peak memory (RSS) it reports itself. mergekit is
not installed here, so its side of issue 28's merge target is not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

LIB = """
import time, sys
t0 = time.perf_counter()
import inspector
t1 = time.perf_counter()
rows = inspector.describe(inspector.load(sys.argv[1]))
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, len(rows))
"""


def build(path: Path, n: int) -> None:
    """`n` float32[4] tensors: `layers.{i}.block{j}.{w,b}` in runs of 50 per layer."""
    import inspector

    per_layer = 50
    tree: dict = {"layers": {}}
    small = np.zeros(4, np.float32)
    for i in range(n // per_layer):
        tree["layers"][str(i)] = {f"block{j}": {"w": small, "b": small}
                                  for j in range(per_layer // 2)}
    inspector.save(tree, path)


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensors", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--merge-mb", type=float, default=0)
    args = parser.parse_args()
    if args.merge_mb:
        bench_merge(args.merge_mb)
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "many.safetensors"
        build(path, args.tensors)
        shows = {"show": [], "show --all": ["--all"], "show --json --all": ["--json", "--all"]}
        lib, lib_wall, imports = [], [], []
        walls: dict[str, list[float]] = {name: [] for name in shows}
        for _ in range(args.repeats):  # interleaved: the load on a shared machine drifts
            start = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", LIB, str(path)], capture_output=True,
                                 text=True, check=True, env=env).stdout.split()
            lib_wall.append(time.perf_counter() - start)
            imports.append(float(out[0]))
            lib.append(float(out[1]))
            for name, extra in shows.items():
                cmd = [sys.executable, "-m", "inspector", "show", str(path), *extra]
                walls[name].append(wall(cmd))
        figures = {"tensors": args.tensors, "rows": int(out[2]),
                   "library load+describe s": statistics.median(lib),
                   "library import s": statistics.median(imports),
                   "library process wall s": statistics.median(lib_wall)}
        for name, times in walls.items():
            figures[f"{name} wall s"] = statistics.median(times)
        target = 1.3 * figures["library load+describe s"] + 0.3
        figures["target s (1.3 x library + 0.3)"] = target
    for key, value in figures.items():
        print(f"{key:34} {value:.3f}" if isinstance(value, float) else f"{key:34} {value}")
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                      for k, v in figures.items()}))


def bench_merge(mb: float) -> None:
    import inspector

    n_leaves = 244
    per_leaf = int(mb * 2**20 / 4 / n_leaves)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name in ("a", "b"):
            (tmp / name).mkdir()
            base = rng.standard_normal(per_leaf).astype(np.float32)
            inspector.save({f"layer{i}": {"w": base + i} for i in range(n_leaves)},
                           tmp / name / "model.safetensors")
        (tmp / "linear.yml").write_text(
            "merge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: 0.5}\n"
            "  - model: b\n    parameters: {weight: 0.5}\ndtype: float32\n")
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "inspector", "merge", "linear.yml", "out",
                               "--json", "-q"], cwd=tmp, capture_output=True, text=True,
                              check=True)
        elapsed = time.perf_counter() - start
        record = json.loads(done.stdout)
        size = (tmp / "a" / "model.safetensors").stat().st_size
    print(f"merge: 2 x {size / 2**20:.0f} MiB, linear: command wall {elapsed:.2f} s, "
          f"reported {record['seconds']:.2f} s, peak RSS {record['peak_rss_bytes'] / 2**20:.0f}"
          " MiB")


if __name__ == "__main__":
    main()
