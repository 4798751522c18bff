"""The saver's writer thread: positioned writes in any order, a bounded backlog, and its
errors raised in the saver (which then leaves no file)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import inspector
from inspector.io import positioned_writer
from inspector.io.positioned_writer import PositionedWriter


def test_pieces_land_at_their_offsets_and_the_backlog_stays_bounded(tmp_path, monkeypatch):
    pieces = [np.full(1000, i, np.uint8) for i in range(20)]
    seen = []
    real = os.pwrite

    def slow_pwrite(fd, data, offset):
        seen.append(writer._pending)
        return real(fd, data, offset)

    with open(tmp_path / "f", "wb") as f:
        writer = PositionedWriter(f.fileno(), pending_bytes=2500)
        monkeypatch.setattr(positioned_writer.os, "pwrite", slow_pwrite)
        for i in reversed(range(20)):
            writer.put(1000 * i, pieces[i])
        writer.close()
    data = np.frombuffer((tmp_path / "f").read_bytes(), np.uint8)
    np.testing.assert_array_equal(data, np.concatenate(pieces))
    assert max(seen) <= 2500


def test_a_write_error_is_raised_in_the_saver_and_no_file_is_left(tmp_path, monkeypatch):
    def failing(fd, data, offset):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(positioned_writer.os, "pwrite", failing)
    out = tmp_path / "out" / "m.safetensors"
    out.parent.mkdir()
    with pytest.raises(OSError, match="No space"):
        inspector.save({"a": np.ones(1000, np.float32), "b": np.zeros(10, np.int32)}, out)
    assert list(out.parent.iterdir()) == []
    assert not [t for t in threading.enumerate() if t.name == "inspector-writer"]


def test_a_leaf_failing_mid_save_stops_the_writer_and_leaves_no_file(tmp_path):
    class Broken:
        shape, dtype = (4,), np.dtype(np.float32)

        def __array__(self, dtype=None, copy=None):
            raise RuntimeError("the kernel failed")

    out = tmp_path / "out" / "m.safetensors"
    out.parent.mkdir()
    tree = {"a": np.arange(1000, dtype=np.float32),
            "b": inspector.LazyArray((4,), np.float32, lambda: Broken().__array__())}
    with pytest.raises(RuntimeError, match="kernel failed"):
        inspector.save(tree, out)
    assert list(out.parent.iterdir()) == []
    assert not [t for t in threading.enumerate() if t.name == "inspector-writer"]
