"""Kubernetes quantity parsing: a table of good and bad inputs."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tinykube.quantity import (
    QuantityError,
    QuantityTooLongError,
    format_bytes,
    format_milli,
    int64_overflow,
    milli_value,
    parse_quantity,
    value,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Fraction(0)),
        ("1", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),
        ("+2", Fraction(2)),
        ("-2", Fraction(-2)),
        ("100n", Fraction(100, 10**9)),
        ("3u", Fraction(3, 10**6)),
        ("2k", Fraction(2000)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("1Ki", Fraction(1024)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("128Mi", Fraction(128 * 2**20)),
        ("1Ti", Fraction(2**40)),
        ("1Pi", Fraction(2**50)),
        ("1Ei", Fraction(2**60)),
        ("2e3", Fraction(2000)),
        ("2E3", Fraction(2000)),
        ("1e-3", Fraction(1, 1000)),
        ("5e+2", Fraction(500)),
        ("0.1m", Fraction(1, 10000)),
    ],
)
def test_good_quantities(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "1 Gi",
        "1gi",
        "1KB",
        "1K",  # decimal kilo is lower-case k
        "1.2.3",
        "1x",
        "abc",
        "Gi",
        "+",
        "-",
        ".",
        "m",
        "1e",
        "1e999",
        "1mi",
        "--1",
        "1,5",
    ],
)
def test_bad_quantities(text: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert repr(text) in str(info.value) or "exponent" in str(info.value)


@pytest.mark.parametrize("text", ["9" * 65, "9" * 5000, "0." + "0" * 5000 + "1", "1" * 4301 + "Ki"])
def test_too_many_digits_is_a_quantity_error(text: str) -> None:
    # Python's int-string limit (4300 digits) raised a bare ValueError here.
    with pytest.raises(QuantityTooLongError, match="digits is too long"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("resource", "text", "too_big"),
    [
        ("cpu", "9223372036854775807m", False),
        ("cpu", "9223372036854775808m", True),
        ("cpu", "9223372036854775.807", False),
        ("cpu", "9223372036854775.8071", True),  # rounded up to the next millicore
        ("memory", "9223372036854775807", False),
        ("memory", "8Ei", True),
        ("pods", "1e19", True),
        ("pods", "1e18", False),
    ],
)
def test_int64_overflow(resource: str, text: str, too_big: bool) -> None:
    assert bool(int64_overflow(resource, parse_quantity(text))) is too_big


@pytest.mark.parametrize(
    ("text", "millis", "units"),
    [
        ("1", 1000, 1),
        ("250m", 250, 1),
        ("0.1m", 1, 1),  # rounded up: never under-count a request
        ("1.5", 1500, 2),
        ("1Ki", 1024000, 1024),
        ("0", 0, 0),
    ],
)
def test_milli_value_and_value_round_up(text: str, millis: int, units: int) -> None:
    assert milli_value(text) == millis
    assert value(text) == units


def test_formatting() -> None:
    assert format_milli(1500) == "1500m"
    assert format_milli(2000) == "2"
    assert format_bytes(2**20) == "1Mi"
    assert format_bytes(3 * 2**30) == "3Gi"
    assert format_bytes(1000) == "1000"
    assert format_bytes(0) == "0"
