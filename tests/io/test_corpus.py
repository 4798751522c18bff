"""Real third-party files: checkpoints shipped in pinned PyPI wheels, and the test data files that
scipy and h5py install. Each is read by the inspector and by the reference library (safetensors,
h5py, NumPy, or `torch_reference`: torch.load's algorithm) and the two must agree exactly.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import safetensors.numpy
from omegaconf import OmegaConf

import inspector
from inspector.core.errors import LoadError, UnsupportedLeafError
from inspector.io import load
from tests.io import torch_reference
from tests.io.corpus_files import fetch, installed_test_file


@pytest.fixture(scope="session")
def silero():
    return fetch("silero-vad==6.2.3") / "silero_vad/data"


@pytest.fixture(scope="session")
def dists():
    return fetch("DISTS-pytorch==0.1") / "DISTS_pytorch/weights.pt"


@pytest.fixture(scope="session")
def pesto():
    return fetch("pesto-pitch==2.0.1") / "pesto/weights"


def _flat(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _flat(v, f"{prefix}{k}.")
    else:
        yield prefix[:-1], tree


def _arrays(tree) -> dict:
    return {k: np.asarray(v) for k, v in _flat(tree) if isinstance(v, inspector.LazyArray)}


def _assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        w = np.asarray(w)
        assert (got[name].dtype, got[name].shape) == (w.dtype, w.shape), name
        np.testing.assert_array_equal(got[name], w, err_msg=name)


# --- checkpoints from wheels ---------------------------------------------------------------------


def test_silero_vad_safetensors(silero):
    path = silero / "silero_vad_16k.safetensors"
    tree = load(path)
    rows = inspector.describe(tree)
    assert (rows[0].n_leaves, rows[0].n_params, rows[0].nbytes) == (15, 309_633, 1_238_532)
    assert tree["conv1"]["weight"].shape == (128, 129, 3)
    assert tree["stft_conv"]["weight"].shape == (258, 1, 256)
    assert tree["lstm_cell"]["weight_ih"].dtype == np.float32
    reference = safetensors.numpy.load_file(str(path))
    _assert_same(_arrays(tree), reference)
    total = sum(float(np.asarray(x, np.float64).sum()) for x in reference.values())
    assert sum(float(x.astype(np.float64).sum()) for x in _arrays(tree).values()) == total


def test_silero_vad_torchscript_archive_is_refused(silero):
    with pytest.raises(LoadError, match="TorchScript archive .* holds code .*nothing from the file "
                                        "was run"):  # fmt: skip
        load(silero / "silero_vad.jit")


def test_dists_legacy_weights(dists):
    tree = load(dists)
    assert {k: (v.shape, str(v.dtype)) for k, v in tree.items()} == {
        "alpha": ((1, 1475, 1, 1), "float32"), "beta": ((1, 1475, 1, 1), "float32")}
    _assert_same(_arrays(tree), torch_reference.load_legacy(dists))
    # DISTS' weights are a convex split: alpha and beta sum to 1 over their 2950 entries
    both = np.asarray(tree["alpha"], np.float64).sum() + np.asarray(tree["beta"], np.float64).sum()
    assert both == pytest.approx(1.0, abs=1e-6)


def test_pesto_lightning_checkpoint_without_objects(pesto):
    path = pesto / "mir-1k.ckpt"
    tree = load(path)
    reference = torch_reference.load_zip(path)
    want = {f"state_dict.{k}": v for k, v in reference["state_dict"].items()}
    got = {k: v for k, v in _arrays(tree).items() if k.startswith("state_dict.")}
    _assert_same(got, want)
    assert tree["pytorch-lightning_version"] == reference["pytorch-lightning_version"]


def test_pesto_lightning_checkpoint_with_omegaconf_hyper_parameters(pesto):
    path = pesto / "mir-1k_g7.ckpt"
    tree = load(path)  # refused whole before Opaque leaves existed
    reference = torch_reference.load_zip(path)  # real omegaconf objects
    want = {f"state_dict.{k}": v for k, v in reference["state_dict"].items()}
    got = {k: v for k, v in _arrays(tree).items() if k.startswith("state_dict.")}
    assert len(want) == 22
    _assert_same(got, want)
    layers = tree["hparams"]["encoder"]["n_chan_layers"]
    assert isinstance(layers, inspector.Opaque)
    assert layers.type == "omegaconf.listconfig.ListConfig"
    want_layers = reference["hparams"]["encoder"]["n_chan_layers"]
    assert layers.plain() == OmegaConf.to_container(want_layers)
    assert layers.plain() == [40, 30, 30, 10, 3]
    shift = tree["hparams"]["pitch_shift"]
    assert shift.plain() == OmegaConf.to_container(reference["hparams"]["pitch_shift"])
    kinds = {r.path: r.kind for r in inspector.describe(tree)}
    assert kinds["['hparams']['encoder']['n_chan_layers']"] == "opaque"


# --- test files scipy and h5py install ------------------------------------------------------------


def test_scipy_long_double_npz_is_read_and_refused_by_ops():
    path = installed_test_file("scipy", "fftpack/tests/fftw_longdouble_ref.npz")
    tree = load(path)
    with np.load(path) as reference:
        assert sorted(tree) == sorted(reference.files) and len(tree) == 113
        dtypes = {str(np.asarray(tree[k]).dtype) for k in tree}
        assert dtypes == {"float128", "int64"}
        for k in reference.files:
            np.testing.assert_array_equal(np.asarray(tree[k]), reference[k])
    with pytest.raises(UnsupportedLeafError) as info:
        inspector.weighted_sum([tree, tree], [0.5, 0.5])
    assert "112 leaves have a dtype JAX cannot compute on" in str(info.value)
    assert "['dct_1_1024']: <f16, float128 (long double) has no JAX type" in str(info.value)


def test_scipy_npz_with_string_members():
    path = installed_test_file("scipy", "fftpack/tests/test.npz")
    tree = load(path)
    with np.load(path) as reference:
        assert sorted(tree) == sorted(reference.files) and len(tree) == 19
        for k in reference.files:
            np.testing.assert_array_equal(np.asarray(tree[k]), reference[k])
    rows = {r.path: r for r in inspector.describe(tree)}
    assert rows["['__version__']"].dtype == "|S3"
    with pytest.raises(UnsupportedLeafError, match=r"\['__header__'\]: \|S75"):
        inspector.weighted_sum([tree, tree], [0.5, 0.5])


@pytest.mark.parametrize("name", ["DSBEfloat", "DSBEint"])
def test_big_endian_hdf5_datasets_compute_on_their_values(name):
    path = installed_test_file("h5py", "tests/data_files/vlen_string_s390x.h5")
    tree = load(path)
    with h5py.File(path) as f:
        want = f[name][()]
    assert want.dtype.byteorder == ">"  # stored big-endian (written on s390x)
    leaf = tree[name]
    assert leaf.dtype == want.dtype.newbyteorder("=")  # read in native order, same values
    np.testing.assert_array_equal(np.asarray(leaf), want)
    result = inspector.weighted_sum([{"x": leaf}, {"x": leaf}], [0.25, 0.5])
    np.testing.assert_allclose(np.asarray(result["x"], np.float64),
                               0.75 * want.astype(np.float64), rtol=1e-6)  # fmt: skip
    # an in-memory big-endian array is refused, never computed on as swapped bytes
    with pytest.raises(UnsupportedLeafError, match=r"\['x'\]: >[fi]8, stored big-endian"):
        inspector.weighted_sum([{"x": want}, {"x": want}], [0.5, 0.5])
    with pytest.raises(UnsupportedLeafError, match=r"\['x'\]: >[fi]8, stored big-endian"):
        inspector.diff({"x": want}, {"x": np.asarray(leaf)}, values=True)
    with pytest.raises(inspector.InspectorError, match=r"\['x'\]: >[fi]8, stored big-endian"):
        inspector.index({"x": want}, {"x": 1})
    assert inspector.diff({"x": leaf}, {"x": want.astype(leaf.dtype)}, values=True) == []


def test_big_endian_complex_hdf5_datasets():
    path = installed_test_file("h5py", "tests/data_files/compound-dtype-complex.h5")
    tree = load(path)
    with h5py.File(path) as f:
        reference = {k: f[k][()] for k in f}
    assert len(tree) == len(reference) == 6
    for k, want in reference.items():
        assert np.asarray(tree[k]).dtype.byteorder in "=|"
        np.testing.assert_array_equal(np.asarray(tree[k]), want)
    diffs = inspector.diff({"a": tree[">c16"]}, {"a": reference["<c16"]}, values=True)
    assert [d.kind for d in diffs] in ([], ["value"])
