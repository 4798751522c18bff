"""Peak memory of a weighted sum of two checkpoints on disk, streamed leaf by leaf.

    .venv/bin/python benchmarks/bench_stream.py [--mb 1024]

Writes two safetensors checkpoints of `--mb` MiB each (transformer-like, float32), then in a
fresh interpreter per case: `load` both (lazy leaves), `weighted_sum` them, and report the
process's peak resident memory above what it held after importing JAX (sampled every 2 ms).
Memory-mapped input pages that were read count as resident too (the kernel may drop them at
will). Target (issue 4): the streamed sum holds the output plus a few leaves, not the inputs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

_CASE = """
import json, sys, threading, time
import jax, numpy as np, inspector

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

peak = [0]
stop = threading.Event()
def sample():  # ru_maxrss proved unreliable in this sandbox; sample the resident set instead
    while not stop.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.002)

jax.numpy.zeros(1).block_until_ready()
base = rss()
threading.Thread(target=sample, daemon=True).start()
a, b = inspector.load(sys.argv[1]), inspector.load(sys.argv[2])
largest = max(x.nbytes for x in jax.tree.leaves(a))
start = time.perf_counter()
if sys.argv[3] == "packed":
    out = inspector.weighted_sum([inspector.pack(a), inspector.pack(b)], [0.5, 0.5])
else:
    out = inspector.weighted_sum([a, b], [0.5, 0.5])
jax.block_until_ready(out.buffers if sys.argv[3] == "packed" else out)
seconds = time.perf_counter() - start
time.sleep(0.02)
stop.set()
out_bytes = sum(x.nbytes for x in jax.tree.leaves(a))
print(json.dumps(dict(base=base, peak=peak[0], out=out_bytes, largest=largest, seconds=seconds)))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1024, help="size of each checkpoint (MiB)")
    args = parser.parse_args()
    from bench_load import flat_arrays, transformer_shapes, write_safetensors

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for seed in range(2):
            folder = Path(tmp) / f"ckpt{seed}"
            folder.mkdir()
            flat = flat_arrays(transformer_shapes(int(args.mb * 2**20)), seed=seed)
            paths.append(write_safetensors(flat, folder))
            del flat
        print(f"two checkpoints of {args.mb:.0f} MiB each; memory above the post-import baseline")
        print(f"{'mode':>9} {'peak extra':>11} {'output':>9} {'largest leaf':>13} {'time':>7}")
        for mode in ("streamed", "packed"):
            proc = subprocess.run([sys.executable, "-c", _CASE, *map(str, paths), mode],
                                  capture_output=True, text=True, check=True)
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            mib = 2**20
            print(f"{mode:>9} {(r['peak'] - r['base']) / mib:9.0f} MiB {r['out'] / mib:5.0f} MiB "
                  f"{r['largest'] / mib:9.1f} MiB {r['seconds']:6.2f}s")


if __name__ == "__main__":
    main()
