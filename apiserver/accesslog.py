"""What both front ends (REST and gRPC) share for logging requests: the access log, Go's
duration format for its latency column, and a limiter that keeps bad clients from flooding
the log. Below both front ends, so neither imports the other."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

# The access log (`--access-log`): kube's httplog line per REST request and per gRPC call.
access_log = logging.getLogger("apiserver.access")


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it (the latency of kube's httplog)."""
    if seconds >= 1:
        return f"{seconds:.6g}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.6g}ms"
    return f"{seconds * 1e6:.6g}µs"


class LogLimiter:
    """Lets one log line through per `interval` seconds and counts the ones it held back, so a
    client that sends garbage in a loop cannot flood the log."""

    def __init__(self, interval: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.monotonic = monotonic
        self._next = float("-inf")
        self.suppressed = 0

    def allow(self) -> int | None:
        """None to stay silent; else how many lines were held back since the last one."""
        now = self.monotonic()
        if now < self._next:
            self.suppressed += 1
            return None
        self._next = now + self.interval
        held, self.suppressed = self.suppressed, 0
        return held
