"""orbax checkpoints of sharded trees: saved shardings shown from metadata, restored into a mesh.

`orbax_eight_devices.py` runs once in a subprocess with 8 fake CPU devices (XLA_FLAGS must be
set before JAX starts) and prints one record; the tests assert it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu", PYTHONPATH=os.pathsep.join(
                   [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    folder = tmp_path_factory.mktemp("sharded_ckpt")
    proc = subprocess.run([sys.executable, str(HERE / "orbax_eight_devices.py"), str(folder)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_saved_shardings_shown_from_metadata_alone(record):
    assert record["deleted_chunks"] > 0
    assert record["w_after_deleting"] == 0.0  # the array data is gone (zarr fills with 0)
    assert record["rows"] == {
        "": None,
        "['b']": "replicated over 8 devices (saved)",
        "['layers']": None,
        "['layers'][0]": "PartitionSpec('model', 'data') over data=4, model=2 (saved)",
        "['layers'][1]": "PartitionSpec(('data', 'model'),) over data=4, model=2 (saved)",
        "['plain']": None,
        "['w']": "PartitionSpec('data', 'model') over data=4, model=2 (saved)",
    }


def test_load_into_a_mesh_takes_the_saved_specs(record):
    restored = record["restored"]
    assert {p: v[0] for p, v in restored.items()} == {
        "['b']": "P()", "['layers'][0]": "P('model', 'data')",
        "['layers'][1]": "P(('data', 'model'),)", "['plain']": "P()",
        "['w']": "P('data', 'model')"}
    np.testing.assert_array_equal(restored["['w']"][1], np.arange(32.0).reshape(8, 4))
    np.testing.assert_array_equal(restored["['b']"][1], np.arange(4))
    np.testing.assert_array_equal(restored["['layers'][0]"][1], np.ones((4, 8)))
    np.testing.assert_array_equal(restored["['layers'][1]"][1], np.full(8, 2.0))
    np.testing.assert_array_equal(restored["['plain']"][1], np.zeros(3))


def test_load_into_a_mesh_with_given_specs(record):
    assert record["respecified"] == {"['b']": "P()", "['layers'][0]": "P()",
                                     "['layers'][1]": "P()", "['plain']": "P()",
                                     "['w']": "P('model',)"}
    # a mesh without the saved axes: replicated rather than refused
    assert set(record["other_mesh"].values()) == {"P()"}
