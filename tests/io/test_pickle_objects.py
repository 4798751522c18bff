"""Foreign objects in PyTorch pickles: inert `Opaque` leaves, or a refusal when they run code.

The Lightning-style checkpoint is written by `lightning_checkpoint.py` in its own interpreter
with real omegaconf, argparse, pathlib and enum objects; reading it must import and call none
of them (checked in a fresh interpreter with `sys.modules` and an audit hook).
"""

from __future__ import annotations

import json
import pathlib
import pickle
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

import inspector
from inspector.core.diff import STATE, TYPE
from inspector.core.errors import UnsupportedLeafError
from inspector.core.node_text import node_text
from inspector.io import load
from tests.io.io_assertions import assert_load_error

ROOT = pathlib.Path(__file__).parents[2]


@pytest.fixture(scope="module")
def lightning(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("lightning")
    subprocess.run([sys.executable, "-m", "tests.io.lightning_checkpoint", str(out)],
                   cwd=ROOT, check=True)  # fmt: skip
    return out


def _flat(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _flat(v, f"{prefix}{k}.")
    elif isinstance(tree, list | tuple):
        for i, v in enumerate(tree):
            yield from _flat(v, f"{prefix}{i}.")
    else:
        yield prefix[:-1], tree


def test_lightning_checkpoint_loads_with_its_objects_as_opaque_leaves(lightning):
    tree = load(lightning / "lightning.ckpt")
    expected = dict(np.load(lightning / "expected.npz"))
    arrays = {k: v for k, v in _flat(tree) if isinstance(v, inspector.LazyArray)}
    assert sorted(arrays) == sorted(expected)  # 7 tensors, every one
    for name, want in expected.items():
        got = np.asarray(arrays[name])
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(got, want)
    plain = json.loads((lightning / "expected.json").read_text())
    hp = tree["hyper_parameters"]
    assert isinstance(hp, inspector.Opaque)
    assert hp.type == "omegaconf.dictconfig.DictConfig"
    assert hp.plain() == plain["hyper_parameters"]  # as OmegaConf.to_container gives it
    assert tree["layers"].type == "omegaconf.listconfig.ListConfig"
    assert tree["layers"].plain() == [64, 64, 10]
    assert tree["args"].type == "argparse.Namespace"
    assert tree["args"].state["seed"] == 7
    assert tree["args"].state["run"] == inspector.Opaque("pathlib.PurePosixPath",
                                                         ["/", "runs", "a"])
    assert tree["precision"] == inspector.Opaque("my_trainer.precision.Precision", "bf16-mixed")
    assert tree["epoch"] == 3 and tree["pytorch-lightning_version"] == "2.4.0"
    # an object holding a tensor (a model pickled whole): the tensor stays inside, readable
    model = tree["model"]
    assert model.type == "my_trainer.nets.Linear"
    assert model.summary() == "\u2039Linear\u203a {3 keys} \u00b7 1 array inside"
    np.testing.assert_array_equal(np.asarray(model.state["_parameters"]["weight"]),
                                  np.load(lightning / "inside.npy"))  # fmt: skip
    assert tree["steps_by_precision"] == {"\u2039Precision\u203a '32-true'": 2}  # an enum key


def test_describe_and_the_tree_say_what_each_object_is(lightning):
    rows = {r.path: r for r in inspector.describe(load(lightning / "lightning.ckpt"))}
    layers = rows["['layers']"]
    assert (layers.kind, layers.type_name, layers.shape, layers.n_leaves) == (
        "opaque", "ListConfig", None, 1)
    assert node_text(layers) == "\u2039ListConfig\u203a [3 items]"
    assert node_text(rows["['hyper_parameters']"]) == "\u2039DictConfig\u203a {2 keys}"
    assert node_text(rows["['precision']"]) == "\u2039Precision\u203a 'bf16-mixed'"
    assert rows[""].n_leaves == 21  # 7 tensors, 9 numbers and strings, 5 objects


_INERT_CHECK = textwrap.dedent("""
    import sys
    from inspector.io import load
    import encodings.cp437  # zipfile decodes member names with it
    load("tests/io/fixtures/state_dict_zip.pt")  # the reader's own imports, before the hook
    events = []
    WATCHED = ("exec", "compile", "os.system", "subprocess.Popen", "os.exec", "os.posix_spawn",
               "os.spawn", "os.fork", "ctypes.dlopen", "builtins.input", "pickle.find_class")
    def hook(event, args):
        if event in WATCHED or (event == "import" and str(args[0]).startswith(
                ("omegaconf", "my_trainer", "argparse", "enum", "yaml", "antlr4"))):
            events.append((event, str(args)[:200]))
    before = set(sys.modules)
    sys.addaudithook(hook)
    tree = load(sys.argv[1])
    assert tree["hyper_parameters"].type == "omegaconf.dictconfig.DictConfig"
    new = sorted(set(sys.modules) - before)
    assert not [m for m in sys.modules if m.startswith(("omegaconf", "my_trainer", "yaml"))], new
    assert not events, events
    print("inert", len(new))
""")


def test_opaque_objects_are_built_without_importing_or_calling_anything(lightning):
    done = subprocess.run([sys.executable, "-c", _INERT_CHECK, str(lightning / "lightning.ckpt")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("inert")


def test_diff_compares_opaque_leaves_by_type_and_state():
    a = {"hp": inspector.Opaque("omegaconf.listconfig.ListConfig", {"_content": [1, 2]}),
         "p": inspector.Opaque("pathlib.PosixPath", ["/", "a"])}
    same = {"hp": inspector.Opaque("omegaconf.listconfig.ListConfig", {"_content": [1, 2]}),
            "p": inspector.Opaque("pathlib.PosixPath", ["/", "a"])}
    assert inspector.diff(a, same) == []
    other = {"hp": inspector.Opaque("omegaconf.listconfig.ListConfig", {"_content": [1, 3]}),
             "p": inspector.Opaque("pathlib.WindowsPath", ["/", "a"])}
    found = {d.path: d for d in inspector.diff(a, other)}
    assert found["['hp']"].kind == STATE
    assert "[1, 2]" in found["['hp']"].a and "[1, 3]" in found["['hp']"].b
    assert (found["['p']"].kind, found["['p']"].a, found["['p']"].b) == (
        TYPE, "pathlib.PosixPath", "pathlib.WindowsPath")


def test_ops_refuse_opaque_leaves_naming_their_path(lightning):
    tree = load(lightning / "lightning.ckpt")
    with pytest.raises(UnsupportedLeafError) as info:
        inspector.weighted_sum([tree, tree], [0.5, 0.5])
    message = str(info.value)
    assert "['layers']: Opaque omegaconf.listconfig.ListConfig (\u2039ListConfig\u203a [3 items])" \
        in message
    assert "['hyper_parameters']: Opaque omegaconf.dictconfig.DictConfig" in message
    assert "select the arrays, e.g. the checkpoint's ['state_dict']" in message
    # the arrays alone work, and equal the arithmetic on the file's values
    result = inspector.weighted_sum([tree["state_dict"]] * 2, [0.5, 0.5])
    np.testing.assert_allclose(np.asarray(result["model"]["encoder"]["weight"]),
                               np.asarray(tree["state_dict"]["model"]["encoder"]["weight"]))


def _reduce_pickle(module: str, name: str) -> bytes:
    arg = b"touch /tmp/pwned"
    return (pickle.PROTO + b"\x02" + pickle.GLOBAL + f"{module}\n{name}\n".encode()
            + pickle.BINUNICODE + len(arg).to_bytes(4, "little") + arg + pickle.TUPLE1
            + pickle.REDUCE + pickle.STOP)  # fmt: skip


def _zip(path: pathlib.Path, data_pkl: bytes, extra: dict | None = None) -> pathlib.Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data_pkl)
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    return path


CODE_GLOBALS = [
    ("os", "system"), ("posix", "system"), ("nt", "system"), ("subprocess", "Popen"),
    ("subprocess", "check_output"), ("builtins", "eval"), ("builtins", "exec"),
    ("builtins", "compile"), ("builtins", "getattr"), ("builtins", "__import__"),
    ("builtins", "open"), ("__builtin__", "eval"), ("importlib", "import_module"),
    ("runpy", "run_path"), ("sys", "exit"), ("shutil", "rmtree"), ("socket", "socket"),
    ("pickle", "loads"), ("_pickle", "loads"), ("marshal", "loads"), ("ctypes", "CDLL"),
    ("types", "CodeType"), ("types", "FunctionType"), ("webbrowser", "open"),
    ("torch.hub", "load"), ("torch.jit", "load"), ("functools", "partial"),
    ("operator", "attrgetter"), ("copyreg", "add_extension"), ("numpy.testing", "runstring"),
]  # fmt: skip


@pytest.mark.parametrize("module, name", CODE_GLOBALS)
def test_a_global_that_runs_code_refuses_the_file(tmp_path, module, name):
    path = _zip(tmp_path / "payload.pt", _reduce_pickle(module, name))
    shown = "builtins" if module == "__builtin__" else module
    assert_load_error(path, f"this file asks to run {shown}.{name}: refused; nothing was run")
    assert not pathlib.Path("/tmp/pwned").exists()


def test_an_object_inside_a_state_dict_asking_for_os_system_is_refused(tmp_path):
    class RunsSystem:
        def __reduce__(self):
            import os

            return os.system, ("touch /tmp/pwned",)

    data = pickle.dumps({"state_dict": {}, "hyper_parameters": {"cb": RunsSystem()}}, protocol=2)
    path = _zip(tmp_path / "lightning_os_system.ckpt", data)
    error = assert_load_error(path, "system: refused; nothing was run")
    assert "this file asks to run posix.system" in str(error) or "nt.system" in str(error)


def test_torchscript_code_in_the_archive_is_refused(tmp_path):
    data = pickle.dumps({"w": 1}, protocol=2)
    path = _zip(tmp_path / "scripted.pt", data, {"archive/code/__torch__/m.py": "def f(): pass"})
    assert_load_error(path, "TorchScript archive", "holds code")


def test_objects_in_a_legacy_format_file(tmp_path):
    import argparse

    from tests.io.test_torch_format import LEGACY_HEADER

    data = pickle.dumps({"args": argparse.Namespace(lr=0.1, layers=[2, 3]), "step": 5}, protocol=2)
    path = tmp_path / "legacy_with_objects.pt"
    path.write_bytes(LEGACY_HEADER + data + pickle.dumps([], protocol=2))
    tree = load(path)
    assert tree == {"args": inspector.Opaque("argparse.Namespace", {"lr": 0.1, "layers": [2, 3]}),
                    "step": 5}  # fmt: skip


@pytest.mark.parametrize("protocol", [2, 4])
def test_numpy_scalars_and_arrays_are_decoded_from_their_bytes(tmp_path, protocol):
    values = {
        "val_loss": np.float64(0.25), "step": np.int64(-7), "flag": np.bool_(True),
        "hist": np.arange(6, dtype=">i2").reshape(2, 3),  # big-endian: read as its values
        "fortran": np.asfortranarray(np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)),
        "names": np.array(["a", "bc"]),  # not numeric: kept as an Opaque
    }  # fmt: skip
    path = _zip(tmp_path / f"metrics_{protocol}.pt", pickle.dumps(values, protocol=protocol))
    tree = load(path)
    for name in ("val_loss", "step", "flag"):
        assert type(tree[name]) is type(values[name]) and tree[name] == values[name]
    for name in ("hist", "fortran"):
        got = tree[name]
        assert isinstance(got, np.ndarray) and got.dtype.byteorder in "=|"
        assert got.dtype == values[name].dtype.newbyteorder("=")
        np.testing.assert_array_equal(got, values[name])
    assert isinstance(tree["names"], inspector.Opaque)
    assert tree["names"].type.endswith("multiarray._reconstruct")
