"""What `kubectl attach` connects to in the process runtime: a container's stdin pipe.

A container with `stdin: true` is started with the read end of a pipe as its stdin; the kubelet
keeps the write end here, keyed by (pod uid, container), so the process sees no EOF until the
kubelet lets go: when the container is started again (a new pipe), when the pod is forgotten,
or, for `stdinOnce`, when the first attach ends (`close`). Attach streams write into a
duplicate of the write end, so one attach ending never closes another's.

Its output is read back from the container's log as the log shim writes it (kubelet/streaming.py).
Single event loop; no locking.
"""

from __future__ import annotations

import contextlib
import os


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
                os.close(fd)

    def forget(self, uid: str) -> None:
        for key in [k for k in self._writers if k[0] == uid]:
            self.close(*key)
