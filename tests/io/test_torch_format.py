"""PyTorch checkpoints read without torch: fixtures from torch.save, and hostile pickles.

The fixtures under `fixtures/` were written by `fixtures/make_torch_fixtures.py` (torch 2.13);
`expected.npz` holds the same values as NumPy arrays.
"""

from __future__ import annotations

import builtins
import os
import pathlib
import pickle
import shutil
import sys
import zipfile

import ml_dtypes
import numpy as np
import pytest

from inspector.io import load, sniff
from tests.io.io_assertions import assert_load_error, assert_tree_equal

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
LEGACY_HEADER = b"".join(
    pickle.dumps(value, protocol=2)
    for value in (
        0x1950A86A20F9469CFC6C,
        1001,
        {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2}},
    )
)


def _expected() -> dict:
    stored = dict(np.load(FIXTURES / "expected.npz"))
    bfloat16_keys = set(stored.pop("__bfloat16_keys__").tolist())
    flat = {}
    for key, value in stored.items():
        if key.startswith("__scalar__."):
            flat[key.removeprefix("__scalar__.")] = value.item()
        elif key in bfloat16_keys:
            flat[key] = value.view(ml_dtypes.bfloat16)
        else:
            flat[key] = value
    nested: dict = {}
    for key, value in flat.items():
        *parents, last = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return nested


@pytest.mark.parametrize(
    "name, fmt", [("state_dict_zip.pt", "torch"), ("state_dict_legacy.pt", "torch-legacy")]
)
def test_fixture_written_by_torch(name, fmt):
    path = FIXTURES / name
    assert sniff(path) == fmt
    tree = load(path)
    assert_tree_equal(tree, _expected())
    assert tree["embed"].dtype == ml_dtypes.bfloat16
    assert "torch" not in sys.modules


def test_views_share_their_storage_with_the_right_offsets_and_strides():
    tree = load(FIXTURES / "state_dict_zip.pt")
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(np.asarray(tree["transposed"]), base.T)
    np.testing.assert_array_equal(np.asarray(tree["offset_rows"]), base[1:3, 2:5])


def test_suffix_does_not_matter(tmp_path):
    path = tmp_path / "pytorch_model.bin"
    shutil.copy(FIXTURES / "state_dict_zip.pt", path)
    assert_tree_equal(load(path), _expected())


def test_leaves_are_memory_mapped_from_the_zip(tmp_path):
    path = tmp_path / "lazy.pt"
    shutil.copy(FIXTURES / "state_dict_zip.pt", path)
    tree = load(path)
    ids = np.arange(7, dtype=np.int64)
    data = path.read_bytes()
    start = data.index(ids.tobytes())
    with open(path, "r+b") as f:  # change the stored bytes after loading
        f.seek(start)
        f.write((ids * 10).tobytes())
    np.testing.assert_array_equal(np.asarray(tree["ids"]), ids * 10)


# --- pickles that try to run code ------------------------------------------------------------


class _RunsSystem:
    def __init__(self, target: pathlib.Path):
        self.target = target

    def __reduce__(self):
        return os.system, (f"touch {self.target}",)


class _OpensFile:
    def __init__(self, target: pathlib.Path):
        self.target = target

    def __reduce__(self):
        return builtins.open, (str(self.target), "w")


def _zip_checkpoint(path: pathlib.Path, data_pkl: bytes, storages: dict[str, bytes] = None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", data_pkl)
        archive.writestr("archive/byteorder", "little")
        for key, raw in (storages or {}).items():
            archive.writestr(f"archive/data/{key}", raw)
        archive.writestr("archive/version", "3\n")
    return path


@pytest.mark.parametrize(
    "payload, refused",
    [
        (_RunsSystem, f"{os.system.__module__}.system"),
        (_OpensFile, f"{builtins.open.__module__}.open"),
    ],
)
@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_pickle_that_calls_a_function_is_refused_and_runs_nothing(
    tmp_path, payload, refused, layout
):
    target = tmp_path / "pwned"
    data = pickle.dumps({"weight": payload(target)}, protocol=2)
    path = tmp_path / f"pickle_with_payload_{layout}.pt"
    if layout == "zip":
        _zip_checkpoint(path, data)
    else:
        path.write_bytes(LEGACY_HEADER + data + pickle.dumps([], protocol=2))
    error = assert_load_error(
        path, f"this file asks to run {refused}: refused; nothing was run", f"the global {refused}"
    )
    assert not target.exists()
    assert error.__cause__ is None


def test_torchscript_archive_is_refused_with_a_hint(tmp_path):
    data = (pickle.PROTO + b"\x02" + pickle.GLOBAL + b"__torch__.Net\nNet\n" + pickle.EMPTY_TUPLE
            + pickle.NEWOBJ + pickle.STOP)  # fmt: skip
    path = _zip_checkpoint(tmp_path / "scripted.pt", data)
    assert_load_error(path, "__torch__.Net.Net", "TorchScript archive")


# --- damaged state dicts, spelled as torch spells them -----------------------------------------


def torch_style_pickle(tensors: dict[str, dict]) -> bytes:
    """Returns a protocol-2 pickle of `{name: tensor}` spelled as torch.save spells it.

    Written opcode by opcode so that the tests need no torch. Each tensor is a dict with keys
    storage (key), storage_type (e.g. "FloatStorage"), numel, offset, shape, stride.
    """

    def text(value: str) -> bytes:
        raw = value.encode()
        return pickle.BINUNICODE + len(raw).to_bytes(4, "little") + raw

    def ints(values) -> bytes:
        body = b"".join(pickle.BININT + int(v).to_bytes(4, "little", signed=True) for v in values)
        return pickle.MARK + body + pickle.TUPLE

    out = [pickle.PROTO, b"\x02", pickle.EMPTY_DICT, pickle.MARK]
    for name, t in tensors.items():
        out += [
            text(name),
            pickle.GLOBAL + b"torch._utils\n_rebuild_tensor_v2\n",
            pickle.MARK,
            pickle.MARK,
            text("storage"),
            pickle.GLOBAL + b"torch\n" + t["storage_type"].encode() + b"\n",
            text(str(t["storage"])),
            text("cpu"),
            pickle.BININT + int(t["numel"]).to_bytes(4, "little"),
            pickle.TUPLE,
            pickle.BINPERSID,
            pickle.BININT + int(t["offset"]).to_bytes(4, "little"),
            ints(t["shape"]),
            ints(t["stride"]),
            pickle.NEWFALSE,
            pickle.GLOBAL + b"collections\nOrderedDict\n",
            pickle.EMPTY_TUPLE,
            pickle.REDUCE,
            pickle.TUPLE,
            pickle.REDUCE,
        ]
    out += [pickle.SETITEMS, pickle.STOP]
    return b"".join(out)


def _tensor(**changes):
    spec = {"storage": "0", "storage_type": "FloatStorage", "numel": 6, "offset": 0,
            "shape": (2, 3), "stride": (3, 1)}  # fmt: skip
    return {**spec, **changes}


def test_hand_written_state_dict_loads(tmp_path):
    raw = np.arange(6, dtype="<f4").tobytes()
    path = _zip_checkpoint(
        tmp_path / "handmade.pt",
        torch_style_pickle({"a.w": _tensor(), "a.t": _tensor(shape=(3, 2), stride=(1, 3))}),
        {"0": raw},
    )
    expected = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_tree_equal(load(path), {"a": {"w": expected, "t": expected.T}})


def test_view_past_the_end_of_its_storage(tmp_path):
    path = _zip_checkpoint(
        tmp_path / "view_out_of_range.pt",
        torch_style_pickle({"w": _tensor(offset=2)}),
        {"0": bytes(24)},
    )
    assert_load_error(path, "the tensor", "['w']", "reaches element 7 of a 6-element storage")


def test_storage_of_the_wrong_size(tmp_path):
    path = _zip_checkpoint(
        tmp_path / "storage_too_small.pt", torch_style_pickle({"w": _tensor()}), {"0": bytes(20)}
    )
    assert_load_error(path, "storage 0 holds 20 bytes but the pickle declares 6 x float32 = 24")


def test_missing_storage(tmp_path):
    path = _zip_checkpoint(tmp_path / "no_storage.pt", torch_style_pickle({"w": _tensor()}))
    assert_load_error(path, "storage 0 has no member archive/data/0")


def test_unknown_storage_type(tmp_path):
    path = _zip_checkpoint(
        tmp_path / "quantized.pt",
        torch_style_pickle({"w": _tensor(storage_type="QInt8Storage")}),
        {"0": bytes(6)},
    )
    assert_load_error(path, "torch.QInt8Storage, which is not a storage type the inspector reads")


def test_truncated_pickle(tmp_path):
    data = torch_style_pickle({"w": _tensor()})
    path = _zip_checkpoint(tmp_path / "truncated_pickle.pt", data[:-30], {"0": bytes(24)})
    assert_load_error(path, "is damaged or truncated")


def test_pickle_declaring_a_huge_bytes_object(tmp_path):
    # BINBYTES8 with a length of 2**62: refused by the scan, before anything is allocated
    data = pickle.PROTO + b"\x04" + b"\x8e" + (2**62).to_bytes(8, "little") + b"xx"
    path = _zip_checkpoint(tmp_path / "huge_length.pt", data)
    assert_load_error(path, "is damaged or truncated")


def test_truncated_legacy_file(tmp_path):
    path = tmp_path / "truncated_legacy.pt"
    data = (FIXTURES / "state_dict_legacy.pt").read_bytes()
    path.write_bytes(data[:-50])
    assert_load_error(path, "records", "elements", "the file has")


def test_truncated_zip_file(tmp_path):
    path = tmp_path / "truncated_zip.pt"
    data = (FIXTURES / "state_dict_zip.pt").read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert_load_error(path, "zip directory is unreadable")
