"""Placement of a lazy checkpoint on a device against one `jax.device_put` of the same bytes.

    PYTHONPATH=. python benchmarks/bench_place.py [--hidden 1024] [--layers 24] [--rounds 5]

Issue 26's GPU target: host -> device placement of a lazy tree (`read_packed`: the file's
tensors read into staging buffers and sent to the device, pipelined) at >= 0.7 of a single
`jax.device_put` of one host buffer of the same size (already in memory, a copy), same run,
interleaved, medians (min-max). The file is in the page cache (written, then read once).
Beside it: the read alone (`inspector.pack` into host memory) and a copy of the same bytes in
host memory, which say what the host side can give. On the CPU the device is host memory and
the figure means little (the target is for accelerators); it is printed all the same.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_io import gpt2_like, write_safetensors  # noqa: E402

import inspector  # noqa: E402
from inspector.core import device_upload  # noqa: E402
from inspector.core.packed_reads import read_packed  # noqa: E402


def timed(fn) -> float:
    gc.collect()
    start = time.perf_counter()
    result = fn()
    jax.block_until_ready(result)
    elapsed = time.perf_counter() - start
    del result
    return elapsed


def fmt(ts: list[float]) -> str:
    return f"{statistics.median(ts) * 1e3:.1f} ms ({min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f})"


def probe(path: Path, tree, device, host: np.ndarray) -> None:
    """What the host side can give on this machine: `preadv` of the whole file with 1-16
    threads into a faulted buffer; `device_put` from a memory map of the file, leaf by leaf;
    `device_put` of the resident buffer in 64 MiB pieces, from one thread and from four."""
    from concurrent.futures import ThreadPoolExecutor

    from inspector.core.host_read import host_buffer

    nbytes = os.path.getsize(path)
    buf = host_buffer(nbytes)
    gb = nbytes / 1e9

    def read(threads: int):
        bounds = np.linspace(0, nbytes, 4 * threads + 1).astype(np.int64)
        fd = os.open(path, os.O_RDONLY)

        def one(ab):
            a, b = int(ab[0]), int(ab[1])
            view, done = memoryview(buf[a:b]), 0
            while done < b - a:
                done += os.preadv(fd, [view[done:]], a + done)

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, zip(bounds[:-1], bounds[1:], strict=True)))
        os.close(fd)

    for threads in (1, 4, 8, 16):
        ts = [timed(lambda threads=threads: read(threads)) for _ in range(3)]
        print(f"| probe: preadv of the file, {threads} threads | {fmt(ts)} | "
              f"{gb / statistics.median(ts):.1f} |")
    regions = [leaf.region[1] for leaf in jax.tree_util.tree_leaves(tree)]
    sizes = [leaf.nbytes for leaf in jax.tree_util.tree_leaves(tree)]

    def mapped():
        m = np.memmap(path, np.uint8, "r")
        return [jax.device_put(m[o:o + n], device) for o, n in zip(regions, sizes, strict=True)]

    step = 64 << 20
    starts = range(0, host.size, step)

    def pieces():
        return [jax.device_put(host[a:a + step], device) for a in starts]

    def pieces_threads():
        with ThreadPoolExecutor(4) as pool:
            return list(pool.map(lambda a: jax.device_put(host[a:a + step], device), starts))

    for label, fn in (("device_put from a memory map of the file, per leaf", mapped),
                      ("device_put of the resident buffer in 64 MiB pieces", pieces),
                      ("the same from 4 threads", pieces_threads)):
        ts = [timed(fn) for _ in range(3)]
        print(f"| probe: {label} | {fmt(ts)} | {gb / statistics.median(ts):.1f} |")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--dir", default=None)
    p.add_argument("--probe", action="store_true", help="also time what the host side gives")
    p.add_argument("--variants", default="",
                   help="staging MiB:depth:threads,... : the upload's settings, each timed too")
    args = p.parse_args()
    device = jax.devices()[0]
    folder = Path(args.dir or tempfile.mkdtemp(prefix="bench_place_"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"a-{args.hidden}x{args.layers}.safetensors"
    if not path.exists():
        write_safetensors(gpt2_like(args.hidden, args.layers, 0), path)
    tree = inspector.load(path)
    nbytes = sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(tree))
    host = np.ones(nbytes, np.uint8)  # the reference's bytes, faulted in
    timed(lambda: inspector.pack(tree))  # the file into the page cache; compiles warm up
    timed(lambda: read_packed(tree, device))
    timed(lambda: jax.device_put(host, device, may_alias=False))
    put, ours, read, copy = [], [], [], []
    for _ in range(args.rounds):
        put.append(timed(lambda: jax.device_put(host, device, may_alias=False)))
        ours.append(timed(lambda: read_packed(tree, device)))
        read.append(timed(lambda: inspector.pack(tree).buffers))
        copy.append(timed(lambda: host.copy()))
    ratio = statistics.median(put) / statistics.median(ours)
    ratios = sorted(a / b for a, b in zip(put, ours, strict=True))
    gb = nbytes / 1e9
    print(f"# bench_place: {gb:.3f} GB in {len(jax.tree_util.tree_leaves(tree))} tensors, "
          f"{device} ({device.device_kind}), jax {jax.__version__}, {os.cpu_count()} cpus, "
          f"load {os.getloadavg()[0]:.1f}, {args.rounds} rounds interleaved")
    print("| what | median (min-max) | GB/s |")
    print("|---|---|---|")
    for label, ts in (("jax.device_put of one host buffer (reference)", put),
                      ("read_packed(lazy tree, device): read + send", ours),
                      ("pack(lazy tree): the read alone, into host memory", read),
                      ("host copy of the same bytes (numpy, one thread)", copy)):
        print(f"| {label} | {fmt(ts)} | {gb / statistics.median(ts):.1f} |")
    for staging, depth, threads in ([tuple(int(v) for v in x.split(":"))
                                      for x in args.variants.split(",")] if args.variants else []):
        device_upload._STAGING_BYTES, device_upload._DEPTH = staging << 20, depth
        device_upload.THREADS = threads
        timed(lambda: read_packed(tree, device))  # the piece length's write compiles
        pairs = [(timed(lambda: jax.device_put(host, device, may_alias=False)),
                  timed(lambda: read_packed(tree, device))) for _ in range(3)]
        mine = statistics.median(b for _, b in pairs)
        print(f"| variant: staging {staging} MiB x {depth}, {threads} read threads | "
              f"{mine * 1e3:.1f} ms, ratio {statistics.median(a / b for a, b in pairs):.2f} | "
              f"{gb / mine:.1f} |")
    if args.probe:
        probe(path, tree, device, host)
    verdict = "met" if ratio >= 0.7 else "MISSED"
    print(f"placement / device_put = {ratio:.2f} (per round {ratios[0]:.2f}-{ratios[-1]:.2f}) "
          f"[>= 0.7 on an accelerator: {verdict}"
          f"{'' if device.platform != 'cpu' else '; CPU: not the target platform'}]")


if __name__ == "__main__":
    main()
