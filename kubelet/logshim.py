"""The per-container log shim: reads a container's stdout and stderr and writes CRI log lines.

The process runtime starts one shim per container instance, before the container, as
containerd-shim and conmon do for Kubernetes: the container's stdout and stderr are pipes whose
read ends only the shim holds, so the container never writes to the kubelet process (a
restarted kubelet leaves its containers' output intact, and no container sees SIGPIPE because
the kubelet went away). Each line becomes one record of the CRI log format that Kubernetes'
kubelet reads back:

    2026-12-01T10:00:00.123456789Z stdout F the line's text

with the time it was read (RFC 3339 with nanoseconds, UTC, trailing zeros trimmed, as
containerd writes it), the stream, and the tag `F` (a full line; its newline, and a carriage
return before it, are not part of the text) or `P` (a partial line: a piece of a line longer
than MAX_LINE bytes, or what was left without a newline when the stream closed).

Run as a script with only the standard library (`python -I -S logshim.py LOG_FD STDOUT_FD
STDERR_FD`): the kubelet passes the log file already open for appending and exclusively
flock()ed, so the lock is held for exactly as long as this process may still write; readers
(the kubelet's Logs service, and the runtime before it reports a container's exit) take
"the lock is free" to mean the log is complete. The shim drains both pipes until every writer
has closed them (the container and whatever it started have exited), then exits. Write errors
(a full disk) lose lines but never stop the draining, so a container never blocks on its
output. Concurrency: one thread, poll() over the two pipes.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

# containerd's default max_container_log_line_size: longer lines are split into P records.
MAX_LINE = 16 * 1024
READ_SIZE = 64 * 1024


def rfc3339nano(ns: int) -> str:
    """Go's time.RFC3339Nano of a UTC time: nanoseconds with trailing zeros (and dot) trimmed."""
    seconds, frac = divmod(ns, 1_000_000_000)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


class LineSplitter:
    """Turns one stream's chunks into (tag, text) records, keeping what is not yet a line."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self.buf = bytearray()

    def feed(self, chunk: bytes) -> list[tuple[bytes, bytes]]:
        self.buf += chunk
        out: list[tuple[bytes, bytes]] = []
        start = 0
        while (end := self.buf.find(b"\n", start)) >= 0:
            line = bytes(self.buf[start:end])
            if line.endswith(b"\r"):
                line = line[:-1]
            while len(line) > self.max_line:
                out.append((b"P", line[: self.max_line]))
                line = line[self.max_line :]
            out.append((b"F", line))
            start = end + 1
        del self.buf[:start]
        while len(self.buf) > self.max_line:
            out.append((b"P", bytes(self.buf[: self.max_line])))
            del self.buf[: self.max_line]
        return out

    def close(self) -> list[tuple[bytes, bytes]]:
        """The stream ended: what is left is a line without its newline (tag P, as containerd)."""
        rest, self.buf = bytes(self.buf), bytearray()
        return [(b"P", rest)] if rest else []


def record(ns: int, stream: bytes, tag: bytes, text: bytes) -> bytes:
    return b"%s %s %s %s\n" % (rfc3339nano(ns).encode(), stream, tag, text)


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # the line is lost; keep draining so the container is never blocked


def run(log_fd: int, stdout_fd: int, stderr_fd: int) -> None:
    streams = {stdout_fd: (b"stdout", LineSplitter()), stderr_fd: (b"stderr", LineSplitter())}
    poller = select.poll()
    for fd in streams:
        poller.register(fd, select.POLLIN)
    while streams:
        for fd, _ in poller.poll():
            if fd not in streams:
                continue
            name, splitter = streams[fd]
            try:
                chunk = os.read(fd, READ_SIZE)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            pieces = splitter.feed(chunk) if chunk else splitter.close()
            if pieces:
                now = time.time_ns()
                _write_all(log_fd, b"".join(record(now, name, t, text) for t, text in pieces))
            if not chunk:
                poller.unregister(fd)
                os.close(fd)
                del streams[fd]


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not all(a.isdigit() for a in argv):
        print("usage: logshim.py LOG_FD STDOUT_FD STDERR_FD", file=sys.stderr)
        return 2
    # A terminal's or a session's signals are not for the shim; it ends when the pipes do.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    log_fd, stdout_fd, stderr_fd = (int(a) for a in argv)
    run(log_fd, stdout_fd, stderr_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
