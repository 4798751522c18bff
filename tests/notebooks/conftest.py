"""Fixtures for the notebook tests: a kernel that runs this interpreter, executed example
notebooks, and (marker `browser`) JupyterLab on 127.0.0.1 driven by headless chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.serving import free_port, require_chromium, stop, wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

@pytest.fixture(scope="session")
def kernel_name(tmp_path_factory) -> str:
    """The kernel the notebooks run on: Jupyter's `python3`, when it starts this interpreter
    (ipykernel installs it into the environment; jupyter_client runs a spec's `python` as the
    interpreter that starts the kernel). Otherwise a spec of our own, found first via
    JUPYTER_PATH by nbclient and by JupyterLab (started with this environment)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        argv = KernelSpecManager().get_kernel_spec("python3").argv
    except NoSuchKernel:
        argv = []
    if argv and argv[0] in ("python", "python3", sys.executable):
        yield "python3"
        return
    path = tmp_path_factory.mktemp("jupyter")
    spec = path / "kernels" / "inspector-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (tests)", "language": "python"}))
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(path), old]))
    try:
        yield "inspector-test"
    finally:
        if old is None:
            del os.environ["JUPYTER_PATH"]
        else:
            os.environ["JUPYTER_PATH"] = old


class Executed:
    """Example notebooks executed once per test session (each takes seconds)."""

    def __init__(self, kernel: str):
        self.kernel, self.cache = kernel, {}

    def __call__(self, stem: str):
        if stem not in self.cache:
            import nbclient
            import nbformat

            nb = nbformat.read(EXAMPLES / f"{stem}.ipynb", as_version=4)
            nbclient.NotebookClient(nb, kernel_name=self.kernel, timeout=180,
                                    resources={"metadata": {"path": str(EXAMPLES)}}).execute()
            self.cache[stem] = nb
        return self.cache[stem]


@pytest.fixture(scope="session")
def executed(kernel_name):
    """`executed("s1_model_averaging")`: that example notebook, run by nbclient."""
    return Executed(kernel_name)


# JupyterLab ------------------------------------------------------------------------------------

def start_jupyterlab(root: Path, port: int, log) -> subprocess.Popen:
    """JupyterLab on 127.0.0.1:`port` serving `root`: no token, no browser, nothing fetched
    from the network (no news, no update check, no extension manager)."""
    settings = root / ".lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    return subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={port}",
         "--no-browser", "--ServerApp.open_browser=False", f"--ServerApp.root_dir={root}",
         "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.allow_root=True",
         "--LabApp.news_url=None", "--LabApp.extension_manager=readonly",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         f"--LabApp.user_settings_dir={root / '.lab-settings'}",
         f"--LabApp.workspaces_dir={root / '.lab-workspaces'}"],
        cwd=root, stdout=log, stderr=subprocess.STDOUT)


@pytest.fixture
def jupyterlab(tmp_path, kernel_name):
    """JupyterLab serving a temporary copy of the S1 notebook; yields its base URL."""
    require_chromium()
    shutil.copy(EXAMPLES / "s1_model_averaging.ipynb", tmp_path / "s1.ipynb")
    if kernel_name != "python3":
        nb = json.loads((tmp_path / "s1.ipynb").read_text())
        nb["metadata"]["kernelspec"]["name"] = kernel_name
        (tmp_path / "s1.ipynb").write_text(json.dumps(nb))
    port = free_port()
    with open(tmp_path / "jupyterlab.log", "w") as log:
        proc = start_jupyterlab(tmp_path, port, log)
        try:
            wait_for(f"http://127.0.0.1:{port}/api/status", proc)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop(proc)
