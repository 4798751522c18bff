"""Writes a PyTorch Lightning-style checkpoint in torch's zip format, without torch.

Run as a script in its own interpreter (`python -m tests.io.lightning_checkpoint OUT_DIR`): it
puts stand-in `torch` modules in `sys.modules` so that the standard pickler spells tensors as
`torch.save` does (`torch._utils._rebuild_tensor_v2` over `torch.FloatStorage` persistent ids),
while the hyper-parameters are pickled by real omegaconf, argparse, pathlib and enum objects,
as Lightning writes them. Beside `lightning.ckpt` it writes `expected.npz` (every tensor by its
dotted path), `inside.npy` (the tensor kept inside a pickled object) and `expected.json` (the
plain content of each object, by omegaconf itself).
"""

from __future__ import annotations

import argparse
import collections
import enum
import io
import json
import pathlib
import pickle
import sys
import types
import zipfile

import numpy as np
from omegaconf import OmegaConf

_STORAGE_NAMES = {np.dtype("float32"): "FloatStorage", np.dtype("int64"): "LongStorage"}


def _stand_in_torch() -> dict:
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):
        raise AssertionError("only pickled, never called")

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    storages = {}
    for dtype, name in _STORAGE_NAMES.items():
        storages[dtype] = type(name, (), {"__module__": "torch"})
        setattr(torch, name, storages[dtype])
    sys.modules.update({"torch": torch, "torch._utils": utils})
    return {"rebuild": _rebuild_tensor_v2, "storages": storages}


class _Storage:
    def __init__(self, key: str, array: np.ndarray):
        self.key, self.array = key, array


class _Tensor:
    """Pickles as `torch._utils._rebuild_tensor_v2(storage, 0, shape, stride, False, {})`."""

    torch: dict = {}

    def __init__(self, storage: _Storage):
        self.storage = storage

    def __reduce__(self):
        a = self.storage.array
        stride = tuple(s // a.itemsize for s in a.strides)
        return self.torch["rebuild"], (self.storage, 0, a.shape, stride, False,
                                       collections.OrderedDict())


class Precision(enum.Enum):
    BF16 = "bf16-mixed"
    F32 = "32-true"


class Linear:
    """A module pickled whole (`torch.save(model)`): an object holding its tensors."""


# as if they came from the training code's own package, which the reading side does not have
Precision.__module__ = "my_trainer.precision"
Linear.__module__ = "my_trainer.nets"
sys.modules["my_trainer"] = types.ModuleType("my_trainer")
sys.modules["my_trainer.precision"] = types.ModuleType("my_trainer.precision")
sys.modules["my_trainer.precision"].Precision = Precision
sys.modules["my_trainer.nets"] = types.ModuleType("my_trainer.nets")
sys.modules["my_trainer.nets"].Linear = Linear


def write(out: pathlib.Path) -> None:
    _Tensor.torch = torch = _stand_in_torch()
    rng = np.random.default_rng(0)
    arrays = {
        "state_dict.model.encoder.weight": rng.standard_normal((8, 4)).astype(np.float32),
        "state_dict.model.encoder.bias": rng.standard_normal(8).astype(np.float32),
        "state_dict.model.head.weight": rng.standard_normal((3, 8)).astype(np.float32),
        "state_dict.model.head.bias": np.zeros(3, np.float32),
        "state_dict.model.steps": np.arange(5, dtype=np.int64),
        "optimizer_states.0.state.0.exp_avg": rng.standard_normal((8, 4)).astype(np.float32),
        "optimizer_states.0.state.0.exp_avg_sq": rng.random((8, 4)).astype(np.float32),
    }
    storages = {name: _Storage(str(k), a) for k, (name, a) in enumerate(arrays.items())}
    tensor = {name: _Tensor(s) for name, s in storages.items()}
    inside = rng.standard_normal((2, 3)).astype(np.float32)  # a tensor inside an object
    storages["inside"] = _Storage(str(len(arrays)), inside)
    model = Linear()
    model.in_features, model.out_features = 3, 2
    model._parameters = collections.OrderedDict(weight=_Tensor(storages["inside"]))
    hparams = OmegaConf.create({
        "model": {"layers": [64, 64, 10], "lr": 0.001, "act": "gelu"},
        "data": {"root": "/data/speech", "batch_size": 32},
    })
    checkpoint = {
        "epoch": 3,
        "global_step": 120,
        "pytorch-lightning_version": "2.4.0",
        "state_dict": collections.OrderedDict(
            (name.removeprefix("state_dict."), t) for name, t in tensor.items()
            if name.startswith("state_dict.")),
        "optimizer_states": [{
            "state": {0: {"exp_avg": tensor["optimizer_states.0.state.0.exp_avg"],
                          "exp_avg_sq": tensor["optimizer_states.0.state.0.exp_avg_sq"]}},
            "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), "params": [0]}],
        }],
        "hparams_name": "kwargs",
        "hyper_parameters": hparams,
        "layers": hparams.model.layers,  # a ListConfig on its own
        "args": argparse.Namespace(seed=7, run=pathlib.PurePosixPath("/runs/a")),
        "precision": Precision.BF16,
        "model": model,
        "steps_by_precision": {Precision.F32: 2},
    }

    def persistent_id(obj):
        if isinstance(obj, _Storage):
            kind = torch["storages"][obj.array.dtype]
            return ("storage", kind, obj.key, "cpu", obj.array.size)
        return None

    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=2)
    pickler.persistent_id = persistent_id
    pickler.dump(checkpoint)
    with zipfile.ZipFile(out / "lightning.ckpt", "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", buffer.getvalue())
        archive.writestr("archive/byteorder", "little")
        for s in storages.values():
            archive.writestr(f"archive/data/{s.key}", s.array.tobytes())
        archive.writestr("archive/version", "3\n")
    np.savez(out / "expected.npz", **arrays)
    np.save(out / "inside.npy", inside)
    (out / "expected.json").write_text(json.dumps({
        "hyper_parameters": OmegaConf.to_container(hparams),
        "layers": OmegaConf.to_container(hparams.model.layers),
    }))


if __name__ == "__main__":
    write(pathlib.Path(sys.argv[1]))
