"""What showing a checkpoint's structure costs over the network: bytes, requests and time.

Writes a transformer-like checkpoint (24 layers x 8 leaves + embeddings: 195 leaves, float32)
of `--mb` MB as safetensors, a sharded safetensors index (4 shards), npz and orbax, serves the
folder from a local range-serving HTTP server (tests/io/servers.py) and from moto's S3 server,
and for each measures `inspector.load(url)` plus touching every leaf's shape and dtype: the
bytes and requests the server saw (exact counts, the same every run) and the median time
(min-max) of `--repeats` fresh loads. Then one leaf read: a 4 MiB leaf, bytes and requests,
against fsspec's default buffered file (5 MiB blocks with read-ahead) reading the same range.

Targets: a 400 MB safetensors costs < 2 MB and <= 4 requests; a leaf <= 1.1x its bytes + 64 KiB.

    .venv/bin/python benchmarks/bench_remote.py              # 400 MB
    .venv/bin/python benchmarks/bench_remote.py --mb 100 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.io.servers

import inspector  # noqa: E402
from tests.io.servers import RangeServer, s3_serving  # noqa: E402

LAYERS, PER_LAYER = 24, 8
BUCKET = "bench"


def build(folder: Path, mb: int) -> dict[str, str]:
    """Writes the checkpoints; returns format -> name below `folder`."""
    # float32 leaves: 24 layers x 8 leaves of `unit` elements each, embeddings 8 units
    unit = mb * 2**20 // 4 // (LAYERS * PER_LAYER + 8)
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(unit).astype(np.float32)
    tree = {"embed_4mib": np.resize(noise, 2**20),  # first: fsspec's read-ahead has room
            "embed": np.tile(noise, 8).reshape(8, unit),
            "layers": {str(i): {f"w{j}": noise + i + j for j in range(PER_LAYER)}
                       for i in range(LAYERS)}}
    inspector.save(tree, folder / "model.safetensors")
    inspector.save(tree, folder / "model.npz")
    (folder / "sharded").mkdir()
    weight_map, flat = {}, {f"layers.{i}.{k}": v for i, layer in tree["layers"].items()
                            for k, v in layer.items()}
    flat.update(embed=tree["embed"], embed_4mib=tree["embed_4mib"])
    names = list(flat)
    for s in range(4):
        shard = f"model-{s + 1:05d}-of-00004.safetensors"
        part = names[s::4]
        inspector.save({n.replace(".", "_"): flat[n] for n in part}, folder / "sharded" / shard)
        weight_map.update({n.replace(".", "_"): shard for n in part})
    (folder / "sharded/model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}))
    import orbax.checkpoint as ocp

    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(folder / "ckpt", tree)
    checkpointer.wait_until_finished()
    return {"safetensors": "model.safetensors",
            "sharded index (4 shards)": "sharded/model.safetensors.index.json",
            "npz": "model.npz", "orbax": "ckpt/"}


def measure(server, url: str, options, repeats: int, warm_up: bool):
    if warm_up:  # imports, connections
        inspector.describe(inspector.load(url, options))
    times = []
    for _ in range(repeats):
        server.traffic.reset()
        start = time.perf_counter()
        tree = inspector.load(url, options)
        rows = inspector.describe(tree)
        times.append(time.perf_counter() - start)
        assert rows
    return server.traffic.bytes, len(server.traffic.requests), times


def leaf_cost(server, url: str, options) -> tuple[int, int, int]:
    tree = inspector.load(url, options)
    leaf = tree["embed_4mib"]
    server.traffic.reset()
    np.asarray(leaf)
    return leaf.nbytes, server.traffic.bytes, len(server.traffic.requests)


def fsspec_default_cost(server, url: str, offset: int, nbytes: int) -> tuple[int, int]:
    import fsspec

    fs = fsspec.filesystem("http", skip_instance_cache=True)
    with fs.open(url, "rb") as f:  # the default: 5 MiB blocks, read-ahead
        server.traffic.reset()
        f.seek(offset)
        f.read(nbytes)
    return server.traffic.bytes, len(server.traffic.requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--s3-repeats", type=int, default=1,
                        help="moto copies the whole object for every range request: slow")
    parser.add_argument("--moto-npz", action="store_true",
                        help="also time npz over moto (minutes at 400 MB: one range request per "
                        "member, each copying the whole object inside moto)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        names = build(folder, args.mb)
        size = (folder / "model.safetensors").stat().st_size
        print(f"checkpoints of {size / 1e6:.0f} MB, {LAYERS * PER_LAYER + 2} leaves, written in "
              f"{time.perf_counter() - started:.0f} s; {args.repeats} loads each over http, "
              f"{args.s3_repeats} over s3 (moto's server copies the whole object for every "
              f"range request, so its times are moto's, not the client's)\n")
        with s3_serving(folder, BUCKET) as s3, RangeServer(folder) as http:
            servers = {
                "http": (http, lambda n: f"{http.url}/{n}", None),
                "s3 (moto)": (s3, lambda n: f"s3://{BUCKET}/{n}", {"endpoint_url": s3.url}),
            }
            repeats = {"http": args.repeats, "s3 (moto)": args.s3_repeats}
            print(f"{'structure of':26} {'over':10} {'bytes':>10} {'requests':>9} "
                  f"{'median ms':>10} {'min-max ms':>14}")
            for fmt, name in names.items():
                for where, (server, url, options) in servers.items():
                    if fmt == "npz" and where != "http" and not args.moto_npz:
                        print(f"{fmt:26} {where:10} (skipped: the same requests as over "
                              "http; --moto-npz times them, each copying the whole object "
                              "inside moto)")
                        continue
                    nbytes, count, times = measure(server, url(name), options,
                                                   repeats[where], where == "http")
                    ms = [t * 1e3 for t in times]
                    print(f"{fmt:26} {where:10} {nbytes:>10,} {count:>9} "
                          f"{statistics.median(ms):>10.1f} "
                          f"{min(ms):>6.1f}-{max(ms):<7.1f}", flush=True)
            print(f"\n{'one 4 MiB leaf':26} {'over':10} {'bytes':>10} {'requests':>9} "
                  f"{'x leaf':>10}")
            for where, (server, url, options) in servers.items():
                nbytes, got, count = leaf_cost(server, url("model.safetensors"), options)
                print(f"{'inspector':26} {where:10} {got:>10,} {count:>9} "
                      f"{got / nbytes:>10.3f}")
            offset = _offset(folder / "model.safetensors", "embed_4mib")
            got, count = fsspec_default_cost(http, f"{http.url}/model.safetensors",
                                             offset, 2**22)
            print(f"{'fsspec default open/read':26} {'http':10} {got:>10,} {count:>9} "
                  f"{got / 2**22:>10.3f}")


def _offset(path: Path, name: str) -> int:
    from inspector.io.safetensors_format import read_header

    return next(e.offset for e in read_header(path) if e.name == name)


if __name__ == "__main__":
    main()
