"""Serving from two hosts: the launcher as process 0 (serves the page) and process 1 (follows),
4 CPU devices each, joined by `jax.distributed` on 127.0.0.1; the page shards a checkpoint over
all 8 devices and runs an op, which process 1 runs too (it says so on its output)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import inspector
from tests.serving import free_port, session

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _launch(ckpt: Path, coordinator: str, process_id: int, port: int) -> subprocess.Popen:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, "-m", "inspector", str(ckpt), "--root", str(ckpt.parent), "--no-show",
         "--port", str(port), "--coordinator", coordinator, "--num-processes", "2",
         "--process-id", str(process_id)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_processes_serve_one_page_and_run_its_op_on_both(browser, tmp_path):
    ckpt = inspector.save({"a": np.arange(48.0, dtype=np.float32).reshape(8, 6),
                           "b": np.arange(8.0, dtype=np.float32)}, tmp_path / "model.safetensors")
    coordinator, port = f"127.0.0.1:{free_port()}", free_port()
    procs = [_launch(ckpt, coordinator, i, port) for i in range(2)]
    try:
        url = None
        deadline = time.time() + 120
        while url is None and time.time() < deadline:
            line = procs[0].stdout.readline()
            assert line or procs[0].poll() is None, procs[0].stderr.read()[-3000:]
            m = re.search(r"at (http://\S+)", line)
            url = m and m.group(1)
        assert url, "process 0 did not start serving"
        urllib.request.urlopen(url, timeout=120).close()  # the first page builds slowly
        with session(browser, url) as page:
            page.get_by_role("treeitem").first.wait_for()
            page.get_by_role("tab", name="Mesh").click()
            page.get_by_label("['a']  float32[8,6]").fill("data, model")
            page.get_by_label("['b']  float32[8]").fill("data")
            page.get_by_role("button", name="Shard").click()
            page.get_by_text("model.safetensors @ data=4, model=2").first.wait_for(
                timeout=180_000)  # both processes start their collectives: slow on 2 cores
            page.get_by_role("tab", name="Operations").click()
            page.get_by_role("tab", name="Unstack", exact=True).click()
            page.get_by_role("button", name="Run the current operation.").click()
            card = page.locator(".timing-card")
            card.filter(has_text="data=4, model=2").wait_for(timeout=180_000)
            assert "8 devices" in card.inner_text()
        procs[0].send_signal(signal.SIGINT)  # process 0 stops: it tells process 1 to stop
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], outs[1][1][-3000:]
    follower = outs[1][0]
    assert "pytree-inspector [process 1/2]: following process 0" in follower
    assert "shard: model.safetensors @ data=4, model=2" in follower
    # 8 trees: a[i] (6,) over model (3 float32 per device) and b[i] replicated (1 float32),
    # on each of this host's 4 devices: 8 * (12 + 4) * 4 bytes
    assert ("ran unstack on 8 devices (mesh data=4, model=2); 512 bytes of the result on "
            "this host's devices") in follower
