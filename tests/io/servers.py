"""Local servers for the remote-checkpoint tests and benchmark: real HTTP on 127.0.0.1.

- `RangeServer`: serves a folder with HTTP range requests (HEAD, GET, `Range: bytes=a-b`),
  counting requests and body bytes; `/__status/401/...` answers that status, `/__truncate/...`
  promises the whole body and closes half-way.
- `SilentServer`: accepts connections and never answers (the timeout case).
- `CountingMotoServer`: moto's S3 server (`ThreadedMotoServer`) with the same counters;
  `s3_serving(folder, bucket)` starts one holding a folder's files.
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


@dataclass
class Traffic:
    """What a server was asked and sent: (method, path, range header) per request; body bytes."""

    requests: list[tuple[str, str, str]] = field(default_factory=list)
    bytes: int = 0
    in_flight: int = 0
    most_in_flight: int = 0  # requests being answered at the same time, at most
    lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self) -> None:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)

    def end(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def add(self, method: str, path: str, ranged: str, nbytes: int) -> None:
        with self.lock:
            self.requests.append((method, path, ranged))
            self.bytes += nbytes

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.bytes = self.most_in_flight = 0


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers: connections are reused

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        self._counted(body=False)

    def do_GET(self) -> None:
        self._counted(body=True)

    def _counted(self, body: bool) -> None:
        owner = self.server.owner  # type: ignore[attr-defined]
        owner.traffic.begin()
        try:
            time.sleep(owner.delay)  # a slower network, so that overlap shows
            self._serve(body)
        finally:
            owner.traffic.end()

    def _serve(self, body: bool) -> None:
        server: RangeServer = self.server.owner  # type: ignore[attr-defined]
        path, status, truncate = self.path.split("?", 1)[0], None, False
        if m := re.match(r"/__status/(\d+)(/.*)", path):
            status, path = int(m.group(1)), m.group(2)
        elif path.startswith("/__truncate/"):
            truncate, path = True, path[len("/__truncate") :]
        ranged = self.headers.get("Range", "")
        if status is not None:
            return self._reply(status, b"denied", body, ranged)
        file = (server.root / path.lstrip("/")).resolve()
        if server.root not in file.parents or not file.is_file():
            return self._reply(404, b"not found", body, ranged)
        size = file.stat().st_size
        start, end = 0, size
        if ranged and (m := _RANGE.match(ranged)):
            first, last = m.groups()
            if first:
                start, end = int(first), min(size, int(last) + 1 if last else size)
            else:
                start, end = max(0, size - int(last)), size
            if start >= size:
                return self._reply(416, b"", body, ranged, {"Content-Range": f"bytes */{size}"})
        with open(file, "rb") as f:
            f.seek(start)
            data = f.read(end - start) if body else b""
        headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        code = 200
        if ranged:
            code = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if not body:
            server.traffic.add("HEAD", path, ranged, 0)
            return
        if truncate:
            data = data[: len(data) // 2]
        server.traffic.add("GET", path, ranged, len(data))  # before sending: the client may
        self.wfile.write(data)  # look at the counters as soon as the bytes arrive
        self.wfile.flush()
        if truncate:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

    def _reply(self, code: int, text: bytes, body: bool, ranged: str, headers=None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        traffic = self.server.owner.traffic  # type: ignore[attr-defined]
        traffic.add(self.command, self.path, ranged, len(text) if body else 0)
        if body:
            self.wfile.write(text)


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client closing its keep-alive connection (as aiohttp does) is no error; any other
        is printed as the base class does."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class RangeServer:
    """Serves `root` on 127.0.0.1 with range requests in a thread; `url` is its address."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).resolve()
        self.traffic = Traffic()
        self.delay = 0.0  # seconds each request waits before it is answered
        self._server = _QuietServer(("127.0.0.1", 0), _RangeHandler)
        self._server.owner = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RangeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        close_http_sessions()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def close_http_sessions() -> None:
    """Closes the aiohttp sessions of fsspec's cached HTTP filesystems (their keep-alive
    sockets) while fsspec's loop runs, and forgets the filesystems. Left to fsspec's
    finalizer, which waits 0.1 s for the close, a loaded machine leaked a socket that a
    later test's `gc.collect()` reported as an unclosed-socket ResourceWarning."""
    from fsspec.asyn import sync
    from fsspec.implementations.http import HTTPFileSystem

    for fs in list(HTTPFileSystem._cache.values()):
        session = getattr(fs, "_session", None)
        if session is not None and fs.loop is not None and fs.loop.is_running():
            sync(fs.loop, session.close, timeout=10)
    HTTPFileSystem.clear_instance_cache()


class SilentServer:
    """Accepts connections on 127.0.0.1 and never answers them."""

    def __init__(self):
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        self._socket.settimeout(0.2)
        while not self._stop.is_set():
            try:
                self._held.append(self._socket.accept()[0])
            except OSError:
                continue

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._socket.close()


def refused_url() -> str:
    """The address of a port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def counting_moto_server():
    """Returns moto's threaded S3 server on a free 127.0.0.1 port, counting its traffic.

    Call `.start()` and `.stop()`; `.url` is the endpoint, `.traffic` the counters.
    """
    from moto.server import ThreadedMotoServer
    from werkzeug.serving import make_server

    class CountingMotoServer(ThreadedMotoServer):
        def __init__(self):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            super().__init__(ip_address="127.0.0.1", port=port, verbose=False)
            self.url = f"http://127.0.0.1:{port}"
            self.traffic = Traffic()

        def _server_entry(self) -> None:
            from moto.moto_server.threaded_moto_server import MotoRequestHandler
            from moto.server import DomainDispatcherApplication, create_backend_app

            app = DomainDispatcherApplication(create_backend_app)
            traffic = self.traffic

            def counted(environ, start_response):
                body = app(environ, start_response)
                sent = [bytes(chunk) for chunk in body]
                if hasattr(body, "close"):
                    body.close()
                method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
                if not path.startswith("/moto-api"):
                    traffic.add(method, path, environ.get("HTTP_RANGE", ""), sum(map(len, sent)))
                return sent

            self._server = make_server(
                self._ip_address, self._port, counted, True, request_handler=MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    return CountingMotoServer()


@contextlib.contextmanager
def s3_serving(folder: str | os.PathLike, bucket: str):
    """Runs moto's S3 server holding every file below `folder` in `bucket`, with test
    credentials in the environment (restored after); yields the server: `.url`, `.traffic`,
    and `.options`, the storage_options that reach it."""
    import boto3

    names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    saved = {k: os.environ.get(k) for k in names}
    os.environ.update(dict.fromkeys(names, "testing"))
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = counting_moto_server()
    server.start()
    try:
        client = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")
        client.create_bucket(Bucket=bucket)
        for path in Path(folder).rglob("*"):
            if path.is_file():
                client.upload_file(str(path), bucket, path.relative_to(folder).as_posix())
        server.options = {"endpoint_url": server.url}
        yield server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
