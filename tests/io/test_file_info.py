"""`file_info`: file-level metadata and problems, per format (headers only)."""

from __future__ import annotations

import numpy as np
import pytest
import safetensors.numpy

import inspector
from inspector.core.errors import LoadError


def test_safetensors_metadata(tmp_path):
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file(
        {"w": np.ones(2, np.float32)}, str(path), metadata={"format": "pt", "step": "1200"}
    )
    info = inspector.file_info(path)
    assert info == inspector.FileInfo("safetensors", info.metadata, ())
    assert dict(info.metadata) == {"format": "pt", "step": "1200"}
    assert sorted(info.lines()) == ["format: pt", "step: 1200"]  # the writer orders them


def test_formats_without_metadata_have_none(tmp_path):
    path = inspector.save({"w": np.ones(2, np.float32)}, tmp_path / "m.npz")
    info = inspector.file_info(path)
    assert (info.format, dict(info.metadata), info.problems) == ("npz", {}, ())


def test_metadata_is_read_only(tmp_path):
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({"w": np.ones(2, np.float32)}, str(path), metadata={"a": "b"})
    with pytest.raises(TypeError):
        inspector.file_info(path).metadata["a"] = "c"


def test_long_metadata_is_cut_for_display():
    info = inspector.FileInfo("gguf", {f"k{i}": "x" * 300 for i in range(45)})
    lines = info.lines()
    assert len(lines) == 41 and lines[-1] == "… and 5 more keys"
    assert lines[0] == "k0: " + "x" * 157 + "…"


def test_an_unreadable_file_is_a_load_error(tmp_path):
    path = tmp_path / "m.bin"
    path.write_bytes(b"\x01\x02\x03")
    with pytest.raises(LoadError, match="the format is not recognised"):
        inspector.file_info(path)
