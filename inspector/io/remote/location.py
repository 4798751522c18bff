"""Checkpoints at a URL (http(s)://, s3://, gs://, hf://, ...), read through fsspec in ranges.

`RemoteFile` is the remote `Location`: the format readers ask it for exact byte ranges and it
fetches those, no more (fsspec's buffered files would read 5 MiB blocks with read-ahead: a
4 MiB leaf would cost 9 MiB). The first 64 KiB of a file are fetched once and kept, since
sniffing and every header read start there; a safetensors file's structure is then one size
request and one or two range requests; a zip's member headers are fetched concurrently, those
close together (around a small member) as one range. Large arrays are read in 8 MiB ranges,
8 at a time.

Every failure (not found, refused, no answer, access denied, a truncated answer) becomes a
`LoadError` naming the URL without credentials, within a bounded time: the filesystem's own
socket timeouts are set to `timeout`, and each call has a hard deadline on top.
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import numpy as np

from inspector.core.errors import InspectorError, LoadError
from inspector.io.file_error import file_error, missing_library
from inspector.io.location import Location, ProgressCallback, ReadProgress
from inspector.io.remote.failures import NOT_FOUND, classify, clean, redact
from inspector.io.remote.range_file import BLOCK_BYTES, RangeFile

HEAD_BYTES = 64 * 1024
"""The first bytes of a file, fetched once: magic bytes and (usually) the whole header."""

CHUNK_BYTES = 8 * 1024 * 1024
"""Large arrays are fetched in ranges of this size, `PARALLEL` at a time."""

MERGED_BYTES = 64 * 1024
"""Small ranges (zip member headers) that fit in a span of this size are fetched as one: a
request costs more than the bytes between them (a small member's data)."""

PARALLEL = 8
SMALL_PARALLEL = 32  # for small ranges (npz member headers): requests, not bytes, dominate

EXTRA_COMMAND = "pip install 'pytree-inspector[remote]'"

_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="inspector-io")


class RemoteFile(Location):
    """A file or folder at a URL, read through its fsspec filesystem."""

    def __init__(self, fs, fs_path: str, url: str, options: dict, timeout: float, progress):
        self.fs, self.fs_path, self.url = fs, fs_path, url
        self.name = redact(url)
        self.options, self.timeout, self.progress = options, timeout, progress
        self._info: dict | None = None
        self._missing = False
        self._spans: list[tuple[int, bytes]] = []  # small fetched ranges, the head first
        self._children: dict[str, RemoteFile] = {}
        self._lock = threading.Lock()

    @classmethod
    def open_url(
        cls, url: str, options: dict, timeout: float, progress: ProgressCallback | None
    ) -> RemoteFile:
        """Returns the location of `url`, its filesystem set up with `options` and timeouts."""
        name = redact(url)
        protocol = url.split("://", 1)[0].lower()
        try:
            import fsspec
            import fsspec.core
            from fsspec.registry import known_implementations
        except ImportError as exc:
            raise missing_library(name, "fsspec", "reading URLs", EXTRA_COMMAND) from exc
        try:
            fs, fs_path = fsspec.core.url_to_fs(url, **_with_timeouts(protocol, options, timeout))
        except ImportError as exc:
            known = known_implementations.get(protocol, {})
            package = exc.name or known.get("class", "").split(".")[0] or f"a {protocol} filesystem"
            raise missing_library(name, package, f"reading {protocol}:// URLs",
                                  EXTRA_COMMAND) from exc
        except (ValueError, TypeError) as exc:
            raise file_error(
                name, f"fsspec cannot open {protocol}:// URLs with these storage_options "
                f"({type(exc).__name__}: {clean(str(exc), url, options)})",
                "Check the URL scheme and the storage_options.",
            ) from exc
        if isinstance(getattr(fs, "retries", None), int):
            # s3fs retries failed calls 5 times with back-off; a dead endpoint should say so
            # quickly rather than as a timeout
            fs.retries = min(fs.retries, 2)
        return cls(fs, fs_path, url, options, timeout, progress)

    # -- what the format readers use ---------------------------------------------------------

    def exists(self) -> bool:
        return self._stat() is not None

    def is_dir(self) -> bool:
        if self.url.endswith("/"):
            return True
        info = self._stat()
        return info is not None and info.get("type") == "directory"

    def size(self) -> int:
        info = self._stat()
        if info is None:
            raise file_error(self.name, NOT_FOUND,
                             "Check the URL; for a private file, pass credentials in "
                             "storage_options.")
        size = info.get("size")
        if size is None:
            raise file_error(self.name, "the server does not say how large the file is",
                             "Serve it from a server that answers HEAD with Content-Length.")
        return int(size)

    def child(self, relative: str) -> RemoteFile:
        # kept, so asking twice (sniff, then the reader) costs one request
        if relative not in self._children:
            self._children[relative] = self._derive(
                self.fs_path.rstrip("/") + "/" + relative, _join_url(self.url, relative)
            )
        return self._children[relative]

    def sibling(self, name: str) -> RemoteFile:
        return self._derive(self.fs_path.rstrip("/").rpartition("/")[0] + "/" + name,
                            _join_url(_parent_url(self.url), name))

    def read(self, start: int, end: int) -> bytes:
        size = self.size()
        start, end = max(0, start), min(end, size)
        if end <= start:
            return b""
        cached = self.cached(start, end)
        if cached is not None:
            return cached
        if start < HEAD_BYTES:
            head = self._head_bytes(size)
            if end <= len(head):
                return head[start:end]
            return head[start:] + self._fetch([(len(head), end)])[0]
        data = self._fetch([(start, end)])[0]
        if len(data) <= BLOCK_BYTES:
            self.remember(start, data)
        return data

    def cached(self, start: int, end: int) -> bytes | None:
        """Bytes `[start, end)` if an earlier small read fetched them, else None."""
        with self._lock:
            for lo, data in reversed(self._spans):
                if lo <= start and end <= lo + len(data):
                    return data[start - lo : end - lo]
        return None

    def remember(self, start: int, data: bytes) -> None:
        """Keeps a small fetched range for later reads (zip directories, member headers)."""
        with self._lock:
            self._spans.append((start, data))
            if len(self._spans) > 4096:
                del self._spans[1:1024]

    def read_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        size = self.size()
        clipped = [(max(0, s), min(e, size)) for s, e in ranges]
        wanted = sorted({(s, e) for s, e in clipped if e > s and s >= HEAD_BYTES})
        spans = _merge_small(wanted)
        fetched = dict(zip(spans, self._fetch(spans), strict=True)) if spans else {}
        out = []
        for s, e in clipped:
            span = next(((lo, hi) for lo, hi in spans if lo <= s and e <= hi), None)
            out.append(self.read(s, e) if span is None or e <= s
                       else fetched[span][s - span[0] : e - span[0]])
        return out

    def read_all(self) -> bytes:
        return self.read(0, self.size())

    def open(self) -> BinaryIO:
        return RangeFile(self)

    def prefetch(self, f: BinaryIO, ranges: Sequence[tuple[int, int]]) -> None:
        if isinstance(f, RangeFile):
            f.prefetch(ranges)

    def array_reader(self, offset, dtype, shape, order="C") -> Callable[[], np.ndarray]:
        dtype, shape = np.dtype(dtype), tuple(shape)
        native = dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype
        count = math.prod(shape)
        nbytes = count * dtype.itemsize

        def read() -> np.ndarray:
            if count == 0:
                return np.empty(shape, native, order=order)
            data = self.read_range(offset, offset + nbytes)
            array = np.frombuffer(data, dtype=dtype, count=count).reshape(shape, order=order)
            return array if dtype == native else array.astype(native)

        return read

    def read_range(self, start: int, end: int) -> bytearray:
        """Returns bytes `[start, end)` (all of them, or `LoadError`), fetched in concurrent
        chunks, reporting progress to the callback after each batch."""
        total = end - start
        if end > self.size():
            raise file_error(self.name, f"bytes {start}-{end} are past its end ({self.size()})",
                             "The file changed or is truncated; load it again.")
        out = bytearray(total)
        chunks = [(s, min(s + CHUNK_BYTES, end)) for s in range(start, end, CHUNK_BYTES)]
        began, done = time.perf_counter(), 0
        for i in range(0, len(chunks), PARALLEL):
            batch = chunks[i : i + PARALLEL]
            for (s, e), data in zip(batch, self._fetch(batch), strict=True):
                out[s - start : e - start] = data
                done += e - s
            if self.progress is not None:
                self.progress(ReadProgress(self.name, done, total, time.perf_counter() - began))
        return out

    def tensorstore_kvstore(self) -> dict:
        from inspector.io.remote.tensorstore_spec import kvstore_spec

        return kvstore_spec(self)

    # -- fetching ---------------------------------------------------------------------------

    def _derive(self, fs_path: str, url: str) -> RemoteFile:
        return RemoteFile(self.fs, fs_path, url, self.options, self.timeout, self.progress)

    def _stat(self) -> dict | None:
        if self._info is None and not self._missing:
            try:
                self._info = self._call(self.fs.info, self.fs_path)
            except FileNotFoundError as exc:
                # fsspec's http info says "not found" for any failure; its cause tells
                if classify(exc, self.timeout)[0] != NOT_FOUND:
                    raise self._failure(exc) from exc
                self._missing = True
        return self._info

    def _head_bytes(self, size: int) -> bytes:
        with self._lock:
            if self._spans and self._spans[0][0] == 0:
                return self._spans[0][1]
        head = self._fetch([(0, min(size, HEAD_BYTES))])[0]
        with self._lock:
            self._spans.insert(0, (0, head))
        return head

    def _fetch(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Fetches exact ranges (several at once); checks every answer's length."""
        ranges = list(ranges)
        nbytes = sum(e - s for s, e in ranges)
        if self.fs.async_impl:
            n = len(ranges)
            # small ranges (headers) go many at a time; large ones 8 at a time
            batch = SMALL_PARALLEL if nbytes <= n * BLOCK_BYTES else PARALLEL
            results = self._call(
                self.fs.cat_ranges, [self.fs_path] * n, [s for s, _ in ranges],
                [e for _, e in ranges], nbytes=nbytes, rounds=-(-n // batch), batch_size=batch,
            )
        else:
            futures = [_POOL.submit(self._fetch_sync, s, e) for s, e in ranges]
            results = [self._wait(f, nbytes) for f in futures]
        for (start, end), data in zip(ranges, results, strict=True):
            if isinstance(data, BaseException):
                raise self._failure(data) from data
            if len(data) != end - start:
                raise file_error(
                    self.name,
                    f"the server answered {len(data)} bytes for bytes {start}-{end} "
                    f"({end - start} asked): the response was truncated, or the server "
                    f"ignores range requests",
                    "Try again; the server must support HTTP range requests.",
                )
        return results

    def _fetch_sync(self, start: int, end: int) -> bytes:
        # a synchronous filesystem (hf://): with no cache, a buffered file fetches exactly the
        # range asked (its block size and read-ahead apply only to its caches)
        with self.fs.open(self.fs_path, "rb", cache_type="none") as f:
            f.seek(start)
            return f.read(end - start)

    def _call(self, method, *args, nbytes: int = 0, rounds: int = 1, **kwargs) -> Any:
        """Calls a filesystem method with a deadline; every failure becomes a `LoadError`
        (FileNotFoundError passes through for `_stat`). `rounds`: how many requests the call
        makes one after another (each may take `timeout`)."""
        deadline = self._deadline(nbytes) + self.timeout * (rounds - 1)
        try:
            if self.fs.async_impl:
                return method(*args, timeout=deadline, **kwargs)
            return self._wait(_POOL.submit(method, *args, **kwargs), nbytes)
        except InspectorError:
            raise
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise self._failure(exc) from exc

    def _wait(self, future: concurrent.futures.Future, nbytes: int) -> Any:
        try:
            return future.result(timeout=self._deadline(nbytes))
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise self._failure(TimeoutError()) from exc
        except (InspectorError, FileNotFoundError):
            raise
        except Exception as exc:
            raise self._failure(exc) from exc

    def _deadline(self, nbytes: int) -> float:
        # `timeout` is how long an answer may take to start; big transfers get time on top
        # at 1 MB/s, so a slow link is not mistaken for a dead server.
        return self.timeout + nbytes / 1e6

    def _failure(self, exc: BaseException) -> LoadError:
        problem, fix = classify(exc, self.timeout)
        while (exc.__cause__ or exc.__context__) is not None:  # the root cause says most
            exc = exc.__cause__ or exc.__context__
        detail = clean(f"{type(exc).__name__}: {exc}", self.url, self.options)
        return file_error(self.name, f"{problem} ({detail})" if str(exc) else problem, fix)


def _merge_small(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted ranges, neighbours joined while the joined span stays within `MERGED_BYTES`."""
    spans: list[tuple[int, int]] = []
    for start, end in ranges:
        if spans and max(end, spans[-1][1]) - spans[-1][0] <= MERGED_BYTES:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return spans


def _with_timeouts(protocol: str, options: dict, timeout: float) -> dict:
    """The storage options with the filesystem's own socket timeouts set (unless given)."""
    options = dict(options)
    if protocol in ("http", "https"):
        import aiohttp

        client = dict(options.get("client_kwargs") or {})
        client.setdefault("timeout", aiohttp.ClientTimeout(
            total=None, sock_connect=timeout, sock_read=timeout))
        options["client_kwargs"] = client
    elif protocol in ("s3", "s3a"):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", timeout)
        config.setdefault("read_timeout", timeout)
        config.setdefault("retries", {"max_attempts": 2, "mode": "standard"})
        options["config_kwargs"] = config
    elif protocol in ("gs", "gcs"):
        options.setdefault("timeout", timeout)
    return options


def _join_url(url: str, relative: str) -> str:
    parts = urllib.parse.urlsplit(url)
    path = parts.path.rstrip("/") + "/" + relative
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _parent_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    path = parts.path.rstrip("/").rpartition("/")[0]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
