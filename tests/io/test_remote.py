"""Checkpoints at URLs, against real servers on 127.0.0.1: a range-serving HTTP server and
moto's S3 server. Structure costs a few small requests; a leaf costs its own bytes; every
failure is a LoadError naming the URL, in bounded time."""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import orbax.checkpoint as ocp
import pytest
import requests

import inspector
from inspector.core.errors import LoadError, MissingDependencyError
from inspector.io.remote.location import CHUNK_BYTES, HEAD_BYTES
from tests.io.servers import RangeServer, SilentServer, refused_url, s3_serving

FORMATS = {  # name -> (what to load, below the server root; most requests for its structure)
    "safetensors": ("model.safetensors", 2),
    "sharded index": ("sharded/model.safetensors.index.json", 6),  # index: 2; each shard: 2
    # size, head, tail (the central directory), then the 13 member headers past the head
    # concurrently, those close together as one range: each 2 KiB bias's header with the next
    # weight's, the last with the step's (6; it was one request per member)
    "npz": ("model.npz", 3 + 6),
    # _METADATA, _sharding, manifest.ocdbt (size, then tensorstore's reads), b-tree nodes
    "orbax": ("ckpt/", 10),
    "gguf": ("model.gguf", 4),
}
BUCKET = "ckpts"


def _tree(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "embed": rng.standard_normal((512, 512)).astype(np.float32),  # 1 MiB: past the head
        "layers": {
            str(i): {"w": rng.standard_normal((256, 512)).astype(np.float32),
                     "b": rng.standard_normal(512).astype(np.float32)}
            for i in range(6)
        },
        "step": np.arange(3, dtype=np.int64),
    }


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served")
    tree, other = _tree(0), _tree(1)
    inspector.save(tree, folder / "model.safetensors")
    inspector.save(other, folder / "other.safetensors")
    inspector.save(tree, folder / "model.npz")
    (folder / "sharded").mkdir()
    flat = {"embed": tree["embed"], "step": tree["step"]}
    inspector.save(flat, folder / "sharded/model-00001-of-00002.safetensors")
    inspector.save({"layers": tree["layers"]}, folder / "sharded/model-00002-of-00002.safetensors")
    weight_map = {"embed": "model-00001-of-00002.safetensors",
                  "step": "model-00001-of-00002.safetensors"}
    weight_map.update({f"layers.{i}.{k}": "model-00002-of-00002.safetensors"
                       for i in range(6) for k in ("w", "b")})
    (folder / "sharded/model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}))
    _write_gguf(folder / "model.gguf", tree)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(folder / "ckpt", tree)
    checkpointer.wait_until_finished()
    (folder / "notes.txt").write_text("not a checkpoint\n" * 10)
    return folder


def _write_gguf(path, tree) -> None:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("embed", tree["embed"])
    for i, layer in tree["layers"].items():
        writer.add_tensor(f"layers.{i}.w", layer["w"])
        writer.add_tensor(f"layers.{i}.b", layer["b"])
    writer.add_tensor("step", tree["step"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def http(root):
    with RangeServer(root) as server:
        yield server


@pytest.fixture(scope="module")
def s3(root):
    with s3_serving(root, BUCKET) as server:
        yield server


def _url(server, kind: str, name: str) -> str:
    return f"{server.url}/{name}" if kind == "http" else f"s3://{BUCKET}/{name}"


def _server(kind, http, s3):
    return http if kind == "http" else s3


def _options(server) -> dict | None:
    return getattr(server, "options", None)


def _rows(tree):
    return [(r.path, r.kind, r.shape, str(r.dtype), r.nbytes) for r in inspector.describe(tree)]


@pytest.mark.parametrize("kind", ["http", "s3"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_structure_costs_a_few_small_requests(kind, fmt, root, http, s3):
    server = _server(kind, http, s3)
    name, most_requests = FORMATS[fmt]
    local = inspector.load(root / name)
    server.traffic.reset()
    tree = inspector.load(_url(server, kind, name), _options(server))
    assert _rows(tree) == _rows(local)
    requests_made = len(server.traffic.requests)
    assert requests_made <= most_requests, server.traffic.requests
    # no tensor data: at most the first 64 KiB and one zip-directory block per file
    assert server.traffic.bytes <= 3 * HEAD_BYTES, server.traffic.requests


@pytest.mark.parametrize("kind", ["http", "s3"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_one_leaf_reads_about_its_own_bytes(kind, fmt, root, http, s3):
    server = _server(kind, http, s3)
    name, _ = FORMATS[fmt]
    expected = np.asarray(inspector.load(root / name)["embed"])
    tree = inspector.load(_url(server, kind, name), _options(server))
    server.traffic.reset()
    value = np.asarray(tree["embed"])
    np.testing.assert_array_equal(value, expected)
    assert value.dtype == expected.dtype
    if fmt != "orbax":  # orbax: tensorstore reads its compressed chunks, their own size
        assert expected.nbytes <= server.traffic.bytes <= 1.1 * expected.nbytes + HEAD_BYTES
        assert len(server.traffic.requests) == -(-expected.nbytes // CHUNK_BYTES)


@pytest.mark.parametrize("kind", ["http", "s3"])
def test_weighted_sum_of_two_remote_trees_equals_the_local_one(kind, root, http, s3):
    server = _server(kind, http, s3)
    a = inspector.load(_url(server, kind, "model.safetensors"), _options(server))
    b = inspector.load(_url(server, kind, "other.safetensors"), _options(server))
    result = inspector.weighted_sum([a, b], [0.25, 0.75])
    local_a = inspector.load(root / "model.safetensors")
    local_b = inspector.load(root / "other.safetensors")
    w = np.asarray(result["layers"]["3"]["w"])
    reference = 0.25 * np.asarray(local_a["layers"]["3"]["w"], np.float64) + 0.75 * np.asarray(
        local_b["layers"]["3"]["w"], np.float64
    )
    np.testing.assert_allclose(w, reference, rtol=1e-6, atol=1e-6)
    assert np.asarray(result["step"]).tolist() == [0, 1, 2]


def test_ops_fetch_several_remote_leaves_at_once(root, http):
    tree = inspector.load(f"{http.url}/model.safetensors")
    http.traffic.reset()
    http.delay = 0.05
    try:
        packed = inspector.pack(tree)
    finally:
        http.delay = 0.0
    assert http.traffic.most_in_flight >= 2, http.traffic.requests
    local = inspector.load(root / "model.safetensors")
    np.testing.assert_array_equal(np.asarray(packed.unpack()["layers"]["5"]["w"]),
                                  np.asarray(local["layers"]["5"]["w"]))


def test_progress_reports_bytes_total_and_rate(http):
    seen = []
    tree = inspector.load(f"{http.url}/model.safetensors", progress=seen.append)
    np.asarray(tree["embed"])
    assert seen and seen[-1].done == seen[-1].total == 512 * 512 * 4
    assert seen[-1].source.endswith("/model.safetensors") and seen[-1].rate > 0


def _fails_within(url, seconds: float, *parts: str, **kwargs) -> str:
    start = time.monotonic()
    with pytest.raises(LoadError) as caught:
        tree = inspector.load(url, **kwargs)
        np.asarray(tree["embed"])
    assert time.monotonic() - start < seconds
    message = str(caught.value)
    for part in parts:
        assert part in message, message
    return message


def test_http_failures_are_load_errors_naming_the_url(http):
    _fails_within(f"{http.url}/missing.safetensors", 5,
                  f"Cannot load {http.url}/missing.safetensors: it was not found on the server")
    _fails_within(f"{http.url}/__status/403/model.safetensors", 5, "access was denied (HTTP 403)")
    _fails_within(f"{http.url}/__status/401/model.safetensors", 5, "access was denied (HTTP 401)")
    _fails_within(f"{http.url}/notes.txt", 5, f"{http.url}/notes.txt: the format is not recognised")
    _fails_within(f"{http.url}/__truncate/model.safetensors", 5, "the response was truncated")
    refused = refused_url()
    _fails_within(f"{refused}/model.safetensors", 5, f"Cannot load {refused}/model.safetensors: "
                  "could not connect to the server")
    with SilentServer() as silent:
        _fails_within(f"{silent.url}/model.safetensors", 4, "did not answer within 1 s",
                      timeout=1)


def test_credentials_never_show_in_messages(http):
    url = http.url.replace("http://", "http://alice:s3cr3t@") + "/missing.safetensors?token=t0k3n"
    message = _fails_within(url, 5, "http://***@127.0.0.1")
    assert "s3cr3t" not in message and "t0k3n" not in message and "alice" not in message


def test_s3_failures_are_load_errors_naming_the_url(s3):
    options = s3.options
    _fails_within(f"s3://{BUCKET}/missing.safetensors", 5,
                  f"Cannot load s3://{BUCKET}/missing.safetensors: it was not found",
                  storage_options=options)
    _fails_within("s3://no-such-bucket/model.safetensors", 5, "it was not found",
                  storage_options=options)
    _fails_within(f"s3://{BUCKET}/notes.txt", 5, "the format is not recognised",
                  storage_options=options)
    _fails_within(f"s3://{BUCKET}/model.safetensors", 8, "could not connect to the server",
                  storage_options={"endpoint_url": refused_url()}, timeout=8)
    with SilentServer() as silent:
        _fails_within(f"s3://{BUCKET}/model.safetensors", 4, "did not answer within 1 s",
                      storage_options={"endpoint_url": silent.url}, timeout=1)
    # moto checks credentials once told to: after 0 more unauthenticated actions
    requests.post(f"{s3.url}/moto-api/reset-auth", data=b"0", timeout=5)
    try:
        _fails_within(f"s3://{BUCKET}/model.safetensors", 5, "access was denied",
                      storage_options={**options, "key": "nobody", "secret": "wrong-secret"})
    finally:
        requests.post(f"{s3.url}/moto-api/reset-auth", data=b"1000000000", timeout=5)


@pytest.mark.parametrize(("url", "module"), [
    ("gs://bucket/model.safetensors", "gcsfs"),
    ("hf://org/model/model.safetensors", "huggingface_hub"),
])
def test_a_missing_filesystem_names_the_extra(monkeypatch, url, module):
    import fsspec  # noqa: F401  (fsspec.registry the attribute is a mapping; the module is here)

    protocol = url.split("://")[0]
    monkeypatch.delitem(sys.modules["fsspec.registry"]._registry, protocol, raising=False)
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingDependencyError) as caught:
        inspector.load(url)
    assert str(caught.value) == (
        f"Cannot load {url}: reading {protocol}:// URLs needs {module}, which is not installed.\n"
        "Install it with: pip install 'pytree-inspector[remote]'")
    assert isinstance(caught.value, ImportError) and not isinstance(caught.value, LoadError)


def test_gs_and_hf_failures_are_load_errors_naming_the_url():
    # gcsfs and huggingface_hub's own clients, pointed at servers on 127.0.0.1; imported first
    # (gcsfs pulls in google-auth: seconds on a busy machine), the bounds are on the loads
    import gcsfs  # noqa: F401
    import huggingface_hub  # noqa: F401

    refused = refused_url()
    _fails_within("hf://org/model/model.safetensors", 5, "Cannot load hf://org/model/model."
                  "safetensors: could not connect to the server", storage_options={
                      "endpoint": refused})
    # gcsfs retries a refused connection with back-off (up to 6 times, fixed in its code):
    # the deadline ends it
    _fails_within("gs://bucket/model.safetensors", 3 + 2, "Cannot load gs://bucket/model."
                  "safetensors: the server did not answer within 3 s", timeout=3,
                  storage_options={"endpoint_url": refused, "token": "anon"})
    with SilentServer() as silent:
        _fails_within("hf://org/model/model.safetensors", 4, "did not answer within 1 s",
                      storage_options={"endpoint": silent.url}, timeout=1)
        _fails_within("gs://bucket/model.safetensors", 1 + 3, "did not answer within 1 s",
                      storage_options={"endpoint_url": silent.url, "token": "anon"}, timeout=1)


def test_a_synchronous_filesystem_reads_through_the_same_path(root):
    # fsspec's memory:// is synchronous (as hf:// is): ranges go through a worker thread
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/remote-test/model.safetensors", (root / "model.safetensors").read_bytes())
    try:
        tree = inspector.load("memory://remote-test/model.safetensors")
        local = inspector.load(root / "model.safetensors")
        assert _rows(tree) == _rows(local)
        np.testing.assert_array_equal(np.asarray(tree["embed"]), np.asarray(local["embed"]))
        _fails_within("memory://remote-test/missing.safetensors", 5,
                      "memory://remote-test/missing.safetensors: it was not found")
    finally:
        fs.rm("/remote-test", recursive=True)
