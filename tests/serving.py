"""What the browser tests share: chromium, free ports, waiting for a server and stopping it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.request

import pytest

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags chromium keeps dialling out on this closed network.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def require_chromium() -> None:
    """Fails (not skips) without chromium: `make test` installs it, so its absence is a bug."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run `make test` (it installs Debian's chromium)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, proc: subprocess.Popen, seconds: float = 60) -> None:
    """Returns once `url` answers; fails if `proc` exits or `seconds` pass first."""
    deadline = time.time() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=15).close()  # a page is a session: slow when busy
            return
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"{url} did not answer (exit code {proc.poll()})")
            time.sleep(0.2)


@contextlib.contextmanager
def session(browser, url: str):
    """A fresh browser session (its own app state) on `url`, at the screenshot size."""
    context = browser.new_context(viewport={"width": 1680, "height": 1050})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(url)
    try:
        yield page
    finally:
        context.close()


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
