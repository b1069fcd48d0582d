"""What `kubectl attach` connects to in the process runtime: a container's stdin pipe.

A container with `stdin: true` is started with the read end of a pipe as its stdin; the kubelet
keeps the write end here, keyed by (pod uid, container), so the process sees no EOF until the
kubelet lets go: when the container is started again (a new pipe), when the pod is forgotten,
or, for `stdinOnce`, when the first attach ends (`close`). Attach streams write into a
duplicate of the write end, so one attach ending never closes another's.

Its output is read back from the container's log as the log shim writes it (kubelet/streaming.py).

A `tty: true` container gets a pseudo-terminal instead (`open_terminal`): its stdin, stdout and
stderr are the terminal's slave, made its controlling terminal in its own session
(`terminal_argv`: a tiny program that does so, then becomes the command; a preexec_fn is unsafe
in the threaded kubelet). The log shim reads the terminal's output; the kubelet keeps the master
here (`adopt`) as the container's stdin, which attach writes into (the terminal's line
discipline turns Enter into a newline, echoes, delivers Ctrl-C as SIGINT) and resizes. Its end
for `stdinOnce` is the terminal's end of file (Ctrl-D), as the master stays open in the shim.
Single event loop; no locking.
"""

from __future__ import annotations

import contextlib
import os
import sys

# Makes the pty on stdin the controlling terminal of the new session, then becomes the command.
_CTTY = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def open_terminal() -> tuple[int, int]:
    """A new pseudo-terminal: (master, slave), neither inherited by children."""
    master, slave = os.openpty()
    os.set_inheritable(master, False)
    os.set_inheritable(slave, False)
    return master, slave


def terminal_argv(argv: list[str]) -> list[str]:
    """`argv` run with its stdin (a pty's slave, in a new session) as controlling terminal."""
    return [sys.executable, "-I", "-S", "-c", _CTTY, *argv]


class StdinPipes:
    def __init__(self) -> None:
        self._writers: dict[tuple[str, str], int] = {}

    def open(self, uid: str, container: str) -> int:
        """A new pipe for the container's next start: the read end, which the caller passes
        to the process and then closes."""
        self.close(uid, container)
        read, write = os.pipe()
        os.set_inheritable(write, False)
        self._writers[(uid, container)] = write
        return read

    def adopt(self, uid: str, container: str, master: int) -> None:
        """Keep a `tty: true` container's terminal master as its stdin."""
        self.close(uid, container)
        self._writers[(uid, container)] = master

    def writer(self, uid: str, container: str) -> int:
        """A duplicate of the write end (the caller closes it), or -1 once closed."""
        fd = self._writers.get((uid, container), -1)
        if fd < 0:
            return -1
        dup = os.dup(fd)
        os.set_blocking(dup, False)
        return dup

    def close(self, uid: str, container: str) -> None:
        fd = self._writers.pop((uid, container), -1)
        if fd >= 0:
            with contextlib.suppress(OSError):
                if os.isatty(fd):
                    os.write(fd, b"\x04")  # a terminal's end of file
                os.close(fd)

    def forget(self, uid: str) -> None:
        for key in [k for k in self._writers if k[0] == uid]:
            self.close(*key)
