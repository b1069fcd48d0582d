"""A memory report on demand, for finding where a process's bytes go (kube's /debug/pprof/heap).

With `TINYKUBE_MEMORY_REPORT=<path>` in its environment, a component writes a JSON report to
`<path>.<pid>.<n>.json` each time it gets SIGUSR2: its resident set (/proc), what glibc's
malloc holds (mallinfo2: the protobuf runtime's messages live there, outside Python's
allocator), Python's allocated blocks, the live objects the garbage collector tracks by type,
the top allocation sites by file:line when tracemalloc is on (with `TINYKUBE_MEMORY_TRACE=N`,
SIGUSR1 starts it keeping N frames), and whatever the component adds (the apiserver: its
watch caches, representation by representation). Without the variable nothing is installed.

`bench/memory_per_pod.py` sends the signals and reads the reports. Writing one walks every
object the garbage collector tracks, on the event loop: seconds at a million objects, which is
why it is only ever asked for.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import gc
import itertools
import json
import logging
import os
import signal
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

ENV = "TINYKUBE_MEMORY_REPORT"
# Frames tracemalloc keeps per allocation once SIGUSR1 starts it (the report's by-line view
# then holds only what was allocated since: the growth being looked for).
TRACE_ENV = "TINYKUBE_MEMORY_TRACE"

Extra = Callable[[], dict[str, Any]]


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_info() -> dict[str, int]:
    """glibc's mallinfo2: bytes in use (uordblks + hblkhd) and free in the heap ({} elsewhere)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = _MallInfo2
    m = fn()
    return {
        "in_use": m.uordblks + m.hblkhd,
        "heap": m.arena,
        "mmapped": m.hblkhd,
        "free": m.fordblks,
    }


def proc_status() -> dict[str, int]:
    """VmRSS, RssAnon, RssFile and VmHWM of this process, in bytes."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def object_counts(top: int = 40) -> list[tuple[str, int]]:
    """The types with the most live objects the garbage collector tracks (containers only:
    str, bytes and int are not tracked)."""
    counts = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
    return counts.most_common(top)


def traced(top: int = 60) -> dict[str, Any]:
    """tracemalloc's live bytes by file:line and by file (empty when it is off)."""
    if not tracemalloc.is_tracing():
        return {}
    snap = tracemalloc.take_snapshot().filter_traces(
        (tracemalloc.Filter(False, tracemalloc.__file__),)
    )
    total = sum(s.size for s in snap.statistics("filename"))

    def rows(key: str, n: int) -> list[dict[str, Any]]:
        return [
            {"where": str(s.traceback), "bytes": s.size, "count": s.count}
            for s in snap.statistics(key)[:n]
        ]

    return {"total": total, "by_line": rows("lineno", top), "by_file": rows("filename", 30)}


def report(extra: Extra | None = None) -> dict[str, Any]:
    began = time.monotonic()
    out: dict[str, Any] = {
        "pid": os.getpid(),
        "argv": sys.argv,
        "time": time.time(),
        "proc": proc_status(),
        "malloc": malloc_info(),
        "python_blocks": sys.getallocatedblocks(),
        "objects": object_counts(),
        "tracemalloc": traced(),
    }
    if extra is not None:
        try:
            out["extra"] = extra()
        except Exception as exc:  # a report must never take the process down
            log.exception("memory report: the component's part failed")
            out["extra_error"] = repr(exc)
    out["seconds"] = round(time.monotonic() - began, 3)
    return out


def install(extra: Extra | None = None) -> bool:
    """Write a report on each SIGUSR2 if `TINYKUBE_MEMORY_REPORT` is set (call on the running
    event loop); whether it was installed."""
    base = os.environ.get(ENV, "")
    if not base:
        return False
    counter = itertools.count(1)

    def write() -> None:
        path = f"{base}.{os.getpid()}.{next(counter)}.json"
        data = report(extra)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)  # a reader polling for the file never sees half of it
        log.info("memory report written to %s in %.1fs", path, data["seconds"])

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR2, write)
    frames = int(os.environ.get(TRACE_ENV, "0") or 0)
    if frames > 0:
        loop.add_signal_handler(signal.SIGUSR1, lambda: tracemalloc.start(frames))
    return True
