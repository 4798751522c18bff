"""The command line run as a user runs it: `python -m inspector ...` in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest
from safetensors.numpy import save_file


@dataclass
class Done:
    """A finished command: its exit status and its two streams."""

    returncode: int
    stdout: str
    stderr: str

    def records(self) -> list[dict]:
        """stdout as JSON lines (each must parse)."""
        return [json.loads(line) for line in self.stdout.splitlines()]


def run_cli(*args, cwd=None, env: dict | None = None, timeout: float = 120) -> Done:
    """Runs `python -m inspector *args` (no colour: NO_COLOR set) and returns what it did."""
    full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    done = subprocess.run([sys.executable, "-m", "inspector", *map(str, args)], cwd=cwd,
                          env=full_env, capture_output=True, text=True, timeout=timeout)
    return Done(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Three steps written by the safetensors library: `dense.kernel` moves by 10% a step and
    has a NaN and an Inf at step 300, `frozen.b` never changes, `new.x` appears at step 200
    (zeros) and is ones at step 300."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    folder = tmp_path_factory.mktemp("run")
    steps = {}
    for i, step in enumerate((100, 200, 300)):
        tree = {"dense.kernel": (w * np.float32(1 + 0.1 * i)).astype(np.float32),
                "frozen.b": np.ones(3, np.float32)}
        if step == 300:
            tree["dense.kernel"][1, 1] = np.nan
            tree["dense.kernel"][2, 0] = -np.inf
        if step >= 200:  # zeros, then ones: an infinite relative change at step 300
            tree["new.x"] = np.full(2, step == 300, np.float32)
        save_file(tree, str(folder / f"ckpt_{step}.safetensors"))
        steps[step] = tree
    return folder, steps
