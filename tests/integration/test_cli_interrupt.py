"""Ctrl-C ends the CLI within a second, whatever the interrupted command was waiting on.

Each case runs the CLI's entry point in a subprocess with `get` replaced by a command that
hangs the way a watch did on a busy machine (a cancellation that does not end the task, or an
interpreter teardown that waits), sends SIGINT once the command runs, and times the exit.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

_PRELUDE = """
import asyncio, atexit, sys, time
import tinykube.cli.get as get

async def hanging(args, ctx):
    print("running", flush=True)
    {body}

get.run = hanging
from tinykube.cli.main import main
sys.argv = ["tinykube", "get", "pods", "-w"]
sys.exit(main())
"""

CASES = {
    # The task swallows its cancellation and goes on waiting (an in-flight call).
    "cancellation ignored": """
    while True:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            pass
    """,
    # The task ends at once, but interpreter teardown would wait (gRPC's threads).
    "slow teardown": """
    atexit.register(time.sleep, 30)
    await asyncio.sleep(30)
    """,
}


@pytest.mark.parametrize("body", CASES.values(), ids=CASES.keys())
def test_sigint_ends_an_async_command_within_a_second(body: str) -> None:
    script = _PRELUDE.format(body=textwrap.indent(textwrap.dedent(body).strip(), "    ").lstrip())
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "running\n"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pytest.fail("the CLI did not exit within 10 s of SIGINT")
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, proc.stderr.read() if proc.stderr else ""
    assert elapsed < 1.0
