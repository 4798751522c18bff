"""Benchmark of sharded work: a weighted sum over a mesh vs one device, and the cost of sharding.

    python benchmarks/bench_mesh.py [--devices 8] [--params 1e7] [--trees 4] [--repeats 10]

Without accelerators it makes `--devices` fake CPU devices (XLA_FLAGS, set before JAX starts);
on a machine with several GPUs/TPUs it uses the real ones (`--devices` is then ignored).
Prints, from one run: the weighted sum of K transformer-like trees of P float32 parameters
timed with `inspector.run` on one device and as SPMD programs over a mesh of every device
(the same bytes: every leaf split along its first axis; runs interleaved), their ratio, and
whether the results match bit for bit; then the time `inspector.shard` takes to lay a
P-parameter host tree out over the mesh, against `jax.device_put` of the same tree onto one
device. Medians with the spread (min-max). On fake CPU devices this checks logic and
overhead, not speed (no target).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--params", type=float, default=1e7)
    parser.add_argument("--trees", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    if "jax" not in sys.modules and "--xla_force_host_platform_device_count" not in \
            os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={args.devices}")
    import jax
    import numpy as np

    sys.path.insert(0, str(Path(__file__).parent))
    from trees import transformer_like

    import inspector

    devices = jax.devices()
    n = len(devices)
    m = inspector.mesh({"data": n})
    hosts = [transformer_like(args.params, seed=k) for k in range(args.trees)]
    leaves = jax.tree.leaves(hosts[0])
    n_params = sum(x.size for x in leaves)
    weights = [1.0 / args.trees] * args.trees
    print(f"{n} x {devices[0].device_kind} ({devices[0].platform}), jax {jax.__version__}; "
          f"K = {args.trees} trees of {n_params:.3g} float32 parameters, {len(leaves)} leaves; "
          f"{args.repeats} timed runs")

    def ms(times):
        return (f"{statistics.median(times) * 1e3:8.2f} ms "
                f"({min(times) * 1e3:.2f}-{max(times) * 1e3:.2f})")

    one = [jax.device_put(t, devices[0]) for t in hosts]
    sharded = [inspector.shard(t, m, "data") for t in hosts]
    r1 = inspector.run(inspector.weighted_sum, one, weights, repeats=1)  # compiles
    rm = inspector.run(inspector.weighted_sum, sharded, weights, repeats=1)
    t1, tm = [], []
    for _ in range(args.repeats):  # interleaved, so both see the same machine load
        t1 += inspector.run(inspector.weighted_sum, one, weights, repeats=1, warmup=0).times
        tm += inspector.run(inspector.weighted_sum, sharded, weights, repeats=1, warmup=0).times
    moved = r1.bytes_read + r1.bytes_written
    same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
               zip(jax.tree.leaves(r1.result), jax.tree.leaves(rm.result), strict=True))
    print()
    print(f"| weighted sum, P = {n_params:.3g}, K = {args.trees} | median (min-max) | GB/s "
          f"| compile s |")
    print("|---|---|---|---|")
    for label, r, times in ((f"1 device ({r1.device})", r1, t1),
                            (f"mesh {rm.mesh} ({rm.device})", rm, tm)):
        gbps = moved / statistics.median(times) / 1e9
        print(f"| {label} | {ms(times)} | {gbps:.1f} | {r.compile_seconds:.2f} |")
    print(f"| ratio mesh / 1 device | {statistics.median(tm) / statistics.median(t1):.2f} "
          "| | |")
    print(f"\nresults bit for bit equal: {same}")

    host = hosts[0]
    shard_times, put_times = [], []
    for _ in range(5):  # interleaved, so both see the same machine load
        start = time.perf_counter()
        jax.block_until_ready(inspector.shard(host, m, "data"))
        shard_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        jax.block_until_ready(jax.device_put(host, devices[0]))
        put_times.append(time.perf_counter() - start)
    print()
    print(f"| placing a {n_params:.3g}-parameter host tree ({len(leaves)} leaves) | "
          f"median (min-max) |")
    print("|---|---|")
    print(f"| inspector.shard over data={n} | {ms(shard_times)} |")
    print(f"| jax.device_put onto {inspector.devices()[0]} | {ms(put_times)} |")
    print(f"| ratio | {statistics.median(shard_times) / statistics.median(put_times):.2f} |")


if __name__ == "__main__":
    main()
