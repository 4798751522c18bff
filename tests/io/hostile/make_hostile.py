"""Writes the hostile-input corpus that `tests/io/test_hostile.py` loads (one file per case).

Each case is a small file (or orbax folder) named for what it tries: reading outside the file,
shapes larger than their storage, decompression bombs, pickles that build state onto the
reader's stand-ins or expand exponentially. Nothing here needs torch: the PyTorch cases are
pickles written opcode by opcode, zipped as `torch.save` zips them. Re-run it when a case is
added (the files are committed; `test_hostile.py` asserts every file's verdict):

    PYTHONPATH=. .venv/bin/python tests/io/hostile/make_hostile.py
"""

from __future__ import annotations

import io
import json
import pickle
import shutil
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
CASES = {}
BOMB_BYTES = 320 * 2**20  # above limits.INFLATE_FLOOR, and 32x any of these files


def case(name: str):
    """Registers a builder writing the case `name` (a file, or a folder for orbax)."""

    def register(build):
        CASES[name] = build
        return build

    return register


# --- HDF5 ----------------------------------------------------------------------------------


@case("hdf5_external_storage.h5")
def _(path):
    import h5py

    with h5py.File(path, "w") as f:
        f.create_dataset("layer/w", shape=(16,), dtype="u1", external=[("/etc/passwd", 0, 16)])


@case("hdf5_virtual_dataset.h5")
def _(path):
    import h5py

    layout = h5py.VirtualLayout(shape=(4,), dtype="f8")
    layout[:] = h5py.VirtualSource("/etc/other.h5", "x", shape=(4,))
    with h5py.File(path, "w") as f:
        f.create_virtual_dataset("layer/v", layout)


@case("hdf5_unallocated_bomb.h5")
def _(path):
    import h5py

    with h5py.File(path, "w") as f:  # chunks never written: reading fills BOMB_BYTES
        f.create_dataset("w", shape=(BOMB_BYTES // 4,), dtype="f4", chunks=(2**20,))


@case("hdf5_gzip_bomb.h5")
def _(path):
    import h5py

    with h5py.File(path, "w") as f:
        d = f.create_dataset("w", shape=(BOMB_BYTES,), dtype="u1", chunks=(2**24,),
                             compression="gzip", compression_opts=9)  # fmt: skip
        for start in range(0, BOMB_BYTES, 2**24):
            d[start : start + 2**24] = np.ones(2**24, np.uint8)


@case("hdf5_truncated.h5")
def _(path):
    import h5py

    with h5py.File(path, "w") as f:
        f.create_dataset("w", data=np.arange(4096, dtype=np.float32))
    path.write_bytes(path.read_bytes()[:-1024])


# --- PyTorch -------------------------------------------------------------------------------


def _text(value: str) -> bytes:
    raw = value.encode()
    return pickle.BINUNICODE + len(raw).to_bytes(4, "little") + raw


def _int(value: int) -> bytes:
    return pickle.LONG1 + bytes([8]) + int(value).to_bytes(8, "little", signed=True)


def _ints(values) -> bytes:
    return pickle.MARK + b"".join(_int(v) for v in values) + pickle.TUPLE


def _tensor_ops(storage: str, numel: int, offset: int, shape, stride, kind="FloatStorage"):
    return b"".join([
        pickle.GLOBAL + b"torch._utils\n_rebuild_tensor_v2\n",
        pickle.MARK, pickle.MARK, _text("storage"),
        pickle.GLOBAL + b"torch\n" + kind.encode() + b"\n",
        _text(storage), _text("cpu"), _int(numel), pickle.TUPLE, pickle.BINPERSID,
        _int(offset), _ints(shape), _ints(stride), pickle.NEWFALSE,
        pickle.GLOBAL + b"collections\nOrderedDict\n", pickle.EMPTY_TUPLE, pickle.REDUCE,
        pickle.TUPLE, pickle.REDUCE,
    ])  # fmt: skip


def _state_dict(tensors: dict[str, bytes]) -> bytes:
    body = b"".join(_text(name) + ops for name, ops in tensors.items())
    return pickle.PROTO + b"\x02" + pickle.EMPTY_DICT + pickle.MARK + body + pickle.SETITEMS


def _torch_zip(path, data_pkl: bytes, storages=None, compress_pkl=False, compress_data=False):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", data_pkl,
                         zipfile.ZIP_DEFLATED if compress_pkl else zipfile.ZIP_STORED)  # fmt: skip
        archive.writestr("archive/byteorder", "little")
        for key, raw in (storages or {}).items():
            if callable(raw):
                with archive.open(f"archive/data/{key}", "w", force_zip64=True) as member:
                    raw(member)
            else:
                archive.writestr(f"archive/data/{key}", raw)
        archive.writestr("archive/version", "3\n")


@case("torch_stride0_bomb.pt")
def _(path):  # float32[3e9] over one 4-byte element: 11 GiB on read
    _torch_zip(path, _state_dict({"w": _tensor_ops("0", 1, 0, (3_000_000_000,), (0,))})
               + pickle.STOP, {"0": np.float32(1).tobytes()})  # fmt: skip


@case("torch_overlapping_view.pt")
def _(path):  # float32[4096, 4096] reading the same 8191 elements over and over
    _torch_zip(path, _state_dict({"w": _tensor_ops("0", 8191, 0, (4096, 4096), (1, 1))})
               + pickle.STOP, {"0": bytes(4 * 8191)})  # fmt: skip


@case("torch_view_past_storage.pt")
def _(path):
    _torch_zip(path, _state_dict({"w": _tensor_ops("0", 6, 4, (2, 3), (3, 1))}) + pickle.STOP,
               {"0": bytes(24)})  # fmt: skip


def _shared_lists(levels: int) -> bytes:
    # a list holding the previous one twice, `levels` deep: 2**levels nodes once expanded
    out = [pickle.PROTO, b"\x02", pickle.EMPTY_LIST, pickle.BINPUT, b"\x00"]
    for level in range(1, levels + 1):
        previous = (level - 1).to_bytes(4, "little")
        out += [pickle.POP, pickle.MARK, pickle.LONG_BINGET + previous,
                pickle.LONG_BINGET + previous, pickle.LIST,
                pickle.LONG_BINPUT + level.to_bytes(4, "little")]  # fmt: skip
    return b"".join(out)


@case("torch_shared_refs_exponential.pt")
def _(path):
    pkl = pickle.PROTO + b"\x02" + pickle.EMPTY_DICT + _text("w") + _shared_lists(40)[2:]
    _torch_zip(path, pkl + pickle.SETITEM + pickle.STOP)


@case("torch_shared_refs_legacy.pt")
def _(path):
    header = b"".join(pickle.dumps(v, protocol=2) for v in (
        0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}))
    path.write_bytes(header + _shared_lists(40) + pickle.STOP + pickle.dumps([], protocol=2))


@case("torch_foreign_refs_exponential.pt")
def _(path):  # objects of a foreign class, each built from the previous one twice: 2**40 nodes
    out = [pickle.PROTO, b"\x02", pickle.GLOBAL, b"trainer.hooks\nHook\n", pickle.BINPUT, b"\x00",
           pickle.EMPTY_TUPLE, pickle.REDUCE, pickle.LONG_BINPUT, (1).to_bytes(4, "little")]
    for level in range(1, 41):
        previous = level.to_bytes(4, "little")
        out += [pickle.POP, pickle.BINGET, b"\x00", pickle.MARK, pickle.LONG_BINGET + previous,
                pickle.LONG_BINGET + previous, pickle.TUPLE, pickle.REDUCE,
                pickle.LONG_BINPUT + (level + 1).to_bytes(4, "little")]  # fmt: skip
    pkl = (pickle.PROTO + b"\x02" + pickle.EMPTY_DICT + _text("w") + b"".join(out)[2:]
           + pickle.SETITEM + pickle.STOP)  # fmt: skip
    _torch_zip(path, pkl)


@case("torch_poison_foreign_class.pt")
def _(path):  # BUILD {"dotted": "os.system"} onto the class a foreign global resolves to
    pkl = (pickle.PROTO + b"\x02" + pickle.GLOBAL + b"trainer.hooks\nHook\n" + pickle.EMPTY_DICT
           + _text("dotted") + _text("os.system") + pickle.SETITEM + pickle.BUILD + pickle.STOP)
    _torch_zip(path, pkl)


@case("torch_cyclic_list.pt")
def _(path):  # a list appended to itself
    pkl = (pickle.PROTO + b"\x02" + pickle.EMPTY_LIST + pickle.BINPUT + b"\x00"
           + pickle.BINGET + b"\x00" + pickle.APPEND + pickle.STOP)  # fmt: skip
    _torch_zip(path, pkl)


@case("torch_deep_nesting.pt")
def _(path):  # 5,000 lists, each inside the next
    pkl = (pickle.PROTO + b"\x02" + pickle.EMPTY_LIST * 5000 + pickle.APPEND * 4999
           + pickle.STOP)  # fmt: skip
    _torch_zip(path, pkl)


@case("torch_poison_storage_dtype.pt")
def _(path):  # BUILD {"dtype": <torch.int8 stand-in>} onto the shared FloatStorage stand-in
    pkl = (pickle.PROTO + b"\x02" + pickle.GLOBAL + b"torch\nFloatStorage\n" + pickle.EMPTY_DICT
           + _text("dtype") + pickle.GLOBAL + b"torch\nint8\n" + pickle.SETITEM + pickle.BUILD
           + pickle.POP + pickle.EMPTY_DICT + pickle.STOP)  # fmt: skip
    _torch_zip(path, pkl)


@case("torch_poison_function_defaults.pt")
def _(path):  # BUILD (None, {"__defaults__": ...}) onto an allowed function (slot state)
    pkl = (pickle.PROTO + b"\x02" + pickle.GLOBAL + b"torch._utils\n_rebuild_tensor_v2\n"
           + pickle.NONE + pickle.EMPTY_DICT + _text("__defaults__") + pickle.MARK + _int(7)
           + pickle.TUPLE + pickle.SETITEM + pickle.TUPLE2 + pickle.BUILD + pickle.POP
           + pickle.EMPTY_DICT + pickle.STOP)  # fmt: skip
    _torch_zip(path, pkl)


@case("torch_poison_state_dict_class.pt")
def _(path):  # BUILD (None, {"__init__": torch.Size}) onto the OrderedDict stand-in class
    pkl = (pickle.PROTO + b"\x02" + pickle.GLOBAL + b"collections\nOrderedDict\n"
           + pickle.NONE + pickle.EMPTY_DICT + _text("__init__")
           + pickle.GLOBAL + b"torch\nSize\n" + pickle.SETITEM + pickle.TUPLE2 + pickle.BUILD
           + pickle.POP + pickle.EMPTY_DICT + pickle.STOP)  # fmt: skip
    _torch_zip(path, pkl)


@case("torch_reduce_os_system.pt")
def _(path):
    pkl = (pickle.PROTO + b"\x02" + pickle.GLOBAL + b"os\nsystem\n" + _text("touch /tmp/pwned")
           + pickle.TUPLE1 + pickle.REDUCE + pickle.STOP)  # fmt: skip
    _torch_zip(path, pkl)


def _zeros_writer(nbytes: int):
    def write(member):
        block = bytes(2**22)
        for _ in range(nbytes // len(block)):
            member.write(block)

    return write


@case("torch_compressed_storage_bomb.pt")
def _(path):
    numel = BOMB_BYTES // 4
    pkl = _state_dict({"w": _tensor_ops("0", numel, 0, (numel,), (1,))}) + pickle.STOP
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", pkl)
        info = zipfile.ZipInfo("archive/data/0")
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as member:
            _zeros_writer(BOMB_BYTES)(member)


@case("torch_compressed_pickle_bomb.pt")
def _(path):  # data.pkl: a valid pickle, then BOMB_BYTES of zeros after its STOP
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        info = zipfile.ZipInfo("archive/data.pkl")
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as member:
            member.write(pickle.dumps({}, protocol=2))
            _zeros_writer(BOMB_BYTES)(member)


@case("torch_pickle_crc_mismatch.pt")
def _(path):  # one byte of data.pkl changed after zipping: its CRC-32 no longer matches
    data_pkl = _state_dict({"w": _tensor_ops("0", 2, 0, (2,), (1,))})
    _torch_zip(path, data_pkl, {"0": bytes(8)})
    data = bytearray(path.read_bytes())
    data[data.index(data_pkl) + len(data_pkl) // 2] ^= 0x01
    path.write_bytes(bytes(data))


# --- NumPy ---------------------------------------------------------------------------------


def _npy_header(shape, descr="<f4") -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


@case("npz_deflate_bomb.npz")
def _(path):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("w.npy", "w", force_zip64=True) as member:
            member.write(_npy_header((BOMB_BYTES // 4,)))
            _zeros_writer(BOMB_BYTES)(member)


@case("npz_declared_size_mismatch.npz")
def _(path):  # the .npy header says 4 GiB; the zip member holds 40 bytes of data
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("w.npy", _npy_header((2**30,)) + bytes(40))


@case("npz_stored_member_past_end.npz")
def _(path):  # the central directory claims the stored member is 1 MiB longer than it is
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("w.npy", _npy_header((4,)) + bytes(16))
    data = bytearray(path.read_bytes())
    central = data.rindex(b"PK\x01\x02")
    for field in (20, 24):  # compressed and uncompressed sizes
        (size,) = struct.unpack_from("<I", data, central + field)
        struct.pack_into("<I", data, central + field, size + 2**20)
    path.write_bytes(bytes(data))


@case("npz_directory_offset_past_itself.npz")
def _(path):  # the end record puts the central directory 100 bytes later than it is
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("w.npy", _npy_header((4,)) + bytes(16))
    data = bytearray(path.read_bytes())
    end = data.rindex(b"PK\x05\x06")
    (offset,) = struct.unpack_from("<I", data, end + 16)
    struct.pack_into("<I", data, end + 16, offset + 100)  # zipfile then puts w.npy at -100
    path.write_bytes(bytes(data))


@case("npz_object_array.npz")
def _(path):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("w.npy", _npy_header((1,), "|O") + pickle.dumps([1], protocol=2))


@case("npy_shape_past_data.npy")
def _(path):
    path.write_bytes(_npy_header((2**40,)) + bytes(16))


# --- safetensors ---------------------------------------------------------------------------


def _safetensors(path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@case("safetensors_offsets_past_end.safetensors")
def _(path):
    _safetensors(path, {"w": {"dtype": "F32", "shape": [2**30],
                              "data_offsets": [0, 2**32]}}, bytes(16))  # fmt: skip


@case("safetensors_shape_bomb.safetensors")
def _(path):  # offsets inside the file, a shape 2**60 times larger
    _safetensors(path, {"w": {"dtype": "F32", "shape": [2**30, 2**30],
                              "data_offsets": [0, 16]}}, bytes(16))  # fmt: skip


@case("safetensors_overlapping.safetensors")
def _(path):
    _safetensors(path, {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                        "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}},
                 bytes(24))  # fmt: skip


@case("safetensors_index_escape.safetensors.index.json")
def _(path):
    path.write_text(json.dumps({"weight_map": {"w": "../../../etc/passwd"}}))


@case("safetensors_index_absolute.safetensors.index.json")
def _(path):
    path.write_text(json.dumps({"weight_map": {"w": "/etc/passwd"}}))


# --- flax msgpack --------------------------------------------------------------------------


def _msgpack_array(shape, dtype: str, payload_len: int, payload: bytes) -> bytes:
    import msgpack

    inner = (b"\x93" + msgpack.packb(list(shape)) + msgpack.packb(dtype)
             + b"\xc6" + struct.pack(">I", payload_len) + payload)  # fmt: skip
    return b"\xc9" + struct.pack(">I", len(inner)) + b"\x01" + inner


@case("msgpack_shape_bomb.msgpack")
def _(path):  # float32[2**40] whose payload is 16 bytes
    path.write_bytes(b"\x81\xa1w" + _msgpack_array((2**40,), "float32", 16, bytes(16)))


@case("msgpack_payload_past_end.msgpack")
def _(path):
    path.write_bytes(b"\x81\xa1w" + _msgpack_array((2**28,), "float32", 2**30, bytes(16)))


@case("msgpack_huge_count.msgpack")
def _(path):  # an array declaring 2**32 - 1 entries
    path.write_bytes(b"\xdd\xff\xff\xff\xff\x00")


@case("msgpack_deep_nesting.msgpack")
def _(path):
    path.write_bytes(b"\x91" * 5000 + b"\x00")


# --- orbax ---------------------------------------------------------------------------------


def _orbax(path, arrays: dict[str, np.ndarray]) -> None:
    import orbax.checkpoint as ocp

    shutil.rmtree(path, ignore_errors=True)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path.absolute(), arrays)


@case("orbax_name_escape")
def _(path):  # _METADATA names an array "../../etc": tensorstore would read above the folder
    _orbax(path, {"w": np.arange(4, dtype=np.float32)})
    metadata = json.loads((path / "_METADATA").read_text())
    (entry,) = metadata["tree_metadata"].values()
    entry["key_metadata"][0]["key"] = "../../etc"
    (path / "_METADATA").write_text(json.dumps(metadata))


@case("orbax_zarr_shape_bomb")
def _(path):  # plain zarr folders: the .zarray declares 2**40 elements
    import orbax.checkpoint as ocp

    shutil.rmtree(path, ignore_errors=True)
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=False)
    with ocp.Checkpointer(handler) as checkpointer:
        checkpointer.save(path.absolute(), {"w": np.arange(4, dtype=np.float32)})
    zarray = json.loads((path / "w" / ".zarray").read_text())
    zarray["shape"] = [2**40]
    (path / "w" / ".zarray").write_text(json.dumps(zarray))


def main(names: list[str]) -> None:
    for name, build in CASES.items():
        if names and name not in names:
            continue
        target = HERE / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        build(target)
        size = sum(p.stat().st_size for p in target.rglob("*")) if target.is_dir() else (
            target.stat().st_size)
        print(f"{name}: {size} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
