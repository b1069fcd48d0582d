"""OpenAPI v3 schemas of CustomResourceDefinitions: the CRD's own schema checks (kube's
structural-schema rules), and for custom objects validation, pruning of unknown fields and
defaulting, as kube's apiextensions-apiserver does them (its `pkg/apiserver/schema` packages and
k8s.io/kube-openapi's validator, whose messages and field paths we keep).

A schema is compiled once into a tree of `_Node`s (`compile_schema`, cached by the schema dict's
identity: a schema must not be changed after its first use); the four module functions are the
interface the CRD registry calls. Everything here is pure: no I/O, no clock, safe from any thread.

Kube's quirks kept on purpose, because clients see them: the summaries of anyOf/oneOf/allOf/not
and the int32/float range checks are reported at field "<nil>" (the path prefix, when given);
messages name the field relative to the validated value ("replicas in body ..." under the
"status" prefix); a null fails an enum that does not list null; defaults under
additionalProperties are not checked at CRD validation.

Decisions where kube's behaviour is an accident rather than a rule:
- a value of the wrong JSON type always fails the type check (kube-openapi lets a list through
  where a string with a format is declared);
- enum members compare as JSON values (Go converts between kinds, so 97 would equal "a");
- anyOf/oneOf report the failing branch with the fewest errors (kube-openapi counts checks);
- patterns are RE2 (Go's regexp syntax and linear time), through google-re2.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import re2  # type: ignore[import-untyped]

from tinykube.errors import FieldError
from tinykube.selectors import validate_label_key, validate_label_value

JSON = Any

# ---------------------------------------------------------------------------------------------
# Go's way of printing values (field.Error bodies and kube-openapi messages)

_GO_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_GO_QUOTE = str.maketrans({**{chr(c): f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}, **_GO_ESCAPES})


def go_quote(value: str) -> str:
    """Go's %q of a string."""
    return '"' + value.translate(_GO_QUOTE) + '"'


def _digits(f: float) -> tuple[str, int]:
    """The shortest decimal digits of |f| and the exponent x with |f| = d.ddd * 10**x."""
    _sign, digit_t, exp = Decimal(repr(abs(f))).as_tuple()
    assert isinstance(exp, int)
    digits = "".join(map(str, digit_t)).rstrip("0") or "0"
    exp += len("".join(map(str, digit_t))) - len(digits)
    return digits, len(digits) - 1 + exp


def go_float(f: float) -> str:
    """Go's %v of a float64 (strconv 'g', shortest, exponent from 1e+06 and below 1e-04)."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "-0" if math.copysign(1, f) < 0 else "0"
    sign = "-" if f < 0 else ""
    digits, x = _digits(f)
    if x < -4 or x >= 6:
        mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mant}e{'-' if x < 0 else '+'}{abs(x):02d}"
    return sign + _fixed(digits, x)


def _fixed(digits: str, x: int) -> str:
    if x < 0:
        return "0." + "0" * (-x - 1) + digits
    if len(digits) <= x + 1:
        return digits + "0" * (x + 1 - len(digits))
    return digits[: x + 1] + "." + digits[x + 1 :]


def _json_float(f: float) -> str:
    """encoding/json's float64: plain below 1e21, exponent (e-7, e+21) outside."""
    if not math.isfinite(f):
        return go_float(f)  # json.Marshal refuses these; field.Error then prints %v
    if f == 0:
        return "0"
    digits, x = _digits(f)
    sign = "-" if f < 0 else ""
    if x < -6 or x >= 21:
        mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mant}e{'-' if x < 0 else '+'}{abs(x):02d}"
    return sign + _fixed(digits, x)


_JSON_HTML = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def go_json(value: JSON) -> str:
    """encoding/json.Marshal of a JSON value: sorted keys, no spaces, HTML characters escaped."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _json_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).translate(_JSON_HTML)
    if isinstance(value, list):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(
                json.dumps(k, ensure_ascii=False).translate(_JSON_HTML) + ":" + go_json(value[k])
                for k in sorted(value)
            )
            + "}"
        )
    return json.dumps(value)


def bad_value(value: JSON) -> str:
    """How field.Error prints a bad value: strings quoted, numbers and bools bare, else JSON."""
    if isinstance(value, str):
        return go_quote(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    return go_json(value)


def _invalid(path: str, value: JSON, detail: str) -> FieldError:
    return FieldError(path, f"Invalid value: {bad_value(value)}: {detail}")


def _required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, "Required value" + (f": {detail}" if detail else ""))


def _forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, f"Forbidden: {detail}")


def _unsupported(path: str, value: JSON, supported: Iterable[str]) -> FieldError:
    allowed = ", ".join(go_quote(s) for s in supported)
    detail = f": supported values: {allowed}" if allowed else ""
    return FieldError(path, f"Unsupported value: {bad_value(value)}{detail}")


def _too_many(path: str, actual: int, limit: int) -> FieldError:
    unit = "item" if limit == 1 else "items"
    return FieldError(path, f"Too many: {actual}: must have at most {limit} {unit}")


def _too_long(path: str, limit: int) -> FieldError:
    unit = "byte" if limit == 1 else "bytes"
    return FieldError(path, f"Too long: may not be more than {limit} {unit}")


def _duplicate(path: str, value: JSON) -> FieldError:
    return FieldError(path, f"Duplicate value: {bad_value(value)}")


# ---------------------------------------------------------------------------------------------
# Patterns: RE2, as Go's regexp (same syntax, linear time whatever a user writes)

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_UNANCHORED = re2._re2.RE2.Anchor.UNANCHORED
# RE2's error codes in Go's regexp/syntax wording.
_GO_REGEXP_ERRORS = {
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "unexpected )": "unexpected )",
    "bad repetition operator": "invalid nested repetition operator",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "trailing \\": "trailing backslash at end of expression",
}


class GoRegexp:
    """A pattern compiled by RE2; `error` is Go's regexp.Compile error text, or None."""

    __slots__ = ("_re", "error")

    def __init__(self, pattern: str) -> None:
        self._re = re2._re2.RE2(pattern.encode(), _RE2_OPTIONS)
        self.error: str | None = None
        if not self._re.ok():
            text = self._re.error().decode(errors="replace")
            code, _, arg = text.partition(": ")
            code = _GO_REGEXP_ERRORS.get(code, code)
            if code in ("missing closing )", "missing closing ]", "unexpected )"):
                arg = pattern
            self.error = f"error parsing regexp: {code}: `{arg}`"

    def search(self, text: str) -> bool:
        data = text.encode()
        return bool(self._re.Match(_UNANCHORED, data, 0, len(data))[0][0] >= 0)


# ---------------------------------------------------------------------------------------------
# Formats (kube-openapi's strfmt registry as the apiextensions-apiserver keeps it)

_UUID = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\Z")
_UUID3 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}\Z")
_UUID4 = re.compile(
    r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}\Z"
)
_UUID5 = re.compile(
    r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}\Z"
)
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})\Z")
_TIME = re.compile(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))\Z")
_BASE64 = re.compile(
    r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})\Z"
)
_SHORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_LONG_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_HOSTNAME_LABEL = re.compile(r"^[^\W_]([\w-]{0,61}[^\W_])?\Z")
_MAC = re.compile(
    r"^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})\Z|^([0-9A-Fa-f]{4}\.){2}([0-9A-Fa-f]{4})\Z"
    r"|^([0-9A-Fa-f]{2}[:-]){7}([0-9A-Fa-f]{2})\Z|^([0-9A-Fa-f]{4}\.){3}([0-9A-Fa-f]{4})\Z"
    r"|^([0-9A-Fa-f]{2}[:-]){19}([0-9A-Fa-f]{2})\Z|^([0-9A-Fa-f]{4}\.){9}([0-9A-Fa-f]{4})\Z"
)
_HEXCOLOR = re.compile(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})\Z")
_RGBCOLOR = re.compile(
    r"^rgb\(\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])"
    r"\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*\)\Z"
)
_SSN = re.compile(r"^\d{3}[- ]?\d{2}[- ]?\d{4}\Z")
_EMAIL = re.compile(r"^[^@\s<>()\[\],;:\"]+@[^@\s<>()\[\],;:\"]+\Z")
_GO_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+\Z|^[-+]?0\Z")
_SCALA_DURATION = re.compile(r"(\d+)\s*([A-Za-zµ]+)")
_DURATION_UNITS = (
    ("ns", "nano"),
    ("us", "µs", "micro"),
    ("ms", "milli"),
    ("s", "sec"),
    ("m", "min"),
    ("h", "hr", "hour"),
    ("d", "day"),
    ("w", "wk", "week"),
)


def _is_date(s: str) -> bool:
    m = _DATE.match(s)
    if not m:
        return False
    try:
        date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return False
    return True


def _is_datetime(s: str) -> bool:
    if len(s) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _TIME.match(parts[1])
    return m is not None and m[1] <= "23" and m[2] <= "59" and m[3] <= "59"


def _is_duration(s: str) -> bool:
    if _GO_DURATION.match(s):
        return True
    for _, unit in _SCALA_DURATION.findall(s):
        unit = unit.lower().strip()
        for variants in _DURATION_UNITS:
            for i, v in enumerate(variants):
                if (i == len(variants) - 1 and unit.startswith(v)) or v == unit:
                    return True
    return False


_NAMED_ADDRESS = re.compile(r"^[^<>]*<([^<>]+)>\s*\Z")


def _is_email(s: str) -> bool:
    """Go's mail.ParseAddress, roughly: an address, bare or as `Name <address>`."""
    m = _NAMED_ADDRESS.match(s)
    return _EMAIL.match(m[1] if m else s.strip()) is not None


def _is_hostname(s: str) -> bool:
    if not s or len(s) > 255:
        return False
    labels = s.split(".")
    if any(len(p) > 63 or not _HOSTNAME_LABEL.match(p) for p in labels):
        return False
    return len(labels) == 1 or (len(labels[-1]) >= 2 and not labels[-1].isdigit())


def _is_ipv4(s: str) -> bool:
    try:
        ipaddress.IPv4Address(s)
    except ValueError:
        return False
    return True


def _is_ipv6(s: str) -> bool:
    try:
        ipaddress.IPv6Address(s)
    except ValueError:
        return False
    return True


def _is_cidr(s: str) -> bool:
    try:
        ipaddress.ip_network(s, strict=False)
    except ValueError:
        return False
    return "/" in s


def _is_uri(s: str) -> bool:
    # Go's url.ParseRequestURI: an absolute URI or an absolute path, no fragment.
    if not s or "#" in s or " " in s:
        return False
    if s.startswith("/"):
        return True
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:.+", s) is not None


def _is_base64(s: str) -> bool:
    if not _BASE64.match(s):
        return False
    try:
        base64.b64decode(s, validate=True)
    except binascii.Error:
        return False
    return True


def _luhn(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c)
        if i % 2 == 1:
            d = d * 2 - 9 if d * 2 > 9 else d * 2
        total += d
    return total % 10 == 0


def _is_creditcard(s: str) -> bool:
    digits = re.sub(r"[^0-9]", "", s)
    return 13 <= len(digits) <= 19 and _luhn(digits)


def _is_isbn10(s: str) -> bool:
    t = re.sub(r"[\s-]", "", s)
    if not re.match(r"^\d{9}[\dX]\Z", t):
        return False
    total = sum((10 - i) * (10 if c == "X" else int(c)) for i, c in enumerate(t))
    return total % 11 == 0


def _is_isbn13(s: str) -> bool:
    t = re.sub(r"[\s-]", "", s)
    if not re.match(r"^\d{13}\Z", t):
        return False
    total = sum(int(c) * (1 if i % 2 == 0 else 3) for i, c in enumerate(t))
    return total % 10 == 0


# Normalized (dashes removed) format name -> check. Formats kube keeps but does not check
# ("password") accept every string.
_STRING_FORMATS: dict[str, Callable[[str], bool]] = {
    "bsonobjectid": lambda s: re.match(r"^[0-9a-fA-F]{24}\Z", s) is not None,
    "uri": _is_uri,
    "email": lambda s: _is_email(s),
    "hostname": _is_hostname,
    "ipv4": _is_ipv4,
    "ipv6": _is_ipv6,
    "cidr": _is_cidr,
    "mac": lambda s: _MAC.match(s) is not None,
    "uuid": lambda s: _UUID.match(s) is not None,
    "uuid3": lambda s: _UUID3.match(s) is not None,
    "uuid4": lambda s: _UUID4.match(s) is not None,
    "uuid5": lambda s: _UUID5.match(s) is not None,
    "isbn": lambda s: _is_isbn10(s) or _is_isbn13(s),
    "isbn10": _is_isbn10,
    "isbn13": _is_isbn13,
    "creditcard": _is_creditcard,
    "ssn": lambda s: _SSN.match(s) is not None,
    "hexcolor": lambda s: _HEXCOLOR.match(s) is not None,
    "rgbcolor": lambda s: _RGBCOLOR.match(s) is not None,
    "byte": _is_base64,
    "password": lambda s: True,
    "date": _is_date,
    "duration": _is_duration,
    "datetime": _is_datetime,
    "k8sshortname": lambda s: len(s) <= 63 and _SHORT_NAME.match(s) is not None,
    "k8slongname": lambda s: len(s) <= 253 and _LONG_NAME.match(s) is not None,
}


def _kept_format(type_: str, fmt: str) -> str:
    """kube's StripUnsupportedFormats: the format the validator sees ("" when dropped)."""
    if not fmt:
        return ""
    if type_ in ("", "string"):
        return fmt if fmt.replace("-", "") in _STRING_FORMATS else ""
    if type_ == "integer":
        return fmt if fmt in ("int32", "int64") else ""
    if type_ == "number":
        return fmt if fmt in ("float", "double") else ""
    return ""


# ---------------------------------------------------------------------------------------------
# Compiled schemas

_MAX_INT64 = 2**63 - 1
_MIN_INT64 = -(2**63)
_MAX_FLOAT32 = 3.4028234663852886e38
_MAX_JSON_INT = float(2**53)


_KINDS: dict[type, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    dict: "object",
    list: "array",
}


def _json_kind(value: JSON) -> str:
    """kube-openapi's JSON type of a decoded value (big integers decode as float64 in Go)."""
    if isinstance(value, str):
        return "string"
    if value is True or value is False:
        return "boolean"
    if isinstance(value, int):
        return "integer" if _MIN_INT64 <= value <= _MAX_INT64 else "number"
    if isinstance(value, float):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "null" if value is None else "object"


def _is_json_integer(f: float) -> bool:
    """go-openapi's IsFloat64AJSONInteger: an integral float within +-2^53."""
    if not math.isfinite(f) or f < -_MAX_JSON_INT or f > _MAX_JSON_INT:
        return False
    if f == int(f):
        return True
    g = float(int(f))
    diff = abs(f - g)
    return diff / min(abs(f) + abs(g), 1.7976931348623157e308) < 1e-9


class _Node:
    """One compiled schema node."""

    __slots__ = (
        "additional",
        "additional_allows",
        "all_of",
        "any_of",
        "combined",
        "default",
        "embedded",
        "enum",
        "enum_keys",
        "exclusive_maximum",
        "exclusive_minimum",
        "format",
        "format_check",
        "has_default",
        "int_or_string",
        "items",
        "list_map_keys",
        "list_type",
        "max_items",
        "max_length",
        "max_properties",
        "maximum",
        "min_items",
        "min_length",
        "min_properties",
        "minimum",
        "multiple_of",
        "needs_embedded_check",
        "needs_list_check",
        "not_",
        "nullable",
        "numeric",
        "objecty",
        "one_of",
        "pattern",
        "pattern_src",
        "plain",
        "preserve",
        "properties",
        "required",
        "schema",
        "sliced",
        "stringy",
        "type",
        "types",
        "unique_items",
    )

    def __init__(self, s: Mapping[str, Any]) -> None:
        self.schema = s
        t = s.get("type") or ""
        self.int_or_string = bool(s.get("x-kubernetes-int-or-string"))
        self.type = t if isinstance(t, str) else ""
        self.types: tuple[str, ...] = (
            ("integer", "string") if self.int_or_string else ((self.type,) if self.type else ())
        )
        self.nullable = bool(s.get("nullable"))
        fmt = s.get("format") or ""
        self.format = _kept_format("" if self.int_or_string else self.type, str(fmt))
        self.format_check = _STRING_FORMATS.get(self.format.replace("-", ""))
        enum = s.get("enum")
        self.enum: list[JSON] | None = list(enum) if isinstance(enum, list) and enum else None
        self.enum_keys = frozenset(_enum_key(v) for v in self.enum) if self.enum else frozenset()
        self.maximum = _num(s.get("maximum"))
        self.exclusive_maximum = bool(s.get("exclusiveMaximum"))
        self.minimum = _num(s.get("minimum"))
        self.exclusive_minimum = bool(s.get("exclusiveMinimum"))
        self.multiple_of = _num(s.get("multipleOf"))
        self.max_length = _int(s.get("maxLength"))
        self.min_length = _int(s.get("minLength"))
        pattern = s.get("pattern")
        self.pattern_src = pattern if isinstance(pattern, str) else ""
        self.pattern: GoRegexp | None = None
        if isinstance(self.pattern_src, str) and self.pattern_src:
            compiled = GoRegexp(self.pattern_src)
            self.pattern = compiled if compiled.error is None else None
        self.max_items = _int(s.get("maxItems"))
        self.min_items = _int(s.get("minItems"))
        self.unique_items = bool(s.get("uniqueItems"))
        self.max_properties = _int(s.get("maxProperties"))
        self.min_properties = _int(s.get("minProperties"))
        self.required = tuple(r for r in _seq(s.get("required")) if isinstance(r, str))
        props = s.get("properties")
        self.properties: dict[str, _Node] = (
            {k: _Node(v) for k, v in props.items() if isinstance(v, dict)}
            if isinstance(props, dict)
            else {}
        )
        ap = s.get("additionalProperties")
        self.additional: _Node | None = _Node(ap) if isinstance(ap, dict) else None
        # None: not set; True: set (a schema or true); False: additionalProperties false.
        self.additional_allows: bool | None = (
            None if ap is None else (True if isinstance(ap, dict) else bool(ap))
        )
        items = s.get("items")
        self.items: _Node | None = _Node(items) if isinstance(items, dict) else None
        self.all_of = [_Node(x) for x in _seq(s.get("allOf")) if isinstance(x, dict)]
        self.any_of = [_Node(x) for x in _seq(s.get("anyOf")) if isinstance(x, dict)]
        self.one_of = [_Node(x) for x in _seq(s.get("oneOf")) if isinstance(x, dict)]
        nt = s.get("not")
        self.not_: _Node | None = _Node(nt) if isinstance(nt, dict) else None
        self.preserve = s.get("x-kubernetes-preserve-unknown-fields") is True
        self.embedded = bool(s.get("x-kubernetes-embedded-resource"))
        lt = s.get("x-kubernetes-list-type")
        self.list_type: str | None = lt if isinstance(lt, str) else None
        keys = s.get("x-kubernetes-list-map-keys")
        self.list_map_keys: tuple[str, ...] = (
            tuple(k for k in keys if isinstance(k, str)) if isinstance(keys, list) else ()
        )
        self.has_default = "default" in s and s["default"] is not None
        self.default = s.get("default")
        self.numeric = (
            self.maximum is not None or self.minimum is not None or self.multiple_of is not None
        )
        self.stringy = (
            self.max_length is not None or self.min_length is not None or bool(self.pattern_src)
        )
        self.sliced = (
            self.items is not None
            or self.max_items is not None
            or self.min_items is not None
            or self.unique_items
        )
        self.objecty = bool(
            self.properties
            or self.additional_allows is not None
            or self.required
            or self.max_properties is not None
            or self.min_properties is not None
        )
        self.combined = bool(self.all_of or self.any_of or self.one_of or self.not_)
        # Nothing to check past the type.
        self.plain = not (
            self.combined
            or self.stringy
            or self.format_check is not None
            or self.numeric
            or self.format in ("int32", "float")
            or self.sliced
            or self.enum is not None
            or self.objecty
        )
        children = [*self.properties.values(), self.additional, self.items]
        self.needs_list_check: bool = self.list_type in ("set", "map") or any(
            c is not None and c.needs_list_check for c in children
        )
        self.needs_embedded_check: bool = self.embedded or any(
            c is not None and c.needs_embedded_check for c in children
        )

    # -- the kube-openapi checks that the compiled node's bounds need ---------------------

    def _bound_problem(self, bound: float, prefix: str, rel: str) -> str | None:
        """kube-openapi's IsValueValidAgainstRange for a bound (or the value): its message."""
        if self.type == "integer" and len(self.types) == 1:
            fmt = self.format
            if fmt == "int32":
                ok = float(bound).is_integer() and -(2**31) <= bound <= 2**31 - 1
            else:
                ok = float(bound).is_integer() and _MIN_INT64 <= bound <= _MAX_INT64
        elif self.type == "number" and len(self.types) == 1 and self.format == "float":
            fmt = self.format
            ok = abs(bound) <= _MAX_FLOAT32 or not math.isfinite(bound)
        else:
            return None
        if ok:
            return None
        if fmt:
            return f"{prefix} value must be of type {self.type} with format {fmt} in {rel}"
        return f"{prefix} value must be of type {self.type} (default format) in {rel}"


def _seq(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _int(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return int(v) if math.isfinite(v) else None


def _enum_key(v: JSON) -> Any:
    if v is True or v is False:
        return ("b", v)
    if isinstance(v, (int, float)):
        return ("n", v)
    if isinstance(v, str):
        return ("s", v)
    if v is None:
        return ("z",)
    return ("j", go_json(v))


_NO_OLD: Any = object()


class CompiledSchema:
    """A schema compiled once: validate, prune and default custom objects against it."""

    __slots__ = ("root", "schema")

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self.root = _Node(schema)

    def validate(self, value: JSON, path: str = "", *, old: JSON = _NO_OLD) -> list[FieldError]:
        v = _Validator(path)
        v.node(self.root, value, "")
        errs = v.errs
        root = self.root
        if root.needs_embedded_check and isinstance(value, dict):
            errs.extend(_embedded_problems(root, value, path, is_root=True))
        # On update kube checks list sets and maps only when the old object passed them.
        if root.needs_list_check and (old is _NO_OLD or not _list_problems(root, old, path)):
            errs.extend(_list_problems(root, value, path))
        return _dedupe(errs)

    def prune(self, value: JSON) -> list[str]:
        return _prune_object(self.root, value)

    def default(self, value: JSON) -> None:
        _default(value, self.root)


def _dedupe(errs: list[FieldError]) -> list[FieldError]:
    if len(errs) < 2:
        return errs
    seen: set[tuple[str, str]] = set()
    out = []
    for e in errs:
        key = (e.field, e.message)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


_CACHE: dict[int, tuple[Mapping[str, Any], CompiledSchema]] = {}
_CACHE_LIMIT = 512


_BY_TEXT: dict[str, CompiledSchema] = {}


def compile_schema(schema: Mapping[str, Any]) -> CompiledSchema:
    """The compiled form of a schema, cached by the dict's identity (kept alive in the cache,
    so an id is never reused while cached), then by its JSON text, so that a caller handing in
    a fresh copy of the same schema does not pay for compiling it again."""
    hit = _CACHE.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    try:
        text = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):
        text = ""
    compiled = _BY_TEXT.get(text) if text else None
    if compiled is None:
        compiled = CompiledSchema(schema)
        if text:
            if len(_BY_TEXT) >= _CACHE_LIMIT:
                _BY_TEXT.pop(next(iter(_BY_TEXT)))
            _BY_TEXT[text] = compiled
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[id(schema)] = (schema, compiled)
    return compiled


# ---------------------------------------------------------------------------------------------
# Validation (kube-openapi's SchemaValidator, in its validator order)


def _passes_plain(n: _Node, v: JSON) -> bool:
    """The fast path: a node with nothing but a type, and a (non-null) value of that type."""
    if not n.plain:
        return False
    kind = _KINDS.get(type(v))
    if kind is None:
        return False
    if kind == "integer":
        if not _MIN_INT64 <= v <= _MAX_INT64:
            return False
        return not n.types or "integer" in n.types or "number" in n.types
    return not n.types or kind in n.types


class _Validator:
    __slots__ = ("base", "errs")

    def __init__(self, base: str) -> None:
        self.base = base
        self.errs: list[FieldError] = []

    def field(self, rel: str) -> str:
        """kube's errPath: the base path, then the kube-openapi name without its leading dot."""
        if rel and rel != ".":
            name = rel[1:] if rel.startswith(".") else rel
            return f"{self.base}.{name}" if self.base else name
        return self.base or "<nil>"

    def plain(self, message: str) -> None:
        """A kube-openapi error that is not a Validation error: kube reports it at the base."""
        self.errs.append(FieldError(self.base or "<nil>", f'Invalid value: "": {message}'))

    def node(self, n: _Node, value: JSON, rel: str) -> None:
        errs = self.errs
        if value is None:
            if n.types and not n.nullable:
                errs.append(
                    FieldError(
                        self.field(rel),
                        f'Invalid value: "null": {rel} in body must be of type '
                        f'{",".join(n.types)}: "null"',
                    )
                )
            if n.enum is not None and ("z",) not in n.enum_keys:
                self.enum_fail(n, value, rel)
            return
        kind = _KINDS.get(type(value)) or _json_kind(value)
        if kind == "integer" and not _MIN_INT64 <= value <= _MAX_INT64:
            kind = "number"
        types = n.types
        if not types or kind in types:
            if n.plain:
                return
        elif not (
            (kind == "number" and "integer" in types and _is_json_integer(value))
            or (kind == "integer" and "number" in types)
        ):
            shown = kind
            if n.format and kind not in ("string", "array"):
                value_format = {"integer": "int64", "number": "float64"}.get(kind, "")
                if value_format != n.format:
                    shown_type = n.format
                    errs.append(
                        FieldError(
                            self.field(rel),
                            f"Invalid value: {go_quote(value_format)}: {rel} in body must be "
                            f"of type {shown_type}: {go_quote(value_format)}",
                        )
                    )
                    shown = ""
            if shown:
                errs.append(
                    FieldError(
                        self.field(rel),
                        f"Invalid value: {go_quote(shown)}: {rel} in body must be of type "
                        f"{','.join(n.types)}: {go_quote(shown)}",
                    )
                )
        if n.combined:
            self.combinations(n, value, rel)
        if kind == "string":
            if n.stringy:
                self.string(n, value, rel)
            if n.format_check is not None and not n.format_check(value):
                errs.append(
                    FieldError(
                        self.field(rel),
                        f"Invalid value: {go_quote(value)}: {rel} in body must be of type "
                        f"{n.format}: {go_quote(value)}",
                    )
                )
        elif kind in ("integer", "number"):
            if (
                n.numeric
                or n.format in ("int32", "float")
                or (n.type == "integer" and kind == "number")
            ):
                self.number(n, value, rel)
        elif kind == "array" and n.sliced:
            self.array(n, value, rel)
        if (
            n.enum is not None
            and _enum_key(value) not in n.enum_keys
            and (not isinstance(value, (dict, list)) or not any(value == e for e in n.enum))
        ):
            self.enum_fail(n, value, rel)
        if kind == "object" and n.objecty:
            self.obj(n, value, rel)

    def enum_fail(self, n: _Node, value: JSON, rel: str) -> None:
        assert n.enum is not None
        supported = [e if isinstance(e, str) else go_json(e) for e in n.enum]
        self.errs.append(_unsupported(self.field(rel), value, supported))

    def string(self, n: _Node, value: str, rel: str) -> None:
        # kube-openapi stops at the first failing string check.
        if n.max_length is not None and len(value) > n.max_length:
            self.errs.append(_too_long(self.field(rel), n.max_length))
            return
        if n.min_length is not None and len(value) < n.min_length:
            self.errs.append(
                _invalid(
                    self.field(rel),
                    value,
                    f"{rel} in body should be at least {n.min_length} chars long",
                )
            )
            return
        if n.pattern_src:
            if n.pattern is None:
                self.errs.append(
                    _invalid(
                        self.field(rel),
                        value,
                        f"{rel} in body should match '{n.pattern_src}, but pattern is invalid'",
                    )
                )
            elif not n.pattern.search(value):
                self.errs.append(
                    _invalid(
                        self.field(rel), value, f"{rel} in body should match '{n.pattern_src}'"
                    )
                )

    def number(self, n: _Node, value: float, rel: str) -> None:
        errs = self.errs
        is_int = isinstance(value, int) and _MIN_INT64 <= value <= _MAX_INT64
        if n.type == "integer" and len(n.types) == 1:
            if is_int:
                ok = n.format != "int32" or -(2**31) <= value <= 2**31 - 1
            else:
                f = float(value)
                ok = math.isfinite(f) and f.is_integer() and _MIN_INT64 <= f <= _MAX_INT64
                if ok and n.format == "int32":
                    ok = -(2**31) <= f <= 2**31 - 1
            if not ok:
                fmt = n.format
                if fmt:
                    self.plain(f"Checked value must be of type integer with format {fmt} in {rel}")
                else:
                    self.plain(f"Checked value must be of type integer (default format) in {rel}")
        elif n.format == "float" and abs(float(value)) > _MAX_FLOAT32 and n.types == ("number",):
            self.plain(f"Checked value must be of type number with format float in {rel}")
        field = None
        if n.multiple_of is not None:
            factor = n.multiple_of
            problem = n._bound_problem(factor, "MultipleOf", rel)
            if problem:
                self.plain(problem)
            if is_int and problem is None and math.isfinite(factor):
                ifactor = int(factor)
                if ifactor <= 0:
                    field = field or self.field(rel)
                    errs.append(
                        _invalid(
                            field,
                            ifactor,
                            f"factor MultipleOf declared for {rel} must be positive: {ifactor}",
                        )
                    )
                elif value % ifactor != 0:
                    field = field or self.field(rel)
                    errs.append(
                        _invalid(field, value, f"{rel} in body should be a multiple of {ifactor}")
                    )
            else:
                f = float(value)
                if factor <= 0:
                    field = field or self.field(rel)
                    errs.append(
                        _invalid(
                            field,
                            factor,
                            f"factor MultipleOf declared for {rel} must be positive: "
                            f"{go_float(factor)}",
                        )
                    )
                else:
                    mult = (1 / factor * f) if factor < 1 else f / factor
                    if not _is_json_integer(mult):
                        field = field or self.field(rel)
                        errs.append(
                            _invalid(
                                field,
                                value,
                                f"{rel} in body should be a multiple of {go_float(factor)}",
                            )
                        )
        if n.minimum is not None:
            b = n.minimum
            problem = n._bound_problem(b, "Minimum boundary", rel)
            if problem:
                self.plain(problem)
            excl = n.exclusive_minimum
            if is_int and problem is None and math.isfinite(b):
                ib = int(b)
                if value < ib or (excl and value <= ib):
                    word = "greater than" if excl else "greater than or equal to"
                    errs.append(
                        _invalid(self.field(rel), value, f"{rel} in body should be {word} {ib}")
                    )
            else:
                f = float(value)
                if f < b or (excl and f <= b):
                    word = "greater than" if excl else "greater than or equal to"
                    errs.append(
                        _invalid(
                            self.field(rel), value, f"{rel} in body should be {word} {go_float(b)}"
                        )
                    )
        if n.maximum is not None:
            b = n.maximum
            problem = n._bound_problem(b, "Maximum boundary", rel)
            if problem:
                self.plain(problem)
            excl = n.exclusive_maximum
            if is_int and problem is None and math.isfinite(b):
                ib = int(b)
                if value > ib or (excl and value >= ib):
                    word = "less than" if excl else "less than or equal to"
                    errs.append(
                        _invalid(self.field(rel), value, f"{rel} in body should be {word} {ib}")
                    )
            else:
                f = float(value)
                if f > b or (excl and f >= b):
                    word = "less than" if excl else "less than or equal to"
                    errs.append(
                        _invalid(
                            self.field(rel), value, f"{rel} in body should be {word} {go_float(b)}"
                        )
                    )

    def array(self, n: _Node, value: list[JSON], rel: str) -> None:
        items = n.items
        if items is not None:
            for i, v in enumerate(value):
                if not _passes_plain(items, v):
                    self.node(items, v, f"{rel}[{i}]")
        size = len(value)
        if n.min_items is not None and size < n.min_items:
            self.errs.append(
                _invalid(
                    self.field(rel), size, f"{rel} in body should have at least {n.min_items} items"
                )
            )
        if n.max_items is not None and size > n.max_items:
            self.errs.append(_too_many(self.field(rel), size, n.max_items))
        if n.unique_items:
            seen: set[str] = set()
            for v in value:
                key = go_json(v)
                if key in seen:
                    self.errs.append(
                        _invalid(self.field(rel), "", f"{rel} in body shouldn't contain duplicates")
                    )
                    break
                seen.add(key)

    def obj(self, n: _Node, value: dict[str, JSON], rel: str) -> None:
        errs = self.errs
        size = len(value)
        if n.min_properties is not None and size < n.min_properties:
            errs.append(
                _invalid(
                    self.field(rel),
                    size,
                    f"{rel} in body should have at least {n.min_properties} properties",
                )
            )
        if n.max_properties is not None and size > n.max_properties:
            errs.append(_too_many(self.field(rel), size, n.max_properties))
        props = n.properties
        if n.additional_allows is False:
            for k in value:
                if k not in props:
                    errs.append(
                        _invalid(self.field(rel), k, f"{rel}.{k} in body is a forbidden property")
                    )
        elif n.additional is not None:
            add = n.additional
            for k, v in value.items():
                if k not in props and not _passes_plain(add, v):
                    self.node(add, v, f"{rel}.{k}")
        if props:
            for k, v in value.items():
                sub = props.get(k)
                if sub is not None and not _passes_plain(sub, v):
                    self.node(sub, v, f"{rel}.{k}" if rel else k)
        for k in n.required:
            if k not in value:
                errs.append(_required(self.field(f"{rel}.{k}")))

    def combinations(self, n: _Node, value: JSON, rel: str) -> None:
        errs = self.errs
        # A branch that is only a type the value has (int-or-string's anyOf) settles it at once.
        if n.any_of and not any(_passes_plain(b, value) for b in n.any_of):
            best: list[FieldError] | None = None
            ok = False
            for branch in n.any_of:
                sub = _Validator(self.base)
                sub.node(branch, value, rel)
                if not sub.errs:
                    ok = True
                    break
                if best is None or len(sub.errs) < len(best):
                    best = sub.errs
            if not ok:
                self.plain(f"{go_quote(rel)} must validate at least one schema (anyOf)")
                errs.extend(best or ())
        if n.one_of:
            valid = 0
            best = None
            for branch in n.one_of:
                sub = _Validator(self.base)
                sub.node(branch, value, rel)
                if not sub.errs:
                    valid += 1
                elif valid == 0 and (best is None or len(sub.errs) < len(best)):
                    best = sub.errs
            if valid != 1:
                more = "Found none valid" if valid == 0 else f"Found {valid} valid alternatives"
                self.plain(f"{go_quote(rel)} must validate one and only one schema (oneOf). {more}")
                if valid == 0:
                    errs.extend(best or ())
        if n.all_of:
            valid = 0
            for branch in n.all_of:
                before = len(errs)
                self.node(branch, value, rel)
                if len(errs) == before:
                    valid += 1
            if valid != len(n.all_of):
                more = ". None validated" if valid == 0 else ""
                self.plain(f"{go_quote(rel)} must validate all the schemas (allOf){more}")
        if n.not_ is not None:
            sub = _Validator(self.base)
            sub.node(n.not_, value, rel)
            if not sub.errs:
                self.plain(f"{go_quote(rel)} must not validate the schema (not)")


# ---------------------------------------------------------------------------------------------
# x-kubernetes-list-type set and map (kube's listtype.ValidateListSetsAndMaps)


def _scalar_key(v: JSON) -> Any:
    if isinstance(v, (dict, list)):
        return ("j", go_json(v))
    if v is True or v is False:
        return ("b", v)
    if isinstance(v, int):
        return ("i", v)
    if isinstance(v, float):
        return ("f", v)
    return ("s", v) if isinstance(v, str) else ("z",)


def _non_unique(values: list[Any]) -> list[int]:
    """Indexes of the second appearance of every repeated key."""
    seen: dict[Any, int] = {}
    out = []
    for i, k in enumerate(values):
        times = seen.get(k, 0)
        if times == 1:
            out.append(i)
        seen[k] = times + 1
    return out


def _join(base: str, key: str) -> str:
    return f"{base}.{key}" if base else key


def _list_problems(n: _Node, value: JSON, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if isinstance(value, dict):
        if n.additional is not None:
            for k, v in value.items():
                if n.additional.needs_list_check:
                    errs.extend(_list_problems(n.additional, v, f"{path}[{k}]"))
        for k, v in value.items():
            sub = n.properties.get(k)
            if sub is not None and sub.needs_list_check:
                errs.extend(_list_problems(sub, v, _join(path, k)))
    elif isinstance(value, list):
        if n.list_type == "set":
            keys = [_scalar_key(x) for x in value]
            for i in _non_unique(keys):
                errs.append(_duplicate(f"{path}[{i}]", value[i]))
        elif n.list_type == "map":
            errs.extend(_list_map_problems(n, value, path))
        if n.items is not None and n.items.needs_list_check:
            for i, x in enumerate(value):
                errs.extend(_list_problems(n.items, x, f"{path}[{i}]"))
    return errs


def _list_map_problems(n: _Node, value: list[JSON], path: str) -> list[FieldError]:
    for i, x in enumerate(value):
        if x is not None and not isinstance(x, dict):
            return [_invalid(f"{path}[{i}]", x, "must be an object for an array of list-type map")]
    if len(value) <= 1:
        return []
    keys: list[dict[str, JSON]] = []
    for x in value:
        key: dict[str, JSON] = {}
        if isinstance(x, dict):
            for k in n.list_map_keys:
                if k in x:
                    key[k] = x[k]
        keys.append(key)
    hashed = [tuple((k, _scalar_key(v)) for k, v in key.items()) for key in keys]
    return [_duplicate(f"{path}[{i}]", keys[i]) for i in _non_unique(hashed)]


# ---------------------------------------------------------------------------------------------
# ObjectMeta of embedded resources and the root (kube's objectmeta coercion and validation)

_META_STRINGS = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion")
_OWNER_REF = {
    "apiVersion": "string",
    "kind": "string",
    "name": "string",
    "uid": "string",
    "controller": "bool",
    "blockOwnerDeletion": "bool",
}
_MANAGED_FIELDS = {
    "manager": "string",
    "operation": "string",
    "apiVersion": "string",
    "time": "time",
    "fieldsType": "string",
    "fieldsV1": "any",
    "subresource": "string",
}
_OBJECT_META: dict[str, Any] = {
    **{k: "string" for k in _META_STRINGS},
    "generation": "int64",
    "creationTimestamp": "time",
    "deletionTimestamp": "time",
    "deletionGracePeriodSeconds": "int64",
    "labels": "map",
    "annotations": "map",
    "ownerReferences": _OWNER_REF,
    "finalizers": "strings",
    "managedFields": _MANAGED_FIELDS,
}
_GO_TYPES = {
    "string": "string",
    "int64": "int64",
    "bool": "bool",
    "time": "v1.Time",
    "map": "map[string]string",
    "strings": "[]string",
}


def _json_type_name(v: JSON) -> str:
    if isinstance(v, str):
        return "string"
    if v is True or v is False:
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, list):
        return "array"
    return "object"


def _meta_type_ok(kind: Any, v: JSON) -> bool:
    if v is None:
        return True
    if kind == "string":
        return isinstance(v, str)
    if kind == "int64":
        return isinstance(v, int) and not isinstance(v, bool) and _MIN_INT64 <= v <= _MAX_INT64
    if kind == "bool":
        return v is True or v is False
    if kind == "time":
        return isinstance(v, str) and (v == "" or _parse_rfc3339(v))
    if kind == "map":
        return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
    if kind == "strings":
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if kind == "any":
        return True
    if isinstance(kind, dict):
        return isinstance(v, list) and all(
            x is None
            or (
                isinstance(x, dict)
                and all(_meta_type_ok(kind.get(k, "any"), y) for k, y in x.items())
            )
            for x in v
        )
    return True


def _parse_rfc3339(s: str) -> bool:
    try:
        datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return "T" in s or "t" in s


def _meta_type_error(meta: dict[str, JSON]) -> str | None:
    """encoding/json's error for the first ObjectMeta field of the wrong type."""
    for k, v in meta.items():
        kind = _OBJECT_META.get(k)
        if kind is None or _meta_type_ok(kind, v):
            continue
        if isinstance(kind, str):
            go = _GO_TYPES.get(kind, kind)
            # encoding/json names the innermost value that does not fit.
            if kind == "map" and isinstance(v, dict):
                v, go = next(x for x in v.values() if not isinstance(x, str)), "string"
            elif kind == "strings" and isinstance(v, list):
                v, go = next(x for x in v if not isinstance(x, str)), "string"
        else:
            go = "[]v1.OwnerReference" if kind is _OWNER_REF else "[]v1.ManagedFieldsEntry"
        return (
            f"json: cannot unmarshal {_json_type_name(v)} into Go struct field "
            f"ObjectMeta.{k} of type {go}"
        )
    return None


def _prune_meta(meta: dict[str, JSON], prefix: str) -> list[str]:
    """Drops what ObjectMeta does not know (and what it would not write back: nulls, empty
    strings, maps and lists); returns the dropped unknown fields' paths."""
    unknown: list[str] = []
    for k in list(meta):
        kind = _OBJECT_META.get(k)
        v = meta[k]
        if kind is None:
            unknown.append(f"{prefix}.{k}")
            del meta[k]
            continue
        # generation is a plain int64 (omitempty); deletionGracePeriodSeconds a pointer.
        if v is None or v == "" or v == {} or v == [] or (k == "generation" and v == 0):
            del meta[k]
            continue
        if isinstance(kind, dict) and isinstance(v, list):
            for i, item in enumerate(v):
                if isinstance(item, dict):
                    for ik in list(item):
                        if ik not in kind:
                            unknown.append(f"{prefix}.{k}[{i}].{ik}")
                            del item[ik]
    return unknown


def _validate_meta(meta: JSON, path: str) -> list[FieldError]:
    """objectmeta.Validate of an embedded resource's metadata."""
    mpath = f"{path}.metadata" if path else "metadata"
    if not isinstance(meta, dict):
        return [
            _invalid(
                mpath,
                meta,
                f"json: cannot unmarshal {_json_type_name(meta)} into Go value of type "
                "v1.ObjectMeta",
            )
        ]
    problem = _meta_type_error(meta)
    if problem:
        return [_invalid(mpath, meta, problem)]
    errs: list[FieldError] = []
    for key in ("name", "generateName"):
        value = meta.get(key)
        if isinstance(value, str) and value:
            for p in _path_segment_problems(value, prefix=key == "generateName"):
                errs.append(_invalid(f"{mpath}.{key}", value, p))
    ns = meta.get("namespace")
    if isinstance(ns, str) and ns and (len(ns) > 63 or not _SHORT_NAME.match(ns)):
        errs.append(
            _invalid(
                f"{mpath}.namespace",
                ns,
                "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                "characters or '-', and must start and end with an alphanumeric character "
                "(e.g. 'my-name',  or '123-abc', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            )
        )
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for k in sorted(labels):
            for p in validate_label_key(k):
                errs.append(_invalid(f"{mpath}.labels", k, p))
            for p in validate_label_value(labels[k]):
                errs.append(_invalid(f"{mpath}.labels", labels[k], p))
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        for k in sorted(annotations):
            for p in validate_label_key(k.lower()):
                errs.append(_invalid(f"{mpath}.annotations", k, p))
    gen = meta.get("generation")
    if isinstance(gen, int) and gen < 0:
        errs.append(_invalid(f"{mpath}.generation", gen, "must be greater than or equal to 0"))
    return errs


def _path_segment_problems(name: str, *, prefix: bool) -> list[str]:
    out = []
    if not prefix and name in (".", ".."):
        out.append(f"may not be '{name}'")
    for bad in ("/", "%"):
        if bad in name:
            out.append(f"may not contain '{bad}'")
    return out


_GROUP_VERSION_ERR = "unexpected GroupVersion string: "


def _embedded_problems(
    n: _Node, value: JSON, path: str, *, is_root: bool = False
) -> list[FieldError]:
    """objectmeta.Validate: apiVersion, kind and metadata of every embedded resource."""
    errs: list[FieldError] = []
    if isinstance(value, dict):
        if n.embedded and not is_root:
            errs.extend(_embedded_resource_problems(value, path))
        for k, v in value.items():
            sub = n.properties.get(k)
            if sub is not None:
                if sub.needs_embedded_check:
                    errs.extend(_embedded_problems(sub, v, _join(path, k)))
            elif n.additional is not None and n.additional.needs_embedded_check:
                errs.extend(_embedded_problems(n.additional, v, f"{path}[{k}]"))
    elif isinstance(value, list) and n.items is not None and n.items.needs_embedded_check:
        for i, v in enumerate(value):
            errs.extend(_embedded_problems(n.items, v, f"{path}[{i}]"))
    return errs


def _embedded_resource_problems(x: dict[str, JSON], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if "apiVersion" not in x:
        errs.append(_required(_join(path, "apiVersion")))
    if "kind" not in x:
        errs.append(_required(_join(path, "kind")))
    for k, v in x.items():
        if k == "apiVersion":
            p = _join(path, k)
            if not isinstance(v, str):
                errs.append(_invalid(p, v, "must be a string"))
            elif not v:
                errs.append(_invalid(p, v, "must not be empty"))
            elif v.count("/") > 1:
                errs.append(_invalid(p, v, _GROUP_VERSION_ERR + v))
        elif k == "kind":
            p = _join(path, k)
            if not isinstance(v, str):
                errs.append(_invalid(p, v, "must be a string"))
            elif not v:
                errs.append(_invalid(p, v, "must not be empty"))
            else:
                low = v.lower()
                if len(low) > 63 or not re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z", low):
                    errs.append(
                        _invalid(
                            p,
                            v,
                            "may have mixed case, but should otherwise match: a DNS-1035 label "
                            "must consist of lower case alphanumeric characters or '-', start "
                            "with an alphabetic character, and end with an alphanumeric character "
                            "(e.g. 'my-name',  or 'abc-123', regex used for validation is "
                            "'[a-z]([-a-z0-9]*[a-z0-9])?')",
                        )
                    )
        elif k == "metadata":
            errs.extend(_validate_meta(v, path))
    return errs


# ---------------------------------------------------------------------------------------------
# Pruning (kube's pruning.Prune, PruneNonNullableNullsWithoutDefaults and objectmeta.Coerce)

_META_FIELDS = frozenset(("apiVersion", "kind", "metadata"))


def _prune_object(root: _Node, value: JSON) -> list[str]:
    if type(value) is not dict:
        return []
    meta = value.get("metadata")
    meta_unknown = _prune_meta(meta, "metadata") if type(meta) is dict else []
    pruned = _prune(value, root, embedded=True, nulls=True)
    pruned.sort()
    coerced: list[str] = []
    if root.needs_embedded_check:
        _coerce(value, root, "", coerced, is_root=True)
        coerced.sort()
    return meta_unknown + pruned + coerced


def _under_key(key: str, paths: list[str]) -> list[str]:
    return [f"{key}{p}" if p[0] == "[" else f"{key}.{p}" for p in paths]


def _under_index(i: int, paths: list[str]) -> list[str]:
    return [f"[{i}]{p}" if p[0] == "[" else f"[{i}].{p}" for p in paths]


def _drops_null(sub: _Node | None) -> bool:
    """PruneNonNullableNullsWithoutDefaults: a null with a schema that neither allows nor
    defaults it goes."""
    return sub is not None and not sub.nullable and not sub.has_default


def _prune(
    x: JSON, s: _Node | None, *, embedded: bool = False, nulls: bool = False, skip: bool = False
) -> list[str]:
    """kube's pruning.Prune of one value (and, with `nulls`, the non-nullable nulls): the
    dropped unknown fields' paths, relative to x. `skip`: the items of a list under
    x-kubernetes-preserve-unknown-fields keep their unknown fields too (kube's skipPrune)."""
    out: list[str] = []
    if type(x) is dict:
        if s is None:
            if not skip:
                out.extend(x)
                x.clear()
            return out
        preserve = s.preserve or skip
        embedded = embedded or s.embedded
        props = s.properties
        add = s.additional
        has_add = s.additional_allows is not None
        for k in list(x):
            v = x[k]
            prop = props.get(k)
            if embedded and k in _META_FIELDS:
                if nulls and v is None and _drops_null(prop or add):
                    del x[k]
                continue
            if prop is None and has_add:
                prop = add
            elif prop is None:
                if not preserve:
                    out.append(k)
                    del x[k]
                continue
            if v is None:
                if nulls and _drops_null(prop):
                    del x[k]
            elif type(v) is dict or type(v) is list:
                sub = _prune(v, prop, nulls=nulls)
                if sub:
                    out.extend(_under_key(k, sub))
    elif type(x) is list:
        items = s.items if s is not None else None
        skip = skip or (s is not None and s.preserve)
        if skip and items is None:
            return out
        for i, v in enumerate(x):
            if type(v) is dict or type(v) is list:
                sub = _prune(v, items, nulls=nulls, skip=skip)
                if sub:
                    out.extend(_under_index(i, sub))
    return out


def _coerce(x: JSON, s: _Node | None, path: str, out: list[str], *, is_root: bool = False) -> None:
    """objectmeta.Coerce below the root: embedded resources keep only ObjectMeta's fields."""
    if s is None or not s.needs_embedded_check:
        return
    if isinstance(x, dict):
        if s.embedded and not is_root:
            meta = x.get("metadata")
            if isinstance(meta, dict) and _meta_type_error(meta) is None:
                out.extend(_prune_meta(meta, _join(path, "metadata")))
        for k, v in x.items():
            sub = s.properties.get(k)
            if sub is not None:
                _coerce(v, sub, _join(path, k), out)
            elif s.additional is not None:
                _coerce(v, s.additional, f"{path}[{k}]", out)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            _coerce(v, s.items, f"{path}[{i}]", out)


# ---------------------------------------------------------------------------------------------
# Defaulting (kube's structural defaulting)


def _deepcopy(v: JSON) -> JSON:
    if isinstance(v, dict):
        return {k: _deepcopy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_deepcopy(x) for x in v]
    return v


def _default(x: JSON, s: _Node | None) -> None:
    if s is None:
        return
    if isinstance(x, dict):
        props = s.properties
        for k, prop in props.items():
            if prop.has_default and (k not in x or (x[k] is None and not prop.nullable)):
                x[k] = _deepcopy(prop.default)
        add = s.additional
        for k, v in x.items():
            sub = props.get(k)
            if sub is not None:
                if isinstance(v, (dict, list)):
                    _default(v, sub)
            elif add is not None:
                if v is None and not add.nullable and add.has_default:
                    v = x[k] = _deepcopy(add.default)
                if isinstance(v, (dict, list)):
                    _default(v, add)
    elif isinstance(x, list):
        items = s.items
        if items is None:
            return
        for i, v in enumerate(x):
            if v is None and not items.nullable and items.has_default:
                v = x[i] = _deepcopy(items.default)
            if isinstance(v, (dict, list)):
                _default(v, items)


# ---------------------------------------------------------------------------------------------
# The CRD's schema (kube's ValidateCustomResourceDefinitionOpenAPISchema, ValidateStructural
# and ValidateDefaults)

_OPENAPI_TYPES = ("array", "boolean", "integer", "number", "object", "string")
_STRING_KEYS = (
    "type",
    "format",
    "title",
    "description",
    "pattern",
    "id",
    "$schema",
    "$ref",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
)
_BOOL_KEYS = (
    "exclusiveMaximum",
    "exclusiveMinimum",
    "uniqueItems",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
)
_NUMBER_KEYS = ("maximum", "minimum", "multipleOf")
_INT_KEYS = ("maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties")
_VALIDATION_REASONS = (
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
)
_ROOT, _ITEM, _FIELD = 0, 1, 2


def _shape_problems(s: Any, p: str) -> list[FieldError]:
    """JSON types of the schema's own fields (kube fails these while decoding the CRD)."""
    if not isinstance(s, dict):
        return [_invalid(p, s, "must be an object")]
    errs: list[FieldError] = []
    for k in _STRING_KEYS:
        if k in s and s[k] is not None and not isinstance(s[k], str):
            errs.append(_invalid(f"{p}.{k}", s[k], "must be a string"))
    for k in _BOOL_KEYS:
        if k in s and s[k] is not None and not isinstance(s[k], bool):
            errs.append(_invalid(f"{p}.{k}", s[k], "must be a boolean"))
    for k in _NUMBER_KEYS:
        v = s.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            errs.append(_invalid(f"{p}.{k}", v, "must be a number"))
    for k in _INT_KEYS:
        v = s.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            errs.append(_invalid(f"{p}.{k}", v, "must be an integer"))
    for k in ("required", "x-kubernetes-list-map-keys"):
        v = s.get(k)
        if v is not None and (not isinstance(v, list) or not all(isinstance(x, str) for x in v)):
            errs.append(_invalid(f"{p}.{k}", v, "must be a list of strings"))
    if s.get("enum") is not None and not isinstance(s["enum"], list):
        errs.append(_invalid(f"{p}.enum", s["enum"], "must be a list"))
    for k in ("allOf", "anyOf", "oneOf"):
        v = s.get(k)
        if v is None:
            continue
        if not isinstance(v, list):
            errs.append(_invalid(f"{p}.{k}", v, "must be a list of schemas"))
            continue
        for i, x in enumerate(v):
            errs.extend(_shape_problems(x, f"{p}.{k}[{i}]"))
    for k in ("properties", "patternProperties", "definitions"):
        v = s.get(k)
        if v is None:
            continue
        if not isinstance(v, dict):
            errs.append(_invalid(f"{p}.{k}", v, "must be an object of schemas"))
            continue
        for name, x in v.items():
            errs.extend(_shape_problems(x, f"{p}.{k}[{name}]"))
    if s.get("not") is not None:
        errs.extend(_shape_problems(s["not"], f"{p}.not"))
    items = s.get("items")
    if isinstance(items, list):
        for i, x in enumerate(items):
            errs.extend(_shape_problems(x, f"{p}.items[{i}]"))
    elif items is not None:
        errs.extend(_shape_problems(items, f"{p}.items"))
    for k in ("additionalProperties", "additionalItems"):
        v = s.get(k)
        if v is not None and not isinstance(v, bool):
            errs.extend(_shape_problems(v, f"{p}.{k}"))
    deps = s.get("dependencies")
    if deps is not None and not isinstance(deps, dict):
        errs.append(_invalid(f"{p}.dependencies", deps, "must be an object"))
    ext = s.get("externalDocs")
    if ext is not None and not isinstance(ext, dict):
        errs.append(_invalid(f"{p}.externalDocs", ext, "must be an object"))
    rules = s.get("x-kubernetes-validations")
    if rules is not None:
        if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
            errs.append(_invalid(f"{p}.x-kubernetes-validations", rules, "must be a list of rules"))
        else:
            for i, r in enumerate(rules):
                for k in ("rule", "message", "messageExpression", "reason", "fieldPath"):
                    if r.get(k) is not None and not isinstance(r[k], str):
                        errs.append(
                            _invalid(
                                f"{p}.x-kubernetes-validations[{i}].{k}", r[k], "must be a string"
                            )
                        )
    return errs


def _meaningful(v: Any) -> bool:
    return v is not None and v is not False and v != "" and v != [] and v != {}


def _props(s: Mapping[str, Any]) -> dict[str, Any]:
    props = s.get("properties")
    return props if isinstance(props, dict) else {}


def _is_int_or_string_any_of(any_of: Any) -> bool:
    if not isinstance(any_of, list) or len(any_of) != 2:
        return False
    want = ({"type": "integer"}, {"type": "string"})
    return all(
        isinstance(b, dict) and {k: v for k, v in b.items() if _meaningful(v)} == w
        for b, w in zip(any_of, want, strict=True)
    )


def _structural_problems(s: Mapping[str, Any], p: str) -> list[FieldError]:
    errs: list[FieldError] = []
    _structural(s, _ROOT, p, errs)
    _value_completeness(s, s, p, p, errs)
    errs.sort(key=str)
    return errs


def _structural(s: Mapping[str, Any], lvl: int, p: str, errs: list[FieldError]) -> None:
    t = s.get("type") or ""
    items = s.get("items")
    if t == "array" and items is None:
        errs.append(_required(f"{p}.items", "must be specified"))
    if isinstance(items, dict):
        _structural(items, _ITEM, f"{p}.items", errs)
    props = _props(s)
    for k, v in props.items():
        _structural(v, _FIELD, f"{p}.properties[{k}]", errs)
    ap = s.get("additionalProperties")
    if ap is not None:
        if lvl == _ROOT:
            errs.append(_forbidden(f"{p}.additionalProperties", "must not be used at the root"))
        if isinstance(ap, dict):
            _structural(ap, _FIELD, f"{p}.additionalProperties", errs)
    ios = bool(s.get("x-kubernetes-int-or-string"))
    preserve = bool(s.get("x-kubernetes-preserve-unknown-fields"))
    embedded = bool(s.get("x-kubernetes-embedded-resource"))
    if ios and preserve:
        errs.append(
            _invalid(
                f"{p}.x-kubernetes-preserve-unknown-fields",
                True,
                "must be false if x-kubernetes-int-or-string is true",
            )
        )
    if ios and embedded:
        errs.append(
            _invalid(
                f"{p}.x-kubernetes-embedded-resource",
                True,
                "must be false if x-kubernetes-int-or-string is true",
            )
        )
    skip_any_of = _is_int_or_string_any_of(s.get("anyOf"))
    all_of = s.get("allOf")
    skip_first = (
        isinstance(all_of, list)
        and bool(all_of)
        and isinstance(all_of[0], dict)
        and _is_int_or_string_any_of(all_of[0].get("anyOf"))
    )
    _value_validation(s, skip_any_of, skip_first, lvl, p, errs)
    check_meta = lvl == _ROOT or embedded
    if embedded and t != "object":
        detail = "must be object if x-kubernetes-embedded-resource is true"
        if not t:
            errs.append(_required(f"{p}.type", detail))
        else:
            errs.append(_invalid(f"{p}.type", t, detail))
    elif not t and not ios and not preserve:
        where = {
            _ROOT: "at the root",
            _ITEM: "for specified array items",
            _FIELD: "for specified object fields",
        }[lvl]
        errs.append(_required(f"{p}.type", f"must not be empty {where}"))
    if embedded and ap is not None:
        errs.append(
            _forbidden(
                f"{p}.additionalProperties",
                "must not be used if x-kubernetes-embedded-resource is set",
            )
        )
    if lvl == _ROOT and t and t != "object":
        errs.append(_invalid(f"{p}.type", t, "must be object at the root"))
    if check_meta:
        for k in ("kind", "apiVersion"):
            sub = props.get(k)
            if isinstance(sub, dict) and (sub.get("type") or "") != "string":
                errs.append(
                    _invalid(f"{p}.properties[{k}].type", sub.get("type") or "", "must be string")
                )
    meta = props.get("metadata")
    if isinstance(meta, dict):
        mp = f"{p}.properties[metadata]"
        if check_meta and (meta.get("type") or "") != "object":
            errs.append(_invalid(f"{mp}.type", meta.get("type") or "", "must be object"))
        if lvl == _ROOT:
            rest = {
                k: v for k, v in meta.items() if k not in ("type", "default") and _meaningful(v)
            }
            mprops = rest.get("properties")
            if isinstance(mprops, dict) and set(mprops) in (
                {"name"},
                {"generateName"},
                {"name", "generateName"},
            ):
                del rest["properties"]
            if rest:
                errs.append(
                    _forbidden(
                        mp,
                        "must not specify anything other than name and generateName, but "
                        "metadata is implicitly specified",
                    )
                )
    if embedded and not preserve and not props:
        errs.append(
            _required(
                f"{p}.properties",
                "must not be empty if x-kubernetes-embedded-resource is true without "
                "x-kubernetes-preserve-unknown-fields",
            )
        )


def _value_validation(
    v: Mapping[str, Any],
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    lvl: int,
    p: str,
    errs: list[FieldError],
) -> None:
    if not skip_any_of:
        for i, b in enumerate(v.get("anyOf") or ()):
            if isinstance(b, dict):
                _nested(b, False, lvl, f"{p}.anyOf[{i}]", errs)
    for i, b in enumerate(v.get("allOf") or ()):
        if isinstance(b, dict):
            _nested(b, skip_first_all_of_any_of and i == 0, lvl, f"{p}.allOf[{i}]", errs)
    for i, b in enumerate(v.get("oneOf") or ()):
        if isinstance(b, dict):
            _nested(b, False, lvl, f"{p}.oneOf[{i}]", errs)
    nt = v.get("not")
    if isinstance(nt, dict):
        _nested(nt, False, lvl, f"{p}.not", errs)
    pattern = v.get("pattern")
    if isinstance(pattern, str) and pattern:
        error = GoRegexp(pattern).error
        if error is not None:
            errs.append(
                _invalid(
                    f"{p}.pattern",
                    pattern,
                    f"must be a valid regular expression, but isn't: {error}",
                )
            )


_NESTED_FORBIDDEN = (
    ("type", "must be empty to be structural"),
    ("additionalProperties", "must be undefined to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    ("externalDocs", "must be undefined to be structural"),
    ("x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
    ("x-kubernetes-embedded-resource", "must be false to be structural"),
    ("x-kubernetes-int-or-string", "must be false to be structural"),
    ("x-kubernetes-list-map-keys", "must be empty to be structural"),
    ("x-kubernetes-list-type", "must be undefined to be structural"),
    ("x-kubernetes-map-type", "must be undefined to be structural"),
    ("x-kubernetes-validations", "must be empty to be structural"),
)
_POINTER_KEYS = frozenset(
    (
        "additionalProperties",
        "default",
        "externalDocs",
        "x-kubernetes-list-type",
        "x-kubernetes-map-type",
    )
)


def _nested(
    v: Mapping[str, Any], skip_any_of: bool, lvl: int, p: str, errs: list[FieldError]
) -> None:
    _value_validation(v, skip_any_of, False, lvl, p, errs)
    items = v.get("items")
    if isinstance(items, dict):
        _nested(items, False, lvl, f"{p}.items", errs)
    props = _props(v)
    for k, sub in props.items():
        if isinstance(sub, dict):
            _nested(sub, False, _FIELD, f"{p}.properties[{k}]", errs)
    for key, detail in _NESTED_FORBIDDEN:
        val = v.get(key)
        if (val is not None) if key in _POINTER_KEYS else _meaningful(val):
            errs.append(_forbidden(f"{p}.{key}", detail))
    if "metadata" in props:
        errs.append(
            _forbidden(f"{p}.properties[metadata]", "must not be specified in a nested context")
        )


def _value_completeness(
    v: Mapping[str, Any], s: Mapping[str, Any] | None, sp: str, vp: str, errs: list[FieldError]
) -> None:
    if s is None:
        errs.append(_required(sp, f"because it is defined in {vp}"))
        return
    nt = v.get("not")
    if isinstance(nt, dict):
        _nested_completeness(nt, s, sp, f"{vp}.not", errs)
    for key in ("allOf", "anyOf", "oneOf"):
        for i, b in enumerate(v.get(key) or ()):
            if isinstance(b, dict):
                _nested_completeness(b, s, sp, f"{vp}.{key}[{i}]", errs)


def _nested_completeness(
    v: Mapping[str, Any], s: Mapping[str, Any] | None, sp: str, vp: str, errs: list[FieldError]
) -> None:
    if s is None:
        errs.append(_required(sp, f"because it is defined in {vp}"))
        return
    _value_completeness(v, s, sp, vp, errs)
    items = v.get("items")
    if isinstance(items, dict):
        s_items = s.get("items")
        _nested_completeness(
            items,
            s_items if isinstance(s_items, dict) else None,
            f"{sp}.items",
            f"{vp}.items",
            errs,
        )
    sprops = _props(s)
    for k, sub in _props(v).items():
        if not isinstance(sub, dict):
            continue
        if k not in sprops or not isinstance(sprops[k], dict):
            errs.append(
                _required(f"{sp}.properties[{k}]", f"because it is defined in {vp}.properties[{k}]")
            )
        else:
            _nested_completeness(
                sub, sprops[k], f"{sp}.properties[{k}]", f"{vp}.properties[{k}]", errs
            )


def _default_problems(s: Mapping[str, Any], p: str) -> list[FieldError]:
    """ValidateDefaults: every default (outside additionalProperties) is pruned and valid."""
    errs: list[FieldError] = []
    _defaults(_Node(s), p, None, errs, is_root=True)
    return errs


def _surrounding(steps: tuple[str | None, ...], value: JSON) -> dict[str, JSON]:
    """kube's SurroundingObjectFunc: a default inside an embedded resource's TypeMeta or
    ObjectMeta, placed into an otherwise empty object of that resource (None: a list item)."""
    inner: JSON = value
    for step in reversed(steps):
        inner = [inner] if step is None else {step: inner}
    out: dict[str, JSON] = {"apiVersion": "validation/v1", "kind": "Validation"}
    assert isinstance(inner, dict)
    out.update(inner)
    return out


def _aggregate(errs: list[FieldError]) -> str:
    """utilerrors.NewAggregate(...).Error()."""
    texts = list(dict.fromkeys(str(e) for e in errs))
    return texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"


def _defaults(
    n: _Node,
    p: str,
    meta_steps: tuple[str | None, ...] | None,
    errs: list[FieldError],
    *,
    is_root: bool = False,
) -> None:
    """meta_steps: where we are below an embedded resource's apiVersion/kind/metadata, or None."""
    embedded = n.embedded or is_root
    if n.embedded:
        meta_steps = None
    if n.has_default:
        d = n.default
        dp = f"{p}.default"
        before = len(errs)
        if meta_steps is not None:
            obj = _surrounding(meta_steps, _deepcopy(d))
            problems = _embedded_resource_problems(obj, "")
            if problems:
                errs.append(
                    _invalid(dp, d, f"must result in valid metadata: {_aggregate(problems)}")
                )
        else:
            pruned = _deepcopy(d)
            _prune(pruned, n, embedded=n.embedded)
            if pruned != d:
                errs.append(_invalid(dp, d, "must not have unknown fields"))
            if n.embedded and isinstance(d, dict):
                errs.extend(_embedded_resource_problems(d, dp))
        if len(errs) == before:
            v = _Validator(dp)
            v.node(n, d, "")
            errs.extend(_dedupe(v.errs))
    steps: tuple[str | None, ...] | None
    if n.items is not None:
        steps = None if meta_steps is None else (*meta_steps, None)
        _defaults(n.items, f"{p}.items", steps, errs)
    for k, sub in n.properties.items():
        if meta_steps is not None:
            steps = (*meta_steps, k)
        elif embedded and k in _META_FIELDS:
            steps = (k,)
        else:
            steps = None
        _defaults(sub, f"{p}.properties[{k}]", steps, errs)


class _SchemaRules:
    """specStandardValidatorV3's state while walking down the schema."""

    __slots__ = ("allow_defaults", "inside_meta", "reason")

    def __init__(
        self, allow_defaults: bool = True, reason: str = "", inside_meta: bool = False
    ) -> None:
        self.allow_defaults = allow_defaults
        self.reason = reason
        self.inside_meta = inside_meta

    def forbid_defaults(self, reason: str) -> _SchemaRules:
        return _SchemaRules(False, reason, self.inside_meta)

    def in_meta(self) -> _SchemaRules:
        return _SchemaRules(self.allow_defaults, self.reason, True)


def _openapi(
    s: Mapping[str, Any], p: str, rules: _SchemaRules, is_root: bool, errs: list[FieldError]
) -> None:
    t = s.get("type") or ""
    if t and t not in _OPENAPI_TYPES:
        errs.append(_unsupported(f"{p}.type", t, _OPENAPI_TYPES))
    if s.get("default") is not None and not rules.allow_defaults:
        detail = "must not be set" + (f" {rules.reason}" if rules.reason else "")
        errs.append(_forbidden(f"{p}.default", detail))
    if s.get("id"):
        errs.append(_forbidden(f"{p}.id", "id is not supported"))
    if s.get("additionalItems") is not None:
        errs.append(_forbidden(f"{p}.additionalItems", "additionalItems is not supported"))
    if s.get("patternProperties"):
        errs.append(_forbidden(f"{p}.patternProperties", "patternProperties is not supported"))
    if s.get("definitions"):
        errs.append(_forbidden(f"{p}.definitions", "definitions is not supported"))
    if s.get("dependencies") is not None:
        errs.append(_forbidden(f"{p}.dependencies", "dependencies is not supported"))
    if s.get("$ref") is not None:
        errs.append(_forbidden(f"{p}.$ref", "$ref is not supported"))
    if t == "null":
        errs.append(
            _forbidden(f"{p}.type", "type cannot be set to null, use nullable as an alternative")
        )
    items = s.get("items")
    if isinstance(items, list) and items:
        errs.append(_forbidden(f"{p}.items", "items must be a schema object and not an array"))
    embedded = bool(s.get("x-kubernetes-embedded-resource"))
    if rules.inside_meta and embedded:
        errs.append(
            _forbidden(
                f"{p}.x-kubernetes-embedded-resource", "must not be used inside of resource meta"
            )
        )
    if s.get("uniqueItems") is True:
        errs.append(
            _forbidden(
                f"{p}.uniqueItems",
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            )
        )
    props = _props(s)
    ap = s.get("additionalProperties")
    if ap is not None:
        if props and (ap is False or isinstance(ap, dict)):
            errs.append(
                _forbidden(
                    f"{p}.additionalProperties",
                    "additionalProperties and properties are mutual exclusive",
                )
            )
        if isinstance(ap, dict):
            sub = rules
            if rules.inside_meta:
                sub = rules.forbid_defaults(
                    "inside additionalProperties applying to object metadata"
                )
            _openapi(ap, f"{p}.additionalProperties", sub, False, errs)
    for k, sub_schema in props.items():
        sub = rules
        if (is_root or embedded) and k in _META_FIELDS:
            sub = sub.in_meta()
            if is_root:
                sub = sub.forbid_defaults(f"in top-level {k}")
        _openapi(sub_schema, f"{p}.properties[{k}]", sub, False, errs)
    nt = s.get("not")
    if isinstance(nt, dict):
        _openapi(nt, f"{p}.not", rules, False, errs)
    for key in ("allOf", "oneOf", "anyOf"):
        for i, b in enumerate(s.get(key) or ()):
            _openapi(b, f"{p}.{key}[{i}]", rules, False, errs)
    for k, b in (s.get("definitions") or {}).items():
        _openapi(b, f"{p}.definitions[{k}]", rules, False, errs)
    if isinstance(items, dict):
        _openapi(items, f"{p}.items", rules, False, errs)
    elif isinstance(items, list):
        for i, b in enumerate(items):
            _openapi(b, f"{p}.items[{i}]", rules, False, errs)
    for k, b in (s.get("dependencies") or {}).items():
        if isinstance(b, dict):
            _openapi(b, f"{p}.dependencies[{k}]", rules, False, errs)
    if s.get("x-kubernetes-preserve-unknown-fields") is False:
        errs.append(
            _invalid(
                f"{p}.x-kubernetes-preserve-unknown-fields", False, "must be true or undefined"
            )
        )
    map_type = s.get("x-kubernetes-map-type")
    if map_type is not None and t != "object":
        detail = "must be object if x-kubernetes-map-type is specified"
        errs.append(_required(f"{p}.type", detail) if not t else _invalid(f"{p}.type", t, detail))
    if map_type is not None and map_type not in ("atomic", "granular"):
        errs.append(_unsupported(f"{p}.x-kubernetes-map-type", map_type, ("atomic", "granular")))
    list_type = s.get("x-kubernetes-list-type")
    if list_type is not None and t != "array":
        detail = "must be array if x-kubernetes-list-type is specified"
        errs.append(_required(f"{p}.type", detail) if not t else _invalid(f"{p}.type", t, detail))
    elif list_type == "set" and isinstance(items, dict):
        it = items.get("type")
        detail = "must be atomic as item of a list with x-kubernetes-list-type=set"
        if it == "array":
            lt = items.get("x-kubernetes-list-type")
            if lt is not None and lt != "atomic":
                errs.append(_invalid(f"{p}.items.x-kubernetes-list-type", lt, detail))
        elif it == "object" and items.get("x-kubernetes-map-type") != "atomic":
            errs.append(
                _invalid(
                    f"{p}.items.x-kubernetes-map-type",
                    items.get("x-kubernetes-list-type"),
                    detail,
                )
            )
    if list_type is not None and list_type not in ("atomic", "set", "map"):
        errs.append(
            _unsupported(f"{p}.x-kubernetes-list-type", list_type, ("atomic", "set", "map"))
        )
    keys = s.get("x-kubernetes-list-map-keys") or []
    if keys:
        detail = "must be map if x-kubernetes-list-map-keys is non-empty"
        if list_type is None:
            errs.append(_required(f"{p}.x-kubernetes-list-type", detail))
        elif list_type != "map":
            errs.append(_invalid(f"{p}.x-kubernetes-list-type", list_type, detail))
    if list_type == "map":
        if not keys:
            errs.append(
                _required(
                    f"{p}.x-kubernetes-list-map-keys",
                    "must not be empty if x-kubernetes-list-type is map",
                )
            )
        if items is None:
            errs.append(
                _required(f"{p}.items", "must have a schema if x-kubernetes-list-type is map")
            )
        elif not isinstance(items, dict):
            errs.append(
                _invalid(
                    f"{p}.items",
                    items,
                    "must only have a single schema if x-kubernetes-list-type is map",
                )
            )
        elif items.get("type") != "object":
            errs.append(
                _invalid(
                    f"{p}.items.type",
                    items.get("type") or "",
                    "must be object if parent array's x-kubernetes-list-type is map",
                )
            )
        else:
            iprops = _props(items)
            seen: set[str] = set()
            for k in keys:
                sub_schema = iprops.get(k)
                if isinstance(sub_schema, dict):
                    if sub_schema.get("type") in ("array", "object"):
                        errs.append(
                            _invalid(
                                f"{p}.items.properties[{k}].type",
                                items.get("type") or "",
                                "must be a scalar type if parent array's "
                                "x-kubernetes-list-type is map",
                            )
                        )
                else:
                    errs.append(
                        _invalid(
                            f"{p}.x-kubernetes-list-map-keys",
                            keys,
                            "entries must all be names of item properties",
                        )
                    )
                if k in seen:
                    errs.append(
                        _invalid(
                            f"{p}.x-kubernetes-list-map-keys",
                            keys,
                            "must not contain duplicate entries",
                        )
                    )
                seen.add(k)
    if list_type in ("set", "map") and isinstance(items, dict):
        if items.get("nullable") is True:
            errs.append(
                _forbidden(
                    f"{p}.items.nullable",
                    f"cannot be nullable when x-kubernetes-list-type is {list_type}",
                )
            )
        if list_type == "map":
            required = set(items.get("required") or ())
            iprops = _props(items)
            for k in keys:
                sub_schema = iprops.get(k)
                if not isinstance(sub_schema, dict):
                    continue
                if k not in required and sub_schema.get("default") is None:
                    errs.append(
                        _required(
                            f"{p}.items.properties[{k}].default",
                            "this property is in x-kubernetes-list-map-keys, so it must have a "
                            "default or be a required property",
                        )
                    )
                if sub_schema.get("nullable") is True:
                    errs.append(
                        _forbidden(
                            f"{p}.items.properties[{k}].nullable",
                            "this property is in x-kubernetes-list-map-keys, so it cannot be "
                            "nullable",
                        )
                    )
    for i, rule in enumerate(s.get("x-kubernetes-validations") or ()):
        _rule_problems(rule, s, f"{p}.x-kubernetes-validations[{i}]", errs)


_NEWLINES = re.compile(r"[\n\r]+")
_PATH_TOKENS = re.compile(r"'(?:[^'\\]|\\.)*'|[.\[\]]|[^.\[\]']+|'.*")


def field_path_problem(json_path: str, schema: Mapping[str, Any]) -> str | None:
    """kube's ValidFieldPath: why a rule's fieldPath (".spec.a", "['a.b']") does not name a
    field of the schema it sits on, or None when it does."""
    tokens = _PATH_TOKENS.findall(json_path)
    s: Any = schema
    i = 0

    def step(name: str) -> str | None:
        nonlocal s
        props = s.get("properties") if isinstance(s, dict) else None
        if isinstance(props, dict):
            if name not in props:
                return "does not refer to a valid field"
            s = props[name]
        elif isinstance(s, dict) and s.get("additionalProperties") is not None:
            ap = s["additionalProperties"]
            s = ap if isinstance(ap, dict) else {}
        else:
            return "does not refer to a valid field"
        return None

    while i < len(tokens):
        tok = tokens[i]
        if tok == "[":
            if i + 1 >= len(tokens):
                return "unexpected end of JSON path"
            lit = tokens[i + 1]
            if len(lit) < 2 or lit[0] != "'" or lit[-1] != "'":
                return f"expected single quoted string but got {lit}"
            name = lit[1:-1].replace("\\'", "'").replace("\\\\", "\\")
            problem = step(name)
            if problem:
                return problem
            if i + 2 >= len(tokens):
                return "unexpected end of JSON path"
            if tokens[i + 2] != "]":
                return f"expected ] but got {tokens[i + 2]}"
            i += 3
        elif tok == ".":
            if i + 1 >= len(tokens):
                return "unexpected end of JSON path"
            problem = step(tokens[i + 1])
            if problem:
                return problem
            i += 2
        else:
            return f"expected [ or . but got: {tok}"
    return None


def _rule_problems(
    rule: Mapping[str, Any], schema: Mapping[str, Any], p: str, errs: list[FieldError]
) -> None:
    """The static checks of one x-kubernetes-validations rule (CEL compilation is cel.py's)."""
    text = rule.get("rule") or ""
    message = rule.get("message") or ""
    msg_expr = rule.get("messageExpression") or ""
    trimmed_rule, trimmed_msg = text.strip(), message.strip()
    if not trimmed_rule:
        errs.append(_required(f"{p}.rule", "rule is not specified"))
    elif message and not trimmed_msg:
        errs.append(_invalid(f"{p}.message", message, "must be non-empty if specified"))
    elif _NEWLINES.search(trimmed_msg):
        errs.append(_invalid(f"{p}.message", message, "must not contain line breaks"))
    elif _NEWLINES.search(trimmed_rule) and not trimmed_msg:
        errs.append(
            _required(f"{p}.message", "message must be specified if rule contains line breaks")
        )
    if msg_expr and not msg_expr.strip():
        errs.append(
            _required(f"{p}.messageExpression", "messageExpression must be non-empty if specified")
        )
    reason = rule.get("reason")
    if reason is not None and reason not in _VALIDATION_REASONS:
        errs.append(_unsupported(f"{p}.reason", reason, _VALIDATION_REASONS))
    field_path = rule.get("fieldPath") or ""
    if field_path and not field_path.strip():
        errs.append(_invalid(f"{p}.fieldPath", field_path, "must be non-empty if specified"))
    if _NEWLINES.search(field_path):
        errs.append(_invalid(f"{p}.fieldPath", field_path, "must not contain line breaks"))
    if field_path and field_path_problem(field_path, schema) is not None:
        errs.append(_invalid(f"{p}.fieldPath", field_path, "must be a valid path"))


_UNSUPPORTED_IN_STRUCTURAL = (
    "id",
    "$schema",
    "$ref",
    "patternProperties",
    "dependencies",
    "additionalItems",
    "definitions",
)


def _structural_init_error(s: Any) -> str | None:
    """NewStructural's refusal (shown only when nothing else is wrong)."""
    if not isinstance(s, dict):
        return None
    for k in _UNSUPPORTED_IN_STRUCTURAL:
        if _meaningful(s.get(k)) or (k == "additionalItems" and s.get(k) is not None):
            return f"OpenAPIV3Schema '{k}' is not supported"
    if isinstance(s.get("items"), list):
        return "OpenAPIV3Schema 'items' must be a schema, but is an array"
    children: list[Any] = [s.get("items"), s.get("not"), s.get("additionalProperties")]
    children += list(_props(s).values())
    for key in ("allOf", "anyOf", "oneOf"):
        children += list(s.get(key) or ())
    for c in children:
        if isinstance(c, dict):
            problem = _structural_init_error(c)
            if problem:
                return problem
    return None


# JSONSchemaProps' fields allowed at the root when the status subresource is on (kube keeps the
# status's validation intact when it cuts properties[status] out).
_ROOT_WITH_STATUS = {
    "description": "Description",
    "type": "Type",
    "format": "Format",
    "title": "Title",
    "maximum": "Maximum",
    "exclusiveMaximum": "ExclusiveMaximum",
    "minimum": "Minimum",
    "exclusiveMinimum": "ExclusiveMinimum",
    "maxLength": "MaxLength",
    "minLength": "MinLength",
    "pattern": "Pattern",
    "maxItems": "MaxItems",
    "minItems": "MinItems",
    "uniqueItems": "UniqueItems",
    "multipleOf": "MultipleOf",
    "required": "Required",
    "items": "Items",
    "properties": "Properties",
    "externalDocs": "ExternalDocs",
    "example": "Example",
    "x-kubernetes-preserve-unknown-fields": "XPreserveUnknownFields",
    "x-kubernetes-validations": "XValidations",
}


def _status_root_problems(schema: Mapping[str, Any], path: str) -> list[FieldError]:
    for key, value in schema.items():
        if not _meaningful(value) and not (
            key in ("maximum", "minimum", "maxLength", "minLength", "maxItems", "minItems")
            and value is not None
        ):
            continue
        if key == "type":
            if value != "object":
                return [
                    _invalid(
                        f"{path}.type",
                        value,
                        'only "object" is allowed as the type at the root of the schema if the '
                        "status subresource is enabled",
                    )
                ]
            continue
        if key not in _ROOT_WITH_STATUS:
            allowed = " ".join(_ROOT_WITH_STATUS.values())
            return [
                _invalid(
                    path,
                    dict(schema),
                    f"only [{allowed}] fields are allowed at the root of the schema if the status "
                    "subresource is enabled",
                )
            ]
    return []


def _schema_problems(schema: Any, path: str, status_subresource: bool) -> list[FieldError]:
    shape = _shape_problems(schema, path)
    if shape:
        return shape
    errs: list[FieldError] = []
    if status_subresource:
        errs.extend(_status_root_problems(schema, path))
    if schema.get("nullable") is True:
        errs.append(_forbidden(f"{path}.nullable", "nullable cannot be true at the root"))
    init_error = _structural_init_error(schema)
    if init_error is None:
        structural = _structural_problems(schema, path)
        errs.extend(structural or _default_problems(schema, path))
    _openapi(schema, path, _SchemaRules(), True, errs)
    if not errs and init_error is not None:
        errs.append(_invalid(path, "", init_error))
    return errs


# ---------------------------------------------------------------------------------------------
# The interface


def validate(
    value: JSON, schema: dict[str, Any], path: str = "", *, old: JSON = _NO_OLD
) -> list[FieldError]:
    """A custom object (or, with path "status", its status) against its schema: kube-openapi's
    checks, embedded resources' apiVersion/kind/metadata, and list-type set/map uniqueness
    (on an update, given the `old` object, only when the old object had no such duplicates)."""
    return compile_schema(schema).validate(value, path, old=old)


def prune(value: JSON, schema: dict[str, Any]) -> list[str]:
    """Drops unknown fields of a whole custom object in place; returns their paths."""
    return compile_schema(schema).prune(value)


def default(value: JSON, schema: dict[str, Any]) -> None:
    """Applies the schema's defaults to a custom object in place (after pruning)."""
    compile_schema(schema).default(value)


def schema_problems(
    schema: dict[str, Any], path: str, *, status_subresource: bool = False
) -> list[FieldError]:
    """The CRD's schema itself, as kube's CRD validation checks an openAPIV3Schema: JSON types
    of its fields, structural rules, defaults (pruned and valid), list and map types, the static
    parts of x-kubernetes-validations (their CEL is cel.py's). With `status_subresource` (the
    version has a status subresource) the root allows only what survives cutting out
    properties[status]."""
    return _schema_problems(schema, path, status_subresource)


__all__ = [
    "CompiledSchema",
    "GoRegexp",
    "bad_value",
    "compile_schema",
    "default",
    "field_path_problem",
    "go_float",
    "go_json",
    "go_quote",
    "prune",
    "schema_problems",
    "validate",
]
