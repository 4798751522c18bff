"""The command line run as a user runs it: `python -m inspector ...` in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest


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
