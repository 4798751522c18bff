"""`describe` and `diff` of trees without JAX objects import no JAX, and say the same as JAX."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import sys
import numpy as np
import inspector
tree = {"a": 1, "b": 2.0, "c": True, "d": 1j, "w": np.zeros((2, 3), np.float16), "n": None}
before = inspector.describe(tree)
changes = inspector.diff(tree, {"a": 1, "w": np.zeros(3)})
imported = "jax" in sys.modules
import jax
assert before == inspector.describe(tree), (before, inspector.describe(tree))
assert changes == inspector.diff(tree, {"a": 1, "w": np.zeros(3)})
print(imported, [r.dtype for r in before])
"""


@pytest.mark.parametrize("x64", ["", "1"])
def test_no_jax_until_a_tree_holds_jax_and_the_same_rows_after(x64):
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    if x64:
        env["JAX_ENABLE_X64"] = x64
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    bits = "64" if x64 else "32"
    assert done.stdout.split("\n")[0] == (
        f"False [None, 'int{bits}', 'float{bits}', 'bool', 'complex{2 * int(bits)}', None, "
        "'float16']")
