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
- `--ops`: the CPU time per element of the reduction loop in place (`host_step._steps`, the
  numba pass over each chunk and pair, on the largest leaf's 8 steps, one thread) against the
  reference's one pass.

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
    parser.add_argument("--ops", action="store_true", help="also the pass's CPU ns per element")
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


def passes(steps: list[np.ndarray], rounds: int) -> None:
    """Prints the CPU time per element of the reduction (`host_step._steps`, one thread, in
    place: the numba pass over each chunk and pair), and of the reference's one pass (a
    float32 sum of each leaf)."""
    paired = [t > 0 for t in range(len(steps))]
    bits = [x.view(np.uint32) for x in steps]
    for u in bits:
        u.flags.writeable = False  # the type the timeline passes (one compiled loop)
    n_chunks = -(-steps[0].size // host_step.CHUNK)
    from inspector.core.health import step_loops

    def timed(f) -> float:
        best = []
        for _ in range(rounds):
            start = time.process_time()
            f()
            best.append(time.process_time() - start)
        return min(best) / (len(steps) * steps[0].size) * 1e9

    one = timed(lambda: host_step._steps(step_loops, bits, paired, 0, n_chunks))
    ref = timed(lambda: [x.sum(dtype=np.float32) for x in steps])
    print(f"  the largest leaf ({steps[0].size:,} elements x {len(steps)} steps), CPU ns per "
          f"element, best of {rounds}: the pass {one:.2f}, the reference's one pass (a float32 "
          f"sum of each leaf) {ref:.2f}")


if __name__ == "__main__":
    main()
