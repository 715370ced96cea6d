"""Peak resident memory during a block of code, sampled from /proc (Linux) by a background thread."""

from __future__ import annotations

import os
import threading
import time

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_rss_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except OSError:  # not Linux: fall back to the process peak so far
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakRSS:
    """``with PeakRSS() as peak: ...`` then ``peak.bytes`` (highest RSS seen) and ``peak.above_start``."""

    def __init__(self, interval_s: float = 0.002):
        self.interval_s = interval_s
        self.start = self.bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.bytes = max(self.bytes, current_rss_bytes())
            time.sleep(self.interval_s)

    def __enter__(self) -> PeakRSS:
        self.start = self.bytes = current_rss_bytes()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.bytes = max(self.bytes, current_rss_bytes())

    @property
    def above_start(self) -> int:
        return self.bytes - self.start
