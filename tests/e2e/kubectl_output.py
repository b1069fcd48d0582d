"""Matching the real kubectl's output against what it prints against Kubernetes.

An expected output is a template of lines. Runs of spaces stand for any run of spaces
(kubectl's tabwriter pads columns to the widest value, which varies with ages and names), and
`<placeholder>`s stand for the values that differ per run: `<age>` (`5s`, `2m3s`), `<ip>`,
`<time>` (RFC 1123Z, as describe prints), `<suffix>` (a ReplicaSet pod's five characters),
`<*>` (one token) and `<...>` (anything, to the end of the line). Everything else must be equal.

`kubectl_stream` runs a long-lived kubectl (`get -w`) as an asyncio subprocess, so a test can
wait, bounded, for the line that shows a change.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tests.e2e.conftest import CLIResult, UpCluster, venv_bin

PLACEHOLDERS = {
    "<age>": r"(?:\d+[smhd])+|<invalid>",
    "<ip>": r"\d+\.\d+\.\d+\.\d+",
    "<time>": r"\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} [+-]\d{4}",
    "<suffix>": r"[a-z0-9]{5}",
    "<*>": r"\S+",
    "<...>": r".*",
}
_TOKEN = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS) + r"| +")


def line_pattern(template: str) -> re.Pattern[str]:
    parts: list[str] = []
    at = 0
    for match in _TOKEN.finditer(template):
        parts.append(re.escape(template[at : match.start()]))
        token = match.group()
        parts.append(f"(?:{PLACEHOLDERS[token]})" if token in PLACEHOLDERS else r" +")
        at = match.end()
    parts.append(re.escape(template[at:]))
    return re.compile("".join(parts))


def mismatch(actual: str, expected: str) -> str | None:
    """Why `actual` does not match the template `expected` (line by line), or None."""
    want = expected.strip("\n").splitlines()
    got = [line.rstrip() for line in actual.strip("\n").splitlines()]
    for i, template in enumerate(want):
        if i >= len(got):
            return f"line {i + 1} missing; expected {template!r}"
        if not line_pattern(template.rstrip()).fullmatch(got[i]):
            return f"line {i + 1}: expected {template!r}, got {got[i]!r}"
    if len(got) > len(want):
        return f"unexpected line {len(want) + 1}: {got[len(want)]!r}"
    return None


def assert_output(actual: str, expected: str) -> None:
    problem = mismatch(actual, expected)
    assert problem is None, f"{problem}\n--- kubectl printed:\n{actual}"


def ok(result: CLIResult) -> str:
    """kubectl's stdout; fails the test with everything it printed if it did not succeed."""
    assert result.code == 0, f"kubectl failed ({result.code}):\n{result.out}\n{result.err}"
    return result.out


class Lines:
    """The lines a streaming kubectl has printed so far."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self._stream = stream
        self.seen: list[str] = []

    @property
    def count(self) -> int:
        return len(self.seen)

    async def until(self, template: str, *, after: int = 0, limit: float = 60.0) -> str:
        """The first line from index `after` on that matches `template`, waiting for it."""
        wanted = line_pattern(template)
        for line in self.seen[after:]:
            if wanted.fullmatch(line.rstrip()):
                return line
        deadline = asyncio.get_running_loop().time() + limit
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                raw = await asyncio.wait_for(self._stream.readline(), max(remaining, 0))
            except TimeoutError:
                pytest.fail(f"no line like {template!r} in {limit}s:\n" + "\n".join(self.seen))
            if not raw:
                pytest.fail(f"kubectl ended before {template!r}:\n" + "\n".join(self.seen))
            line = raw.decode().rstrip("\n")
            self.seen.append(line)
            if wanted.fullmatch(line.rstrip()):
                return line


@asynccontextmanager
async def kubectl_stream(cluster: UpCluster, *args: str) -> AsyncIterator[Lines]:
    """Run `kubectl ARGS...` in the background for the block; terminate it at the end."""
    process = await asyncio.create_subprocess_exec(
        str(venv_bin() / "kubectl"),
        "--kubeconfig",
        str(cluster.kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    try:
        yield Lines(process.stdout)
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()
