"""Make a child process die with its parent: Linux's parent-death signal, set before exec.

`with_parent_death_signal(cmd)` wraps a command line in a tiny shim (`python -I -S -c ...`) that
calls prctl(PR_SET_PDEATHSIG, SIGTERM), checks that the parent it was started for is still its
parent (it may have died before the prctl), and execs the command; the signal setting survives
the exec and the pid stays the same. So when `tinykube up` dies, even by SIGKILL or with its
terminal, the kernel sends SIGTERM to every component, and each one stops as after Ctrl-C.

Why a shim and not `preexec_fn`: Python code between fork and exec can deadlock in a process
that has threads, and `subprocess` warns against it. The kernel delivers the signal when the
*thread* that forked the child exits, so the caller must spawn from a thread that lives as long
as the children should (the main thread of `tinykube up`). Elsewhere than Linux the command is
returned unchanged.
"""

from __future__ import annotations

import os
import sys

PR_SET_PDEATHSIG = 1

# argv: [-c, parent pid, command...]. Exit code 127 is what a shell returns for a command that
# could not run; the parent is gone anyway when the check fails.
_SHIM = (
    "import ctypes, os, signal, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    f"if libc.prctl({PR_SET_PDEATHSIG}, int(signal.SIGTERM), 0, 0, 0) != 0:\n"
    "    sys.exit('prctl(PR_SET_PDEATHSIG): ' + os.strerror(ctypes.get_errno()))\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(127)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def with_parent_death_signal(cmd: list[str], parent: int | None = None) -> list[str]:
    """`cmd` run so that it gets SIGTERM when this process (or `parent`) dies (Linux only)."""
    if not sys.platform.startswith("linux") or not cmd:
        return list(cmd)
    ppid = os.getpid() if parent is None else parent
    return [sys.executable, "-I", "-S", "-c", _SHIM, str(ppid), *cmd]
