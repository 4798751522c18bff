"""Where `inspector.timeline`'s time goes, against reading the same files once (one run).

    python benchmarks/profile_timeline.py [--mb 300] [--rounds 3]

Writes the checkpoints of `bench_health.py --only timeline` (8 safetensors files of `--mb` MB,
in the page cache) and prints, as median (min) wall and CPU time (this process, all threads)
over `--rounds`:

- `read`: every leaf read once through `inspector.load` and summed (the benchmark's reference);
  `raw`: the file bytes read into one reused buffer;
- `timeline`: `inspector.timeline` of the folder, as is; then with one compute thread;
- `map + fault + Python`: the timeline with the reductions replaced by nothing (the leaves
  mapped and faulted in, the bookkeeping, the structural diffs);
- `compute`: the per-path reductions (`host_steps`) alone on copies of the leaves in memory,
  one thread and two;
- `--ops`: the CPU time of each NumPy pass of the reduction loop, in place (the loop of
  `host_step._steps_quiet` on the largest leaf's 8 steps, the passes added one at a time:
  each pass's cost is what adding it costs; the first also reads each chunk from memory).

CPU time is what a loaded machine makes visible: on two busy cores the wall time of a
two-thread run depends on what else runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from trees import transformer_like  # noqa: E402

import inspector  # noqa: E402
from inspector.core.health import host_batches, host_step  # noqa: E402


def measure(f, rounds: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(rounds):
        c, w = time.process_time(), time.perf_counter()
        f()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return walls, cpus


def row(name: str, walls, cpus, ref: float | None = None) -> str:
    wall = statistics.median(walls)
    out = (f"  {name:34s} wall {wall * 1e3:7.0f} ms ({min(walls) * 1e3:.0f})   "
           f"cpu {statistics.median(cpus) * 1e3:7.0f} ms ({min(cpus) * 1e3:.0f})")
    return out + (f"   {wall / ref:.2f}x read" if ref else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", action="store_true", help="also the cost of each pass")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="profile_timeline_"))
    rng = np.random.default_rng(0)
    base = transformer_like(args.mb * 1e6 / 4)
    paths = []
    for step in range(8):
        tree = jax.tree.map(lambda x, step=step: x + np.float32(0.01 * step) * rng.standard_normal(
            x.shape, np.float32), base)
        paths.append(inspector.save(tree, folder / f"ckpt_{(step + 1) * 1000}.safetensors"))
    del tree, base
    for p in paths:
        p.read_bytes()
    n_leaves = len(jax.tree.leaves(inspector.load(paths[0])))
    print(f"8 checkpoints of {paths[0].stat().st_size / 1e6:.0f} MB ({n_leaves} leaves), "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")

    def read():
        for p in paths:
            for leaf in jax.tree.leaves(inspector.load(p)):
                np.asarray(leaf).sum(dtype=np.float32)

    def raw():
        buf = bytearray(max(p.stat().st_size for p in paths))
        for p in paths:
            with open(p, "rb") as f:
                f.readinto(buf)

    def timeline():
        inspector.timeline(folder)

    timeline()  # compile the careful kernels, if any
    walls, cpus = measure(read, args.rounds)
    ref = statistics.median(walls)
    print(row("read (reference)", walls, cpus))
    print(row("raw bytes", *measure(raw, args.rounds)))
    print(row("timeline", *measure(timeline, args.rounds), ref))
    pool = host_step.POOL
    host_step.POOL = None
    print(row("timeline, one compute thread", *measure(timeline, args.rounds), ref))
    host_step.POOL = pool
    submit = host_batches.submit_steps
    host_batches.submit_steps = lambda leaves, paired: (lambda: np.zeros((len(leaves), 8)))
    print(row("map + fault + Python (no compute)", *measure(timeline, args.rounds), ref))
    host_batches.submit_steps = submit
    copies = [[np.array(np.asarray(x)) for x in jax.tree.leaves(inspector.load(p))]
              for p in paths]
    paired = [t > 0 for t in range(len(paths))]

    def compute():
        for i in range(n_leaves):
            host_step.host_steps([c[i] for c in copies], paired)

    print(row("compute, two threads (in memory)", *measure(compute, args.rounds), ref))
    host_step.POOL = None
    print(row("compute, one thread (in memory)", *measure(compute, args.rounds), ref))
    host_step.POOL = pool
    if args.ops:
        largest = max(range(n_leaves), key=lambda i: copies[0][i].size)
        passes([c[largest].reshape(-1) for c in copies], 5)
    for p in paths:
        os.remove(p)
    folder.rmdir()


PASSES = {"sq": "sum y^2 (BLAS rows)", "mm": "max y, min y", "sub": "d = y - x, sum d^2",
          "neq": "bits of y != bits of x, count"}


def passes(steps: list[np.ndarray], rounds: int) -> None:
    """Prints the CPU time of the reduction loop's passes, added one at a time, and of the
    reference's one pass (a float32 sum of each leaf)."""
    row_len, per = host_step.ROW, host_step.CHUNK // host_step.ROW
    n_rows = steps[0].size // row_len
    rows = [x[:n_rows * row_len].reshape(n_rows, row_len) for x in steps]
    bits = [r.view(np.uint32) for r in rows]
    sq, dsq = np.zeros(n_rows, np.float32), np.zeros(n_rows, np.float32)
    d, mask = np.empty((per, row_len), np.float32), np.empty((per, row_len), bool)

    def loop(skip: set) -> float:
        start = time.process_time()
        for r0 in range(0, n_rows, per):
            r1 = r0 + per
            for t, y in enumerate(r[r0:r1] for r in rows):
                k = len(y)
                if "sq" not in skip:
                    np.vecdot(y, y, out=sq[r0:r1])
                if "mm" not in skip:
                    y.max(), y.min()
                if t and "sub" not in skip:
                    np.vecdot(dd := np.subtract(y, rows[t - 1][r0:r1], out=d[:k]), dd,
                              out=dsq[r0:r1])
                if t and "neq" not in skip:
                    np.count_nonzero(np.not_equal(bits[t - 1][r0:r1], bits[t][r0:r1],
                                                  out=mask[:k]))
        return time.process_time() - start

    # passes added one at a time: each line is what its pass adds (the first one also reads
    # each chunk from memory)
    keys = list(PASSES)
    best = [min(loop(set(keys[k:])) for _ in range(rounds)) for k in range(len(keys) + 1)]
    n = len(steps) * steps[0].size
    print(f"  passes over the largest leaf ({steps[0].size:,} elements x {len(steps)} steps), "
          f"CPU ns per element, best of {rounds}, each pass added to those above:")
    print(f"    the loop alone {best[0] / n * 1e9:.2f}")
    for k, what in enumerate(PASSES.values()):
        first = " (and each chunk's first read from memory)" if k == 0 else ""
        print(f"    {what + first:34s} {(best[k + 1] - best[k]) / n * 1e9:.2f}")
    print(f"    all passes {best[-1] / n * 1e9:.2f}")
    ref = []
    for _ in range(rounds):
        start = time.process_time()
        for x in steps:
            x.sum(dtype=np.float32)
        ref.append(time.process_time() - start)
    print(f"    the reference's one pass (a float32 sum of each leaf) {min(ref) / n * 1e9:.2f}")


if __name__ == "__main__":
    main()
