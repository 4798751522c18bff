"""How long `inspector.io.load` takes to show a checkpoint's structure, per format and size.

For every format the inspector reads, writes a transformer-like checkpoint (24 layers, 16 leaves
each, plus embeddings: 387 leaves, float32 random data) at a small and a large size with the
format's own library, then measures:

- structure read: `load(path)` and touching `.shape` / `.dtype` of every leaf (what a tree view
  needs), median and min-max of `--repeats` runs after one warm-up run;
- full load: copying every leaf into memory (`np.array(np.asarray(leaf))`: a memory-mapped
  leaf is a view until copied), after asking the kernel to drop the file from its page cache
  (`posix_fadvise(DONTNEED)`), median of 3 runs.

Targets: structure read <= 50 ms at 1 GB for every format (orbax <= 100 ms), flat in file size.
PyTorch files are written by `torch.save` in a separate interpreter that has torch
(`--torch-python`, default /tmp/torchenv/bin/python; the rows are skipped if it is missing).

    .venv/bin/python benchmarks/bench_load.py                 # 10 MB and 1 GB
    .venv/bin/python benchmarks/bench_load.py --large-mb 200 --formats safetensors npz
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from inspector.io import load

LAYERS = 24
VOCAB_PER_WIDTH = 8  # embedding rows per model width unit


def transformer_shapes(total_bytes: int) -> dict[str, tuple[int, ...]]:
    """Returns flat name -> shape of a float32 transformer of about `total_bytes`."""
    # per layer 12 d^2 weights (q, k, v, o: d x d; mlp: d x 4d twice) plus the embedding 8 d^2
    floats = total_bytes / 4
    width = max(8, int((floats / (12 * LAYERS + VOCAB_PER_WIDTH)) ** 0.5) // 8 * 8)
    shapes = {"embed.tokens": (VOCAB_PER_WIDTH * width, width)}
    for i in range(LAYERS):
        p = f"layers.{i}"
        for name in ("q", "k", "v", "o"):
            shapes[f"{p}.attn.{name}.kernel"] = (width, width)
            shapes[f"{p}.attn.{name}.bias"] = (width,)
        shapes[f"{p}.mlp.up.kernel"] = (width, 4 * width)
        shapes[f"{p}.mlp.up.bias"] = (4 * width,)
        shapes[f"{p}.mlp.down.kernel"] = (4 * width, width)
        shapes[f"{p}.mlp.down.bias"] = (width,)
        for norm in ("ln1", "ln2"):
            shapes[f"{p}.{norm}.scale"] = (width,)
            shapes[f"{p}.{norm}.bias"] = (width,)
    shapes["final_norm.scale"] = (width,)
    shapes["final_norm.bias"] = (width,)
    return shapes


def flat_arrays(shapes: dict[str, tuple[int, ...]], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)  # random data: zeros would compress away in orbax
    return {name: rng.standard_normal(shape, dtype=np.float32) for name, shape in shapes.items()}


def nested(flat: dict[str, np.ndarray]) -> dict:
    tree: dict = {}
    for name, array in flat.items():
        *parents, last = name.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = array
    return tree


# --- writers: each format's own library ------------------------------------------------------


def write_safetensors(flat, folder: Path) -> Path:
    import safetensors.numpy

    path = folder / "model.safetensors"
    safetensors.numpy.save_file(flat, str(path))
    return path


def write_safetensors_index(flat, folder: Path, shards: int = 4) -> Path:
    import safetensors.numpy

    names = list(flat)
    weight_map = {}
    for s in range(shards):
        shard = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        members = names[s::shards]
        safetensors.numpy.save_file({n: flat[n] for n in members}, str(folder / shard))
        weight_map.update(dict.fromkeys(members, shard))
    path = folder / "model.safetensors.index.json"
    path.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return path


def write_npz(flat, folder: Path) -> Path:
    path = folder / "model.npz"
    np.savez(path, **flat)
    return path


def write_orbax(flat, folder: Path) -> Path:
    import orbax.checkpoint as ocp

    path = folder / "ckpt"
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, nested(flat))
    return path


def write_msgpack(flat, folder: Path) -> Path:
    from flax import serialization

    path = folder / "model.msgpack"
    path.write_bytes(serialization.msgpack_serialize(nested(flat)))
    return path


def write_hdf5(flat, folder: Path) -> Path:
    import h5py

    path = folder / "model.h5"
    with h5py.File(path, "w") as f:
        for name, array in flat.items():
            f[name.replace(".", "/")] = array
    return path


_TORCH_WRITER = """
import json, sys, torch
shapes, path, legacy = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
g = torch.Generator().manual_seed(0)
state = {name: torch.randn(shape, generator=g) for name, shape in shapes.items()}
torch.save(state, path, _use_new_zipfile_serialization=not legacy)
"""


def torch_writer(python: str, legacy: bool):
    def write(flat, folder: Path) -> Path:
        path = folder / ("legacy.pt" if legacy else "model.pt")
        shapes = json.dumps({name: list(a.shape) for name, a in flat.items()})
        subprocess.run([python, "-c", _TORCH_WRITER, shapes, str(path), "1" if legacy else "0"],
                       check=True)  # fmt: skip
        return path

    return write


# --- measurements ----------------------------------------------------------------------------


def leaves(tree):
    if isinstance(tree, dict):
        for value in tree.values():
            yield from leaves(value)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from leaves(value)
    else:
        yield tree


def structure_read(path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    tree = load(path)
    count = 0
    for leaf in leaves(tree):
        _ = (leaf.shape, leaf.dtype)
        count += 1
    return time.perf_counter() - start, count


def full_load(path: Path) -> float:
    evict(path)
    start = time.perf_counter()
    total = 0
    for leaf in leaves(load(path)):
        # np.asarray may return a view of a memory map; the copy reads every byte into RAM
        total += np.array(np.asarray(leaf), copy=True).nbytes
    return time.perf_counter() - start


def evict(path: Path) -> None:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    if path.is_file() and path.suffix == ".json":  # a shard index: evict its shards too
        files += list(path.parent.glob("*.safetensors"))
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def size_of(path: Path) -> int:
    if path.is_file() and path.suffix == ".json":
        return sum(p.stat().st_size for p in path.parent.glob("*.safetensors"))
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small-mb", type=float, default=10)
    parser.add_argument("--large-mb", type=float, default=1024, help="the large size (MiB)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where to write")
    parser.add_argument("--torch-python", default="/tmp/torchenv/bin/python")
    parser.add_argument("--formats", nargs="*", help="only these (default: all)")
    args = parser.parse_args(argv)

    writers = {
        "safetensors": write_safetensors,
        "safetensors-index": write_safetensors_index,
        "npz": write_npz,
        "orbax": write_orbax,
        "flax-msgpack": write_msgpack,
        "hdf5": write_hdf5,
    }
    if Path(args.torch_python).exists():
        writers["torch"] = torch_writer(args.torch_python, legacy=False)
        writers["torch-legacy"] = torch_writer(args.torch_python, legacy=True)
    else:
        print(f"(no {args.torch_python}: PyTorch rows skipped)", file=sys.stderr)
    if args.formats:
        writers = {k: v for k, v in writers.items() if k in args.formats}

    largest = max(args.small_mb, args.large_mb) * 2**20
    free = shutil.disk_usage(args.dir).free
    if free < 2.5 * largest:
        print(f"Need {2.5 * largest / 2**30:.1f} GiB free in {args.dir}, have "
              f"{free / 2**30:.1f} GiB; pass a smaller --large-mb or another --dir.",
              file=sys.stderr)  # fmt: skip
        return 1

    rows = []
    for size_mb in (args.small_mb, args.large_mb):
        flat = flat_arrays(transformer_shapes(int(size_mb * 2**20)))
        for fmt, write in writers.items():
            folder = Path(tempfile.mkdtemp(prefix=f"bench_{fmt}_", dir=args.dir))
            try:
                path = write(flat, folder)
                os.sync()
                structure_read(path)  # warm-up: imports, first open
                runs = [structure_read(path) for _ in range(args.repeats)]
                times = [t for t, _ in runs]
                loads = [full_load(path) for _ in range(3)]
                rows.append((fmt, size_of(path), runs[0][1], times, statistics.median(loads)))
                print(_row(*rows[-1]), flush=True)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        del flat

    print()
    print("| format | file size | leaves | structure read, ms: median (min-max) | full load, s |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(_row(*row))
    return 0


def _row(fmt, size, count, times, load_s) -> str:
    ms = [t * 1000 for t in times]
    return (
        f"| {fmt} | {size / 2**20:,.0f} MiB | {count} | "
        f"{statistics.median(ms):.1f} ({min(ms):.1f}-{max(ms):.1f}) | {load_s:.2f} |"
    )


if __name__ == "__main__":
    sys.exit(main())
