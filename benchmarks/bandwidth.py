"""The memory-bandwidth reference that every benchmark ratio divides by.

The limit of every op here is memory bandwidth, and it moves from run to run on a shared
machine (20-60 GB/s on the same 2 cores). So the reference is measured in the same run,
interleaved with the op it judges, as the best of three copies of a 256 MiB buffer:

- `numpy 1 thread`: `np.copyto` into a preallocated (already faulted-in) buffer;
- `numpy N threads`: the same copy split into one slice per core, copied by a thread each
  (NumPy releases the GIL while copying);
- `xla donated`: a jitted copy that writes into a donated output buffer (`keep_unused=True`,
  or JAX prunes the donated argument and allocates a fresh output, which page-faults), on
  JAX's default device. Where one copy takes under 20 ms (a GPU: 0.2 ms on an H100), a sample
  times as many copies back to back as fill 20 ms: one copy timed alone measured the launch
  and the wait (790 GB/s on an H100 that copies at ~3 TB/s).

A copy moves 2 x 256 MiB (read + write); op figures count the same way (bytes read + bytes
written, `RunResult.gbps`). So the copy is a reference, not a ceiling: on a CPU each written
cache line is read first (write-allocate), so a copy of N bytes moves 3N through memory while
it counts 2N, and an op that reads K inputs and writes one output moves (K + 2)N while it
counts (K + 1)N: by that model it may reach (K + 1) / (K + 2) x 3 / 2 of the copy (1.13 at
K = 2, 1.35 at K = 8). `Measurement.floor_ratio` divides by the op's own floor instead: the
time its own bytes take at the bandwidth the copy showed, write-allocate counted alike for
both (`WRITE_ALLOCATE`, on the CPU only); 1.0 is the model's best, and a figure well above
it says the model does not hold for that run (data left in cache, a copy slowed by a
neighbour), not that the op beat memory. Use it like this (or call `interleaved`):

    ref = Reference()                 # allocates and warms the buffers once (1 GiB)
    for _ in range(rounds):
        ref.sample()                  # one copy of each kind
        r = inspector.run(op, ...)    # the op being judged, between reference samples
    ref.best()                        # (name, median GB/s) of the best kind of copy
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

MIB = 1 << 20


def write_allocate() -> bool:
    """Whether writes pay a read of each line first (CPU caches do; GPU memory does not)."""
    return jax.default_backend() == "cpu"

ONE_THREAD, ALL_CORES, XLA_DONATED = "numpy 1 thread", "numpy {n} threads", "xla donated"


class Reference:
    """Three ways to copy one 256 MiB buffer, each timed on demand; keeps every sample."""

    def __init__(self, nbytes: int = 256 * MIB, threads: int | None = None):
        self.threads = threads or os.cpu_count() or 1
        n = nbytes // 4
        self.src = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
        self.dst = np.empty_like(self.src)
        np.copyto(self.dst, self.src)  # fault the pages in once, as a reused buffer would be
        self.moved = 2 * self.src.nbytes
        bounds = np.linspace(0, n, self.threads + 1).astype(int)
        self._slices = [(self.dst[a:b], self.src[a:b])
                        for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        self._pool = ThreadPoolExecutor(self.threads)
        self._copy = jax.jit(lambda out, x: x + jnp.float32(0), donate_argnums=0,
                             keep_unused=True)
        self._x = jax.device_put(self.src)
        self._out = self._copy(jnp.zeros_like(self._x), self._x).block_until_ready()
        start = time.perf_counter()
        self._xla(1)
        self._xla_reps = max(1, min(1000, int(0.02 / (time.perf_counter() - start))))
        self.names = [ONE_THREAD, ALL_CORES.format(n=self.threads), XLA_DONATED]
        self.samples: dict[str, list[float]] = {name: [] for name in self.names}

    def _numpy_one(self) -> None:
        np.copyto(self.dst, self.src)

    def _numpy_all(self) -> None:
        list(self._pool.map(lambda pair: np.copyto(*pair), self._slices))

    def _xla(self, reps: int | None = None) -> None:
        for _ in range(reps or self._xla_reps):
            self._out = self._copy(self._out, self._x)
        self._out.block_until_ready()

    def sample(self) -> dict[str, float]:
        """Times one copy of each kind; records and returns their GB/s (1e9 bytes/s)."""
        out = {}
        copies = (self._numpy_one, self._numpy_all, self._xla)
        for name, copy, n in zip(self.names, copies, (1, 1, self._xla_reps), strict=True):
            start = time.perf_counter()
            copy()
            gbps = n * self.moved / (time.perf_counter() - start) / 1e9
            self.samples[name].append(gbps)
            out[name] = gbps
        return out

    def medians(self, since: int = 0) -> dict[str, float]:
        """Median GB/s of each kind over its samples from index `since` on."""
        return {name: statistics.median(s[since:]) for name, s in self.samples.items()}

    def best(self, since: int = 0) -> tuple[str, float]:
        """The kind of copy with the highest median GB/s, and that median."""
        return max(self.medians(since).items(), key=lambda item: item[1])

    def summary(self, since: int = 0) -> str:
        """One line per kind: median GB/s (min-max, n), the best marked."""
        best = self.best(since)[0]
        lines = []
        for name, s in self.samples.items():
            s = s[since:]
            mark = "  <- reference" if name == best else ""
            lines.append(f"  {name:>16}: {statistics.median(s):6.1f} GB/s "
                         f"({min(s):.1f}-{max(s):.1f}, n={len(s)}){mark}")
        return "\n".join(lines)

    def close(self) -> None:
        self._pool.shutdown()
        del self._x, self._out


@dataclass
class Measurement:
    """An op's GB/s samples and the reference samples taken between them."""

    op_gbps: list[float]
    reference: str
    reference_gbps: float
    reference_medians: dict[str, float] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.op_gbps)

    @property
    def ratio(self) -> float:
        return self.median / self.reference_gbps

    def floor_ratio(self, read: int, written: int, allocate: bool | None = None) -> float:
        """The op's time floor over its median time: 1.0 = its bytes (`read` + `written`, plus
        a read of each written line where writes allocate) at the bandwidth the reference
        copy moved its own bytes (2N counted, 3N with write-allocate)."""
        a = write_allocate() if allocate is None else allocate
        moved = (read + (1 + a) * written) / (read + written)  # traffic per counted byte
        return self.ratio * moved / ((2 + a) / 2)

    def row(self) -> str:
        """`GB/s median (min-max)  ratio r  [vs <reference> g GB/s]`."""
        return (f"{self.median:6.1f} GB/s ({min(self.op_gbps):.1f}-{max(self.op_gbps):.1f}) "
                f" ratio {self.ratio:4.2f}  [vs {self.reference} {self.reference_gbps:.1f}]")


def interleaved(ref: Reference, run_op: Callable[[], list[float]], rounds: int = 5
                ) -> Measurement:
    """Alternates `ref.sample()` with `run_op()` (which returns GB/s figures) `rounds` times,
    then one last reference sample; the ratio divides the op's median by the best reference
    median of the samples taken around it."""
    since = len(ref.samples[ref.names[0]])
    op: list[float] = []
    for _ in range(rounds):
        ref.sample()
        op.extend(run_op())
    ref.sample()
    name, gbps = ref.best(since)
    return Measurement(op, name, gbps, ref.medians(since))


def back_to_back(dispatch: Callable[[], object], seconds: float = 0.02) -> float:
    """Seconds per call of `dispatch` (which starts device work and returns its arrays without
    waiting), timed over as many calls back to back as fill `seconds`, then one wait: how
    `Reference` times the XLA copy where one copy is short (a GPU), so launch and wait are
    spread over the calls alike. A whole op's call, with its host work and its wait, is timed
    by the op's own figures; this one says what the device kernels alone reach."""
    jax.block_until_ready(dispatch())
    start = time.perf_counter()
    jax.block_until_ready(dispatch())
    one = time.perf_counter() - start
    n = max(1, min(1000, int(seconds / max(one, 1e-6))))
    start = time.perf_counter()
    for _ in range(n - 1):
        dispatch()
    jax.block_until_ready(dispatch())
    return (time.perf_counter() - start) / n


def alternated(ref: Reference, runs: dict[str, Callable[[], float]], rounds: int,
               per_round: int = 3) -> tuple[dict, dict, str, float]:
    """Each of `runs` (name -> a call returning GB/s) `per_round` times a round, the names
    alternated and the reference sampled between rounds. Returns `(gbps, cpu, ref_name,
    ref_gbps)`: each name's GB/s and process CPU seconds per call (the CPU time moves less
    with the machine's load than the wall time), and the best reference kind."""
    gbps: dict = {name: [] for name in runs}
    cpu: dict = {name: [] for name in runs}
    for _ in range(rounds):
        ref.sample()
        for name, run in runs.items():
            for _ in range(per_round):
                start = time.process_time()
                gbps[name].append(run())
                cpu[name].append(time.process_time() - start)
    ref.sample()
    return (gbps, cpu, *ref.best())


def alternated_rows(gbps: dict, cpu: dict, best: float) -> str:
    """One line per name of `alternated`'s result: median GB/s (min-max), ratio to `best`,
    median (and least) CPU milliseconds a call."""
    width = max(map(len, gbps), default=0)
    return "\n".join(
        f"  {name:>{width}}: {statistics.median(g):5.1f} GB/s ({min(g):.1f}-{max(g):.1f}) "
        f"ratio {statistics.median(g) / best:.2f}; CPU time "
        f"{statistics.median(cpu[name]) * 1e3:.1f} ms a call (min {min(cpu[name]) * 1e3:.1f})"
        for name, g in gbps.items())


def report_alternated(runs: dict[str, Callable[[], float]], rounds: int,
                      header: Callable[[str, float], str]) -> None:
    """Times `runs` against a fresh `Reference` (`alternated`) and prints `header(reference
    kind, its GB/s)`, a line per run (`alternated_rows`) and the reference's summary."""
    ref = Reference()
    try:
        gbps, cpu, ref_name, best = alternated(ref, runs, rounds)
        print(header(ref_name, best))
        print(alternated_rows(gbps, cpu, best))
        print(ref.summary())
    finally:
        ref.close()
