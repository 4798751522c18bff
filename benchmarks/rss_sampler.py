"""A process's resident set sampled in a thread (`bench_app.py`): its peak, and the peak of
its anonymous part (`RssAnon`: without the pages of files it maps, which the page cache holds
whether mapped or not)."""

from __future__ import annotations

import threading
import time


class RssSampler:
    """Samples a process's resident set every 20 ms in a thread; `peak()` and `peak_anon()`
    since `reset()`."""

    def __init__(self, pid: int):
        self.pid = pid
        self._peak = self._peak_anon = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self) -> tuple[int, int]:
        """(VmRSS, RssAnon) in bytes, now."""
        fields = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon"):
                    fields[key] = int(value.split()[0]) * 1024
        return fields.get("VmRSS", 0), fields.get("RssAnon", 0)

    def now(self) -> int:
        return self.sample()[0]

    def _run(self):
        while not self._stop.is_set():
            try:
                rss, anon = self.sample()
            except OSError:
                return
            self._peak, self._peak_anon = max(self._peak, rss), max(self._peak_anon, anon)
            time.sleep(0.02)

    def reset(self) -> None:
        self._peak, self._peak_anon = self.sample()

    def peak(self) -> int:
        return max(self._peak, self.now())

    def peak_anon(self) -> int:
        return max(self._peak_anon, self.sample()[1])

    def close(self) -> None:
        self._stop.set()
