"""`inspector.timeline`: planted faults, orbax and numbered-file folders, one read per leaf."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

import inspector
from inspector.core.lazy import LazyArray
from tests.core.health_runs import (
    ADDED,
    DOUBLING,
    FROZEN,
    INF_LEAF,
    NAN_LEAF,
    STEPS,
    planted_run,
)


def finite(x):
    x = np.asarray(x, np.float64).ravel()
    return np.where(np.isfinite(x), x, 0.0)


def test_planted_faults_are_found():
    run = planted_run()
    t = inspector.timeline(run, labels=STEPS)
    assert t.frozen() == [FROZEN]
    assert t.first_nonfinite() == {NAN_LEAF: 3, INF_LEAF: 5}
    nonfinite = t.table("nonfinite")
    assert nonfinite.values[nonfinite.rows.index(INF_LEAF)].tolist() == [0, 0, 0, 0, 1, 0]
    changes = t.structure_changes()
    assert [(c.label, c.path, c.kind) for c in changes] == [(4, ADDED, "extra")]
    l2 = t.table("l2")
    doubling = l2.values[l2.rows.index(DOUBLING)]
    np.testing.assert_allclose(doubling[1:] / doubling[:-1], 2.0, rtol=1e-6)
    added = l2.values[l2.rows.index(ADDED)]
    assert np.isnan(added[:3]).all() and added[3] == pytest.approx(4 * math.sqrt(3))


def test_figures_match_numpy_float64():
    run = planted_run()
    t = inspector.timeline(run, labels=STEPS)
    rel, cos, mx = t.table("rel_change"), t.table("cosine"), t.table("max_abs")
    for path, get in ((DOUBLING, lambda r: r["dec"]["doubling"]),
                      ("['enc']['moving']", lambda r: r["enc"]["moving"]),
                      (INF_LEAF, lambda r: r["dec"]["inf_at_5"])):
        i = rel.rows.index(path)
        assert np.isnan(rel.values[i, 0]) and np.isnan(cos.values[i, 0])
        for s in range(1, len(run)):
            a, b = np.asarray(get(run[s - 1]), np.float64).ravel(), \
                np.asarray(get(run[s]), np.float64).ravel()
            both = np.isfinite(a) & np.isfinite(b)
            a0, b0 = np.where(both, a, 0), np.where(both, b, 0)
            assert rel.values[i, s] == pytest.approx(np.linalg.norm(b0 - a0)
                                                     / np.linalg.norm(a0), rel=1e-5)
            assert cos.values[i, s] == pytest.approx(
                a0 @ b0 / np.linalg.norm(a0) / np.linalg.norm(b0), rel=1e-5)
            assert mx.values[i, s] == np.abs(finite(b)).max()


def test_table_aggregates_subtrees():
    run = planted_run()
    t = inspector.timeline(run, labels=STEPS)
    by_depth = t.table("l2", depth=1)
    assert by_depth.rows == ["['dec']", "['enc']"] or by_depth.rows == ["['enc']", "['dec']"]
    for row, key in ((by_depth.rows.index("['dec']"), "dec"), (by_depth.rows.index("['enc']"),
                                                              "enc")):
        want = [math.sqrt(sum((finite(x) ** 2).sum() for x in r[key].values())) for r in run]
        np.testing.assert_allclose(by_depth.values[row], want, rtol=1e-6)
    rel = t.table("rel_change", paths=["['enc']", ""])
    assert rel.rows == ["['enc']", ""]
    a = np.concatenate([finite(x) for k, x in sorted(run[1]["enc"].items())])
    b = np.concatenate([finite(x) for k, x in sorted(run[2]["enc"].items())])
    # step 3 adds a NaN to nan_from_3: its element is left out of both sides
    mask = np.isfinite(np.concatenate([np.asarray(x, np.float64).ravel()
                                       for k, x in sorted(run[2]["enc"].items())]))
    a, b = a * mask, b * mask
    assert rel.values[0, 2] == pytest.approx(np.linalg.norm(b - a) / np.linalg.norm(a), rel=1e-5)
    with pytest.raises(ValueError, match="rel_change"):
        t.table("speed")


def counting(tree, reads: list):
    """`tree` saved and loaded back with every leaf read recorded by its source."""
    import jax

    def wrap(leaf):
        def read(leaf=leaf):
            reads.append(leaf.source)
            return leaf.read()
        return LazyArray(leaf.shape, leaf.dtype, read, source=leaf.source)

    return jax.tree.map(wrap, tree, is_leaf=lambda x: isinstance(x, LazyArray))


def test_numbered_safetensors_folder_read_once(tmp_path, monkeypatch):
    run = planted_run()
    for step, tree in zip(STEPS, run, strict=True):
        inspector.save(tree, tmp_path / f"ckpt_{step * 1000}.safetensors")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    reads: list = []
    import inspector.health as health

    real = health.load
    monkeypatch.setattr(health, "load", lambda path: counting(real(path), reads))
    t = inspector.timeline(tmp_path)
    assert t.labels == [s * 1000 for s in STEPS]
    assert len(reads) == len(set(reads)) == sum(len(inspector.describe(r)) - 3 for r in run)
    assert t.frozen() == [FROZEN]
    assert t.first_nonfinite() == {NAN_LEAF: 3000, INF_LEAF: 5000}
    assert [(c.label, c.path) for c in t.structure_changes()] == [(4000, ADDED)]


def test_a_folder_takes_the_run_s_naming_series_and_says_what_it_left_out(tmp_path):
    """A stray numbered file (`fp8.safetensors` beside `ckpt_#.safetensors`) is not a step;
    Lightning's `epoch=#-step=#.ckpt` names are one series whatever the epoch."""
    from inspector.core.health.sources import checkpoint_series

    run = planted_run()[:3]
    for step, tree in zip((1000, 2000, 3000), run, strict=True):
        inspector.save(tree, tmp_path / f"ckpt_{step}.safetensors")
    inspector.save(run[0], tmp_path / "fp8.safetensors")
    inspector.save(run[0], tmp_path / "last.safetensors")  # no number: never a step
    t = inspector.timeline(tmp_path)
    assert t.labels == [1000, 2000, 3000]
    assert [p.name for p in t.left_out] == ["fp8.safetensors"]
    assert t.first_nonfinite() == {NAN_LEAF: 3000}

    lightning = tmp_path / "lightning"
    lightning.mkdir()
    for name in ("epoch=0-step=50.ckpt", "epoch=1-step=100.ckpt", "epoch=10-step=1000.ckpt",
                 "last.ckpt"):
        (lightning / name).write_bytes(b"")
    found, left_out = checkpoint_series(lightning)
    assert [(s, p.name) for s, p in found] == [
        (50, "epoch=0-step=50.ckpt"), (100, "epoch=1-step=100.ckpt"),
        (1000, "epoch=10-step=1000.ckpt")] and left_out == []

    tie = tmp_path / "tie"  # two series of one entry each: no run to prefer, both taken
    tie.mkdir()
    for name in ("a_1.npz", "b_2.npz"):
        (tie / name).write_bytes(b"")
    assert [(s, p.name) for s, p in checkpoint_series(tie)[0]] == [(1, "a_1.npz"),
                                                                   (2, "b_2.npz")]


def test_orbax_checkpoint_manager_folder(tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    run = planted_run()[:4]
    with ocp.CheckpointManager(tmp_path / "run") as manager:
        for step, tree in zip((10, 20, 30, 40), run, strict=True):
            manager.save(step, args=ocp.args.StandardSave(tree))
        manager.wait_until_finished()
    t = inspector.timeline(tmp_path / "run")
    assert t.labels == [10, 20, 30, 40]
    assert t.frozen() == [FROZEN]
    assert t.first_nonfinite() == {NAN_LEAF: 30}
    same = inspector.timeline(run)
    np.testing.assert_allclose(t.table("rel_change").values, same.table("rel_change").values,
                               rtol=1e-6)


def test_progress_and_bad_labels():
    run = planted_run()[:2]
    told = []
    inspector.timeline(run, progress=lambda d, n: told.append((d, n)))
    assert told[-1] == (told[-1][1], told[-1][1])
    with pytest.raises(ValueError, match="2 checkpoints but 3 labels"):
        inspector.timeline(run, labels=[1, 2, 3])


def test_one_byte_and_bool_leaves_count_changed_bits():
    """float8 codes, int8 and bool leaves (an FP8 run's checkpoints) go through the step
    kernel's bitwise comparison too."""
    import ml_dtypes

    a = {"w": np.arange(6).astype(ml_dtypes.float8_e4m3fn), "b": np.array([True, False]),
         "i": np.arange(3, dtype=np.int8)}
    b = {"w": (np.arange(6) + 1).astype(ml_dtypes.float8_e4m3fn), "b": np.array([True, True]),
         "i": np.arange(3, dtype=np.int8)}
    t = inspector.timeline([a, b])
    table = t.table("changed")
    assert table.rows == ["['b']", "['i']", "['w']"]
    assert table.values[:, 1].tolist() == [0.5, 0.0, 1.0]
    assert t.frozen() == ["['i']"]


def test_host_steps_chunk_by_chunk_match_numpy_float64():
    from inspector.core.health import step_kernel as sk
    from inspector.core.health.host_step import CHUNK, host_steps

    rng = np.random.default_rng(7)
    n = 2 * CHUNK + 123  # three chunks, the last one short
    a = rng.standard_normal(n).astype(np.float32)
    b = a + np.float32(1e-3) * rng.standard_normal(n).astype(np.float32)
    b[:1000] = a[:1000]  # unchanged elements are not counted as changed
    b[5] = -0.0 if a[5] == 0 else b[5]
    c = rng.standard_normal(77).astype(np.float32)  # another shape: not paired
    got = host_steps([a, b, c], [False, True, False])
    kernel = sk.step_kernel(n, "float32", "float32")
    for row, (x, y) in zip(got[:2], [(a, a), (a, b)], strict=True):
        want = np.asarray(kernel(x, y), np.float64)
        np.testing.assert_allclose(row, want, rtol=1e-5)
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        np.testing.assert_allclose(row[[0, 3, 4, 5]], [y64 @ y64, (y64 - x64) @ (y64 - x64),
                                                       x64 @ x64, x64 @ y64], rtol=1e-6)
        assert row[1] == np.abs(y).max() and row[6] == np.count_nonzero(
            x.view(np.uint32) != y.view(np.uint32))
    c64 = c.astype(np.float64)
    assert got[2, 0] == pytest.approx(c64 @ c64, rel=1e-6) and got[2, 6] == 0


def test_host_steps_split_between_threads_match_numpy_float64(monkeypatch):
    """Chunks of 2,048 elements: leaves of many chunks are split between the threads; the
    tails (not a whole row of 1,024) and a leaf shorter than a row are summed apart."""
    from inspector.core.health import host_step

    monkeypatch.setattr(host_step, "CHUNK", 2048)
    rng = np.random.default_rng(8)
    n = 9 * 2048 + 1500  # ten chunks, the last one with a tail of 476 after its row
    a = (rng.standard_normal(n) + 3).astype(np.float32)
    b = a + np.float32(1e-3) * rng.standard_normal(n).astype(np.float32)
    b[: 3000] = a[: 3000]
    c = b.copy()
    c[-1] = c[-1] + 1  # only the tail's last element changed
    d = rng.standard_normal(300).astype(np.float32)  # shorter than a row, not paired
    got = host_step.host_steps([a, b, c, d], [False, True, True, False])
    for row, x, y in [(got[1], a, b), (got[2], b, c)]:
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        np.testing.assert_allclose(row[[0, 3, 4, 5]], [y64 @ y64, (y64 - x64) @ (y64 - x64),
                                                       x64 @ x64, x64 @ y64], rtol=1e-6)
        assert row[1] == np.abs(y).max() and row[6] == np.count_nonzero(
            x.view(np.uint32) != y.view(np.uint32))
    assert got[2, 6] == 1 and got[0, 0] == pytest.approx(float(a.astype(np.float64) @ a), 1e-7)
    assert got[3, 0] == pytest.approx(float(d.astype(np.float64) @ d), rel=1e-7)
    assert got[3, 1] == np.abs(d).max()


def test_one_checkpoint_path_is_one_step(tmp_path):
    """A single file (not a folder of steps) is one source, not a list of its characters."""
    path = tmp_path / "ckpt_100.safetensors"
    inspector.save({"w": np.arange(4, dtype=np.float32)}, path)
    for source in (path, str(path)):
        t = inspector.timeline(source)
        assert list(t.labels) == [100]
        assert t.table("l2").values[:, 0].tolist() == [pytest.approx(np.sqrt(14.0))]


@pytest.mark.skipif(jax.devices()[0].platform != "cpu",
                    reason="files are mapped for the CPU's reductions (timeline.py: on_host)")
def test_mapped_files_in_flight_match_in_memory_trees_and_numpy(tmp_path, monkeypatch):
    """safetensors leaves read as views of one map a file, several key paths in flight on
    the worker threads (chunks of 2,048 elements: a leaf of ten chunks is split in jobs),
    pages faulted in and released: the same figures as the trees in memory, and NumPy's."""
    from inspector.core import file_maps
    from inspector.core.health import host_step

    monkeypatch.setattr(host_step, "CHUNK", 2048)
    advised = []
    real_advise = file_maps.advise
    monkeypatch.setattr(file_maps, "advise",
                        lambda m, o, n, a: advised.append(a) or real_advise(m, o, n, a))
    rng = np.random.default_rng(11)
    big = rng.standard_normal(9 * 2048 + 700).astype(np.float32)
    run = []
    for step in range(5):
        if step != 3:  # step 3 repeats step 2: big is bitwise unchanged there
            big = big + np.float32(1e-3) * rng.standard_normal(big.size).astype(np.float32)
        b = big.copy()
        if step == 4:
            b[17] = np.nan
        run.append({"a_big": b, "b_ints": np.arange(5, dtype=np.int32) * step,
                    "c_small": rng.standard_normal(50).astype(np.float32),
                    "d_reshaped": np.ones((4, 3) if step < 2 else (3, 4), np.float32)})
        inspector.save(run[-1], tmp_path / f"ckpt_{step}.safetensors")
    files, memory = inspector.timeline(tmp_path), inspector.timeline(run)
    assert file_maps.MADV_DONTNEED in advised and len(advised) >= 2 * 5 * 3
    assert files.paths == memory.paths
    for key, value in files.sums.items():
        np.testing.assert_allclose(value, memory.sums[key], rtol=1e-12, equal_nan=True,
                                   err_msg=key)
    rel, changed, cos = files.table("rel_change"), files.table("changed"), files.table("cosine")
    for s in range(1, 5):
        a, b = (np.asarray(run[s - 1]["a_big"], np.float64),
                np.asarray(run[s]["a_big"], np.float64))
        ok = np.isfinite(a) & np.isfinite(b)
        a, b = a[ok], b[ok]
        assert rel.values[0, s] == pytest.approx(np.linalg.norm(b - a) / np.linalg.norm(a),
                                                 rel=1e-5)
        assert files.sums["dot"][0, s] == pytest.approx(a @ b, rel=1e-6)
        # 1 - cos ~5e-7 here: within 1% on the host path (<a, b> from the same sums of
        # squares as the norms); the NaN step goes through the float32 careful kernel
        want = 1 - a @ b / np.linalg.norm(a) / np.linalg.norm(b)
        assert 1 - cos.values[0, s] == (pytest.approx(want, rel=1e-2) if s < 4
                                        else pytest.approx(want, abs=1e-6))
        bits = run[s - 1]["a_big"].view(np.uint32) != run[s]["a_big"].view(np.uint32)
        assert changed.values[0, s] == bits.sum() / bits.size
    assert changed.values[0, 3] == 0 and files.first_nonfinite() == {"['a_big']": 4}
    assert np.isnan(rel.values[3, 2]) and files.sums["paired"][3].tolist() == [
        False, True, False, True, True]
