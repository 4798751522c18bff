"""`scan` and `timeline` against the memory-bandwidth reference and the file read, one run.

    python benchmarks/bench_health.py [--quick] [--mb 300] [--only scan many timeline]

Prints (issue 24 targets in brackets; `--quick`: small sizes, a smoke run):

1. `scan`: `inspector.scan` of a packed float32 transformer-like tree of 1e8 parameters held
   on the device: GB/s = bytes read / time, median (min-max) over the timed runs, and its ratio
   to the reference of `bandwidth.py` (the best median of three 256 MiB copies, sampled
   between the scan's own runs) [>= 0.5 on the CPU, >= 0.7 on a GPU];
2. `many`: `scan` of 100,000 small leaves packed (a `leaf_count_tree`: constant leaves; then
   the same shapes with random values), once compiled: median ms (min-max) [<= 50 ms], and the
   compilations of the first and the later scans;
3. `timeline`: 8 safetensors checkpoints of `--mb` MB each on disk: `inspector.timeline` of
   the folder against reading every leaf of every file once through `inspector.load` (and the
   raw file bytes), in the same run [<= 1.3x]; the peak resident memory above the baseline
   during the timeline (sampled every 5 ms; anonymous memory apart) against the largest
   checkpoint [<= 2x].
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bandwidth import Reference, back_to_back, interleaved  # noqa: E402
from trees import leaf_count_tree, transformer_like  # noqa: E402

import inspector  # noqa: E402


def spread(times: list[float]) -> str:
    return (f"{statistics.median(times) * 1e3:8.2f} ms "
            f"({min(times) * 1e3:.2f}-{max(times) * 1e3:.2f}, n={len(times)})")


def on_device(tree) -> inspector.PackedTree:
    p = inspector.pack(tree)
    return inspector.PackedTree(p.layout, {g: jax.device_put(b) for g, b in p.buffers.items()})


def bench_scan(n_params: float, rounds: int) -> None:
    tree = on_device(transformer_like(n_params))
    inspector.scan(tree)  # compile
    ref = Reference()

    cpu = []

    def run() -> list[float]:
        out = []
        for _ in range(2):
            start, start_cpu = time.perf_counter(), time.process_time()
            inspector.scan(tree)
            out.append(tree.nbytes / (time.perf_counter() - start) / 1e9)
            cpu.append(time.process_time() - start_cpu)
        return out

    m = interleaved(ref, run, rounds=rounds)
    print(f"scan, packed float32, {tree.nbytes / 1e6:.0f} MB, {tree.n_leaves} leaves, "
          f"{jax.devices()[0].platform}: {m.row()}   [>= 0.5 CPU, >= 0.7 GPU]")
    # CPU time (all threads) moves less than wall time when other processes share the cores
    print(f"  process CPU time per scan: {spread(cpu)}")
    if jax.devices()[0].platform != "cpu":
        from inspector.core.health import kernels

        best, chosen = ref.best()[1], kernels.ONE_PASS_FORM
        for form in (chosen, *sorted({"variadic", "fast"} - {chosen})):
            kernels.ONE_PASS_FORM = form
            alone = [tree.nbytes / back_to_back(scan_kernel(tree)) / 1e9 for _ in range(5)]
            print(f"  the scan's device kernel alone ({form}{', in use' if form == chosen else ''}"
                  f"), back to back (as the reference copy is timed here): "
                  f"{statistics.median(alone):.1f} GB/s ({min(alone):.1f}-{max(alone):.1f}), "
                  f"ratio {statistics.median(alone) / best:.2f}")
        kernels.ONE_PASS_FORM = chosen
    print(ref.summary())
    ref.close()


def scan_kernel(tree: inspector.PackedTree):
    """Dispatches the device kernel `scan` runs on a one-group packed tree (built through
    scan.py's private helpers, as `_scan_packed` builds it), returning without a wait."""
    from inspector.core.health import kernels
    from inspector.core.health import scan as s
    from inspector.core.health.layout_rows import leaf_rows

    (group, buffer), = tree.buffers.items()
    device = jax.devices()[0]
    _, offsets, sizes = s._layout_groups(tree.layout)["groups"][group]
    one_pass = kernels.ONE_PASS_FORM if s._one_pass(device) else ""
    block = s.block_for(buffer.size, len(sizes), bool(one_pass), device.platform != "cpu")
    _, _, row, lo, hi, _ = leaf_rows(offsets, sizes, buffer.size, block)
    n = s._bucket(len(row), 16)
    args = jax.device_put(tuple(np.pad(v, (0, n - len(v))) for v in (row, lo, hi)), device)
    kernel = s._buffer_jit(buffer.size, block, n, "float32", one_pass)
    return lambda: kernel(buffer, *args)


def bench_many(n_leaves: int, repeats: int) -> None:
    bench_many_of(leaf_count_tree(n_leaves), repeats, "")
    # the same shapes with random values: constant leaves (the tree above) skip the sums
    rng = np.random.default_rng(0)
    bench_many_of(jax.tree.map(lambda x: rng.standard_normal(x.shape, np.float32),
                               leaf_count_tree(n_leaves)), repeats, ", random values")


def bench_many_of(tree, repeats: int, what: str) -> None:
    tree = on_device(tree)
    before = inspector.compile_count()
    inspector.scan(tree)
    first = inspector.compile_count() - before
    times, cpu = [], []
    before = inspector.compile_count()
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        inspector.scan(tree)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    later = inspector.compile_count() - before
    print(f"scan, {tree.n_leaves:,} small leaves packed ({tree.nbytes / 1e6:.0f} MB{what}): "
          f"{spread(times)} per scan   [<= 50 ms]; compilations: first {first}, "
          f"later {later}; process CPU time {spread(cpu)}")


class Peak:
    """Samples this process's resident memory (and its anonymous part) every 5 ms."""

    def __init__(self):
        self.rss = self.anon = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> tuple[int, int]:
        fields = {}
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon"):
                    fields[key] = int(value.split()[0]) * 1024
        return fields.get("VmRSS", 0), fields.get("RssAnon", 0)

    def _run(self):
        while not self._stop.is_set():
            rss, anon = self.now()
            self.rss, self.anon = max(self.rss, rss), max(self.anon, anon)
            time.sleep(0.005)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_):
        self._stop.set()
        self._thread.join()


def bench_timeline(mb: int, steps: int = 8) -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench_health_"))
    rng = np.random.default_rng(0)
    base = transformer_like(mb * 1e6 / 4)
    paths = []
    for step in range(steps):
        tree = jax.tree.map(lambda x, step=step: x + np.float32(0.01 * step) * rng.standard_normal(
            x.shape, np.float32), base)
        paths.append(inspector.save(tree, folder / f"ckpt_{(step + 1) * 1000}.safetensors"))
    del tree, base
    sizes = [p.stat().st_size for p in paths]
    for p in paths:  # in the page cache, as after a first look at the run
        p.read_bytes()

    def read_all() -> float:
        start = time.perf_counter()
        for p in paths:
            for leaf in jax.tree.leaves(inspector.load(p)):
                np.asarray(leaf).sum(dtype=np.float32)  # touch every page once
        return time.perf_counter() - start

    def raw() -> float:
        start = time.perf_counter()
        buf = bytearray(max(sizes))
        for p in paths:
            with open(p, "rb") as f:
                f.readinto(buf)
        return time.perf_counter() - start

    inspector.timeline(paths[:2])  # compile the kernels of these leaf sizes
    reads, raws, runs = [], [], []
    peak_rss = peak_anon = 0
    for _ in range(3):
        reads.append(read_all())
        raws.append(raw())
        base_rss, base_anon = Peak.now()
        with Peak() as peak:
            start = time.perf_counter()
            t = inspector.timeline(folder)
            runs.append(time.perf_counter() - start)
        peak_rss = max(peak_rss, peak.rss - base_rss)
        peak_anon = max(peak_anon, peak.anon - base_anon)
    ratio = statistics.median(runs) / statistics.median(reads)
    print(f"timeline, {steps} checkpoints of {max(sizes) / 1e6:.0f} MB "
          f"({len(t.paths)} leaves): {spread(runs)}; reading every leaf once "
          f"{spread(reads)} (raw bytes {spread(raws)}): ratio {ratio:.2f}   [<= 1.3]")
    print(f"  peak memory above baseline: resident {peak_rss / 1e6:.0f} MB, anonymous "
          f"{peak_anon / 1e6:.0f} MB = {peak_anon / max(sizes):.2f}x the largest checkpoint "
          f"  [<= 2x]; frozen {len(t.frozen())}, labels {t.labels[0]}..{t.labels[-1]}")
    for p in paths:
        os.remove(p)
    folder.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--mb", type=int, default=300, help="MB per timeline checkpoint")
    parser.add_argument("--only", nargs="*", default=["scan", "many", "timeline"])
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0]}, {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}")
    if "scan" in args.only:
        bench_scan(1e6 if args.quick else 1e8, rounds=2 if args.quick else 5)
    if "many" in args.only:
        bench_many(2_000 if args.quick else 100_000, repeats=3 if args.quick else 7)
    if "timeline" in args.only:
        bench_timeline(4 if args.quick else args.mb)


if __name__ == "__main__":
    main()
