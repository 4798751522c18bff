"""What the browser tests share: chromium, free ports, the launcher started and stopped,
waiting for a server."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import socket
import subprocess
import sys
import threading
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


def listening(port: int, proc: subprocess.Popen, seconds: float = 180) -> None:
    """Returns once 127.0.0.1:`port` accepts connections; fails if `proc` exits or `seconds`
    pass first. (A GET of an app page builds a session each time: slow on a busy machine.)"""
    deadline = time.time() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"port {port} did not open (exit code {proc.poll()})")
            time.sleep(0.2)


@contextlib.contextmanager
def launched_app(folder, *args: str, env: dict | None = None, seconds: float = 180,
                 first_page: bool = True):
    """Runs `python -m inspector ARGS --no-show --port P` in `folder`; yields the app's URL (as
    the launcher printed it) once its port is open and (`first_page`) its first page was built
    (the slowest: a fresh process); stops the launcher afterwards.

    The launcher's output is read to its end in a thread, so a full pipe never blocks it.
    """
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "inspector", *args, "--no-show", "--port", str(port)], cwd=folder,
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put("")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        try:
            line = lines.get(timeout=seconds)
        except queue.Empty:
            pytest.fail(f"the launcher printed nothing in {seconds:g} s (exit {proc.poll()})")
        match = re.search(r"at (http://127\.0\.0\.1:\d+/inspector) ", line)
        assert match, f"the launcher printed {line!r} (exit code {proc.poll()})"
        listening(port, proc, seconds)
        if first_page:  # later pages build quickly
            urllib.request.urlopen(match.group(1), timeout=seconds).close()
        yield match.group(1)
    finally:
        stop(proc)
        reader.join(5)
        proc.stdout.close()


@contextlib.contextmanager
def session(browser, url: str):
    """A fresh browser session (its own app state) on `url`, at the screenshot size."""
    context = browser.new_context(viewport={"width": 1680, "height": 1050})
    page = context.new_page()
    page.set_default_timeout(15_000)
    # Opening a page builds its session on the server first: seconds when the machine is busy
    # (measured at load 12-14 on 2 cores: 5-9 s, past 15 s at times), so navigation gets longer
    page.goto(url, timeout=120_000)
    try:
        yield page
    finally:
        context.close()


@contextlib.contextmanager
def served_app(log_path, seconds: float = 180):
    """`panel serve inspector` on a free port of 127.0.0.1 (as `make serve`, with liveness),
    its output into `log_path`; yields the app's URL once a first page was built (the server
    has imported the app); stops it afterwards."""
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "panel", "serve", "inspector", "--address", "127.0.0.1",
             "--port", str(port), "--allow-websocket-origin", f"127.0.0.1:{port}",
             "--liveness", "--unused-session-lifetime", "120000"],
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), stdout=log,
            stderr=subprocess.STDOUT)
        try:
            wait_for(f"http://127.0.0.1:{port}/liveness", proc, seconds)
            wait_for(f"http://127.0.0.1:{port}/inspector", proc, seconds)
            yield f"http://127.0.0.1:{port}/inspector"
        finally:
            stop(proc)


def error_lines(log_path) -> list[str]:
    """The lines of a server log that report an error or a traceback."""
    with open(log_path) as f:
        return [line.rstrip("\n") for line in f
                if re.search(r"\b(ERROR|CRITICAL)\b|Traceback|Exception", line)]


def open_tab(page, name: str) -> None:
    """Clicks the operation tab `name` once the page has finished drawing (the operation and
    result cards join after the first paint). A click on a tab while those cards arrived was
    lost in 2 of ~20 runs on this machine (the Compare tab), and once in a full suite run (the
    Stack tab); a person clicks later than the first tree row, as this waits."""
    tab = page.get_by_role("tab", name=name, exact=True)
    tab.wait_for()
    if tab.get_attribute("aria-selected") == "true":
        return  # a launcher with two different trees opens on the Compare tab
    first_paint = page.get_by_role("button", name="Run the current operation.")
    first_paint.or_(page.locator(".diff-summary")).first.wait_for()
    tab.click()


def open_compare_tab(page) -> None:
    """Opens the Compare tab (see `open_tab`), then waits for the comparison's summary."""
    open_tab(page, "Compare trees")
    page.locator(".diff-summary").wait_for()


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
