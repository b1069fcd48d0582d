"""apiserver.accesslog.LogLimiter: one line per interval, the rest counted."""

from __future__ import annotations

import pytest

from apiserver.accesslog import LogLimiter


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        ([0.0], [0]),
        ([0.0, 1.0, 59.9], [0, None, None]),
        ([0.0, 1.0, 2.0, 60.0, 61.0, 130.0], [0, None, None, 2, None, 1]),
        ([5.0, 65.0, 125.0], [0, 0, 0]),
    ],
)
def test_one_line_per_interval(times: list[float], expected: list[int | None]) -> None:
    now = [0.0]
    limiter = LogLimiter(60.0, monotonic=lambda: now[0])
    got = []
    for t in times:
        now[0] = t
        got.append(limiter.allow())
    assert got == expected
