"""Kubernetes resource quantities ("500m", "1.5Gi", "2e3"), parsed strictly and exactly.

A quantity is a signed decimal number followed by one suffix: a binary SI suffix (Ki, Mi, Gi,
Ti, Pi, Ei), a decimal SI suffix (n, u, m, "", k, M, G, T, P, E) or a decimal exponent (e3,
E-2). Anything else ("1 Gi", "1gi", "1KB", "1.2.3", "") is rejected with a message saying what
is accepted. Values are exact fractions; `milli_value` and `value` round up, as Kubernetes does,
so a request can never be under-counted.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_SUFFIX = r"(?:Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
_QUANTITY_RE = re.compile(rf"^({_NUMBER})({_SUFFIX})$")

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}

FORMAT_HINT = (
    "quantities must match the regular expression "
    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' (e.g. 500m, 1.5Gi, 2, 1e3)"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


class QuantityTooLongError(QuantityError):
    """A quantity with more digits than any amount needs (MAX_DIGITS)."""


# No int64 amount needs more than 19 integer digits, nor precision below a nano (9 places): a
# longer number is refused before Fraction, which would hit Python's int-string digit limit
# (a ValueError that is not a QuantityError) or spend quadratic time on it.
MAX_DIGITS = 64

# Kubernetes' components (kube-scheduler, the kubelet) account in int64: cpu in millicores,
# every other resource in whole units (bytes for memory and storage).
MAX_INT64 = 2**63 - 1


# A cluster uses a handful of distinct quantity strings ("100m", "500Mi", a node's capacity)
# millions of times: validation of every pod and every informer event of the scheduler parse
# them. Fractions are immutable, so one parsed value is shared; errors are not cached.
@functools.lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity string; raises QuantityError when it is not one."""
    if not isinstance(text, str) or not text:
        raise QuantityError(f"quantity {text!r} is empty; {FORMAT_HINT}")
    match = _QUANTITY_RE.match(text)
    if match is None:
        raise QuantityError(f"quantity {text!r} is malformed; {FORMAT_HINT}")
    number, suffix = match.groups()
    if number in {"+", "-", "+.", "-.", "."}:
        raise QuantityError(f"quantity {text!r} has no digits; {FORMAT_HINT}")
    if len(number) > MAX_DIGITS:
        raise QuantityTooLongError(
            f"quantity of {len(number)} digits is too long: at most {MAX_DIGITS} are accepted"
        )
    value = Fraction(number)
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix in _DECIMAL:
        return value * _DECIMAL[suffix]
    exponent = int(suffix[1:])
    if abs(exponent) > 64:
        raise QuantityError(f"quantity {text!r} has an exponent out of range")
    return value * Fraction(10) ** exponent


def milli_value(text: str) -> int:
    """The quantity in thousandths, rounded up: "250m" -> 250, "1" -> 1000, "0.1m" -> 1."""
    return math.ceil(parse_quantity(text) * 1000)


def value(text: str) -> int:
    """The quantity in whole units, rounded up: "1Ki" -> 1024, "500m" -> 1."""
    return math.ceil(parse_quantity(text))


def int64_overflow(resource: str, amount: Fraction) -> str:
    """Why `amount` of `resource` cannot be accounted in an int64 ("" when it can): the limit
    is 2**63-1 millicores for cpu, 2**63-1 units (bytes, pods, ...) for anything else."""
    if resource == "cpu":
        if math.ceil(amount * 1000) > MAX_INT64:
            return f"must be less than or equal to {MAX_INT64}m"
    elif math.ceil(amount) > MAX_INT64:
        return f"must be less than or equal to {MAX_INT64}"
    return ""


def format_milli(millis: int) -> str:
    """Render thousandths the way Kubernetes prints cpu: 1500 -> "1500m", 2000 -> "2"."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_bytes(n: int) -> str:
    """Render a byte count with the largest exact binary suffix: 1048576 -> "1Mi"."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


BINARY_SI = "BinarySI"
DECIMAL_SI = "DecimalSI"
DECIMAL_EXPONENT = "DecimalExponent"
_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P"}
_DECIMAL_SUFFIXES[18] = "E"


def quantity_format(text: str) -> str:
    """How Kubernetes prints a quantity written as `text`: BINARY_SI ("64Mi"), DECIMAL_EXPONENT
    ("1e3") or DECIMAL_SI (anything else). Raises QuantityError when it is not a quantity."""
    parse_quantity(text)
    suffix = text.lstrip("+-.0123456789")
    if suffix in _BINARY:
        return BINARY_SI
    if suffix[:1] in ("e", "E") and suffix not in _DECIMAL:
        return DECIMAL_EXPONENT
    return DECIMAL_SI


def format_quantity(amount: Fraction, fmt: str = DECIMAL_SI) -> str:
    """`amount` in Kubernetes' canonical form for `fmt` (Quantity.String()): a binary suffix
    when the amount is a whole multiple of 1024 ("1548576Ki"), otherwise, and for decimal
    formats, the largest power of 1000 that leaves a whole number ("1350m", "100M", "1e3").
    Below a nano-unit the amount is rounded up, as Kubernetes does."""
    if amount == 0:
        return "0"
    if fmt == BINARY_SI and amount.denominator == 1 and abs(amount) >= 1024:
        number = int(amount)
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if number % _BINARY[suffix] == 0:
                return f"{number // _BINARY[suffix]}{suffix}"
        return str(number)
    nanos = math.ceil(amount * 10**9)
    exponent = -9
    while exponent < 18 and nanos % 1000 == 0:
        nanos //= 1000
        exponent += 3
    if fmt == DECIMAL_EXPONENT:
        return f"{nanos}e{exponent}" if exponent else str(nanos)
    return f"{nanos}{_DECIMAL_SUFFIXES[exponent]}"
