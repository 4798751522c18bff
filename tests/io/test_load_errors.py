"""Who is at fault when `load` fails: the file (LoadError), a missing library, or the reader.

A reader's bug or a missing optional library must never reach the user as "the file is
damaged": the first says it is a bug and keeps the original traceback, the second names the
package and the pip command.
"""

from __future__ import annotations

import sys
import traceback

import ml_dtypes
import numpy as np
import pytest

import inspector
from inspector.core.errors import (
    InspectorError,
    LoadError,
    MissingDependencyError,
    ReaderBugError,
)
from inspector.io import formats, load, save
from tests.io import fuzz_worker


@pytest.fixture
def npy(tmp_path):
    path = tmp_path / "m.npy"
    np.save(path, np.arange(3.0))
    return path


def _index_bug(path):
    return {"w": [][0]}  # an IndexError no file should cause


@pytest.mark.parametrize(("bug", "name"), [
    (_index_bug, "IndexError: list index out of range"),
    (lambda path: {}["missing"], "KeyError: 'missing'"),
    (lambda path: bytearray(2**60), "MemoryError"),
    (lambda path: len(5), "TypeError: object of type 'int' has no len()"),
])  # fmt: skip
def test_a_reader_bug_says_bug_and_keeps_its_traceback(monkeypatch, npy, bug, name):
    monkeypatch.setitem(formats.LOADERS, "npy", bug)
    with pytest.raises(ReaderBugError) as caught:
        load(npy)
    message = str(caught.value)
    assert message.startswith(f"Cannot load {npy}: the inspector's npy reader failed with {name}")
    assert message.endswith("This is a bug in the inspector, not a fault of the file: please "
                            "report it, with this traceback.")
    assert "damaged" not in message
    assert not isinstance(caught.value, InspectorError | ValueError)  # not the input's fault
    cause = caught.value.__cause__
    assert type(cause).__name__ == name.split(":")[0]
    frames = [frame.name for frame in traceback.extract_tb(cause.__traceback__)]
    assert frames[-1] in (bug.__name__, "<lambda>")


def test_the_index_bug_traceback_names_the_line(monkeypatch, npy):
    monkeypatch.setitem(formats.LOADERS, "npy", _index_bug)
    with pytest.raises(ReaderBugError) as caught:
        load(npy)
    text = "".join(traceback.format_exception(caught.value))
    assert 'return {"w": [][0]}' in text
    assert "The above exception was the direct cause" in text


def test_a_missing_module_names_the_package_and_the_pip_command(monkeypatch, tmp_path):
    path = save({"w": np.ones(2, ml_dtypes.bfloat16)}, tmp_path / "m.safetensors")
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # as if not installed
    with pytest.raises(MissingDependencyError) as caught:
        load(path)
    assert str(caught.value) == (
        f"Cannot load {path}: reading safetensors files needs ml-dtypes, which is not "
        "installed.\nInstall it with: pip install ml-dtypes")
    assert isinstance(caught.value, ImportError | InspectorError)
    assert not isinstance(caught.value, LoadError)


def test_orbax_without_tensorstore_names_the_extra(monkeypatch, tmp_path):
    import orbax.checkpoint as ocp

    path = tmp_path / "ckpt"
    with ocp.PyTreeCheckpointer() as checkpointer:
        checkpointer.save(path, {"w": np.ones(3, np.float32)})
    monkeypatch.setitem(sys.modules, "tensorstore", None)
    with pytest.raises(MissingDependencyError) as caught:
        load(path)
    assert str(caught.value) == (
        f"Cannot load {path}: reading orbax checkpoints needs tensorstore, which is not "
        "installed.\nInstall it with: pip install 'pytree-inspector[orbax]'")


def test_the_errors_are_public():
    assert inspector.MissingDependencyError is MissingDependencyError
    assert inspector.ReaderBugError is ReaderBugError


@pytest.mark.parametrize("raised", [
    ReaderBugError("Cannot load x: the inspector's npy reader failed with IndexError"),
    MissingDependencyError("Cannot load x: reading npy files needs y, which is not installed"),
    MemoryError(),
])  # fmt: skip
def test_the_fuzz_counts_only_a_load_error_as_a_clean_refusal(monkeypatch, npy, raised):
    def reader(path):
        raise raised

    monkeypatch.setitem(formats.LOADERS, "npy", reader)
    verdict, detail = fuzz_worker.verdict(str(npy))
    assert verdict == "bug", detail
    assert type(raised).__name__ in detail
    monkeypatch.setitem(formats.LOADERS, "npy", lambda path: (_ for _ in ()).throw(
        LoadError("Cannot load x: the file is damaged")))
    assert fuzz_worker.verdict(str(npy)) == ("refused", "Cannot load x: the file is damaged")


@pytest.mark.parametrize("read", [inspector.load, inspector.file_info, inspector.check_index])
def test_a_tree_given_where_a_path_is_expected_is_named(read):
    with pytest.raises(TypeError, match=r"expected a checkpoint's path or URL \(str or "
                       r"os.PathLike\), got a dict: pass the file or folder to read"):
        read({"w": np.ones(2)})
