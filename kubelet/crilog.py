"""Reading CRI-format container logs back, with Kubernetes' kubelet's options.

The log shim (kubelet/logshim.py) writes one record per line, `<RFC 3339 nano time> <stream>
<tag> <text>`. `parse_record` reads one back; `LogOptions` holds what a Logs request asks for;
`LogWriter` turns records into the bytes `kubectl logs` prints, as the kubelet's ReadLogs does:

- `tail_start` finds where the last N records begin (records, not logical lines: a line split
  into P records counts once per record), and reading starts there;
- records older than `since` are skipped (a record exactly at `since` is kept);
- the text is printed, a full (F) record with its newline, a partial (P) one without;
  with `timestamps`, each logical line is prefixed with its record's time in RFC 3339 with
  exactly nine fractional digits and a space (the pieces after a P record get no prefix);
- `limit_bytes` cuts the output (prefixes included), possibly inside a line.

`writer_active` tells whether a shim still holds the log file's lock (more may be written).
Pure functions apart from `writer_active`, which opens the file; no threads.
"""

from __future__ import annotations

import calendar
import errno
import fcntl
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

_TIME = re.compile(
    rb"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d\d):(\d\d))"
)


class LogFormatError(ValueError):
    """A line that is not a CRI log record."""


def parse_time(text: bytes) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time (any number of fractional digits)."""
    m = _TIME.fullmatch(text)
    if m is None:
        raise LogFormatError(f"unexpected timestamp {text!r}: not RFC 3339")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    if m.group(9):
        offset = int(m.group(10)) * 3600 + int(m.group(11)) * 60
        seconds -= offset if m.group(9) == b"+" else -offset
    frac = (m.group(7) or b"").ljust(9, b"0")
    return seconds * 1_000_000_000 + int(frac)


def format_time(ns: int) -> str:
    """The kubelet's output format: RFC 3339 in UTC with exactly nine fractional digits."""
    seconds, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{frac:09d}Z"


@dataclass(frozen=True)
class Record:
    time_ns: int
    stream: str
    partial: bool
    # The text as printed: a full record's ends with its newline, a partial one's does not.
    text: bytes


def parse_record(line: bytes) -> Record:
    """One record (a file line, with or without its newline); LogFormatError if it is not one."""
    parts = line.split(b" ", 3)
    if len(parts) < 4:
        raise LogFormatError(f"not a CRI log record: {line[:80]!r}")
    stamp, stream, tags, text = parts
    if stream not in (b"stdout", b"stderr"):
        raise LogFormatError(f"unexpected stream type {stream.decode(errors='replace')!r}")
    partial = tags.split(b":")[0] == b"P"
    if text.endswith(b"\n"):
        if partial:
            text = text[:-1]
    elif not partial:
        text += b"\n"  # the record's own newline was not written yet (or was cut)
    return Record(parse_time(stamp), stream.decode(), partial, text)


def tail_start(data: bytes, lines: int) -> int:
    """The offset where the last `lines` newline-terminated file lines of `data` begin."""
    if lines <= 0:
        return len(data)
    # A last line without its newline is a record being written: it is not counted.
    pos = data.rfind(b"\n")
    for _ in range(lines):
        pos = data.rfind(b"\n", 0, pos)
        if pos < 0:
            return 0
    return pos + 1


@dataclass(frozen=True)
class LogOptions:
    tail_lines: int | None = None
    limit_bytes: int | None = None
    timestamps: bool = False
    # Records older than this (ns since the epoch) are skipped; 0 keeps everything.
    since_ns: int = 0


@dataclass
class LogWriter:
    """Renders records under `options`; `done` once `limit_bytes` is used up."""

    options: LogOptions
    remaining: int | None = None
    new_line: bool = True
    done: bool = field(default=False)

    def __post_init__(self) -> None:
        self.remaining = self.options.limit_bytes

    def render(self, record: Record) -> bytes:
        if self.done:
            return b""
        starts_line = self.new_line
        self.new_line = not record.partial
        if record.time_ns < self.options.since_ns:
            return b""
        out = record.text
        if self.options.timestamps and starts_line:
            out = format_time(record.time_ns).encode() + b" " + out
        if self.remaining is not None:
            out = out[: self.remaining]
            self.remaining -= len(out)
            if self.remaining <= 0:
                self.done = True
        return out

    def lines(self, data: bytes) -> tuple[bytes, int]:
        """Rendered output of the complete lines in `data`, and how many bytes were consumed.

        Lines that are not CRI records are skipped, as the kubelet skips lines it cannot parse.
        """
        out: list[bytes] = []
        start = 0
        while not self.done and (end := data.find(b"\n", start)) >= 0:
            line = data[start : end + 1]
            start = end + 1
            try:
                out.append(self.render(parse_record(line)))
            except LogFormatError:
                continue
        return b"".join(out), start


def writer_active(path: Path) -> bool:
    """Whether a log shim still holds `path`'s lock, so more may be appended to it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)
    return False
