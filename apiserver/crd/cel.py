"""CEL for custom resources: `x-kubernetes-validations` rules and free expressions.

Kubernetes' apiextensions-apiserver `pkg/apiserver/schema/cel` carried over onto
`cel-expr-python`, Google's Python binding of cel-cpp (parser, type checker and runtime; a
well-kept CEL library, so nothing here parses or interprets CEL itself). `compile_rules` compiles
every rule of a CRD's schema once (a `RuleSet`); `RuleSet.validate` walks an object with its
schema and evaluates each rule with `self` (and `oldSelf` for transition rules) bound to the value
at the rule's level. `compile_expression` compiles a free expression over named `dyn` variables
(webhooks' matchConditions).

Types: `self` is typed from the schema where cel-cpp can check it (string, int, double, bool,
bytes, duration and timestamp for formatted strings, lists and maps of those); objects are
`map(string, dyn)` and int-or-string / preserve-unknown-fields values `dyn`. Selecting a field
an object's schema does not declare is kube's compile error (`undefined field 'foo'`, checked
here over the checked expression); other type errors inside objects (`self.name + 1` where
name is a string) surface at run time as kube's "no such overload", where kube's typed objects
catch them at compile time.

Library: cel-cpp's standard library with its strings, math, optional and bindings extensions,
plus kube's additions (lists isSorted/sum/min/max, regex find/findAll, quantity, url, sets) as
Python functions; a quantity and a URL are their validated strings (not opaque types).

Cost: cel-cpp has no cost accounting; see "cost" below for how kube's limits are modelled.

Pure and synchronous: no I/O, no globals besides constants; a RuleSet is immutable after
compilation and safe to share between requests.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import math
import re
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from cel_expr_python import cel as _cel
from cel_expr_python.ext import ext_bindings, ext_encoders, ext_math, ext_optional, ext_strings

from apiserver.validation import go_quote
from tinykube.errors import FieldError
from tinykube.quantity import QuantityError, format_quantity, parse_quantity, quantity_format

# k8s.io/apiserver/pkg/apis/cel/config.go and apiextensions' validation.
PER_CALL_LIMIT = 1_000_000
RUNTIME_CEL_COST_BUDGET = 10_000_000
STATIC_ESTIMATED_COST_LIMIT = 10_000_000
STATIC_ESTIMATED_CRD_COST_LIMIT = 100_000_000
MAX_REQUEST_SIZE_BYTES = 3 * 1024 * 1024
MAX_EVALUATED_MESSAGE_EXPRESSION_SIZE_BYTES = 5 * 1024

SELF = "self"
OLD_SELF = "oldSelf"
# Internal names for optionalOldSelf rules: the rule is wrapped in
# cel.bind(oldSelf, <optional of the old value>, rule).
_OLD_VALUE = "__tinykube_old_value"
_HAS_OLD = "__tinykube_has_old"

# Rules whose estimate is at most this are charged it at run time without a walk over the value.
_CHEAP = 100.0

REASONS = ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate")

_T = _cel.Type
_QUANTITY_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"


class _Env:
    """cel-expr-python environments, one per declared type of `self` (building one takes
    milliseconds, so compile_rules builds each distinct one once)."""

    def __init__(self) -> None:
        self._envs: dict[tuple[tuple[str, str], ...], Any] = {}

    def get(self, variables: dict[str, Any]) -> Any:
        key = tuple(sorted((name, t.name()) for name, t in variables.items()))
        env = self._envs.get(key)
        if env is None:
            env = _cel.NewEnv(
                variables=variables,
                extensions=[
                    ext_strings.ExtStrings(),
                    ext_math.ExtMath(),
                    ext_optional.ExtOptional(),
                    ext_bindings.ExtBindings(),
                    ext_encoders.ExtEncoders(),
                ],
                functions=_library(),
            )
            self._envs[key] = env
        return env


# ---- kube's CEL library additions (k8s.io/apiserver/pkg/cel/library) ---------------------------


class _CelError(Exception):
    """A runtime error raised by one of our library functions (cel-cpp turns it into an error
    value; the message is what the user sees)."""


def _is_sorted(items: list[Any]) -> bool:
    try:
        return all(items[i] <= items[i + 1] for i in range(len(items) - 1))
    except TypeError as exc:
        raise _CelError("no such overload") from exc


def _sum(items: list[Any]) -> Any:
    if not items:
        return 0
    try:
        total = items[0]
        for x in items[1:]:
            total = total + x
    except TypeError as exc:
        raise _CelError("no such overload") from exc
    if isinstance(total, int) and not isinstance(total, bool) and not -(2**63) <= total < 2**63:
        raise _CelError("integer overflow")
    return total


def _min(items: list[Any]) -> Any:
    if not items:
        raise _CelError("min(list) argument must not be empty")
    try:
        return min(items)
    except TypeError as exc:
        raise _CelError("no such overload") from exc


def _max(items: list[Any]) -> Any:
    if not items:
        raise _CelError("max(list) argument must not be empty")
    try:
        return max(items)
    except TypeError as exc:
        raise _CelError("no such overload") from exc


def _slice(items: list[Any], start: int, end: int) -> list[Any]:
    if start < 0 or end < 0:
        raise _CelError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise _CelError(
            f"cannot slice({start}, {end}), start index must be less than or equal to end index"
        )
    if end > len(items):
        raise _CelError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return items[start:end]


def _flatten(items: list[Any], depth: int = 1) -> list[Any]:
    if depth < 0:
        raise _CelError("level must be non-negative")
    out: list[Any] = []
    for item in items:
        if isinstance(item, list) and depth > 0:
            out.extend(_flatten(item, depth - 1))
        else:
            out.append(item)
    return out


def _distinct(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if not any(_same(item, seen) for seen in out):
            out.append(item)
    return out


def _sort(items: list[Any]) -> list[Any]:
    try:
        return sorted(items)
    except TypeError as exc:
        raise _CelError("list elements must have the same type") from exc


def _quantity(text: str) -> Fraction:
    try:
        return parse_quantity(text)
    except QuantityError as exc:
        raise _CelError(
            f"quantities must match the regular expression '{_QUANTITY_PATTERN}'"
        ) from exc


def _quantity_of(text: str) -> str:
    _quantity(text)
    return text


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _quantity_compare(a: str, b: str) -> int:
    x, y = _quantity(a), _quantity(b)
    return int(x > y) - int(x < y)


def _quantity_sum(a: str, b: Any, sign: int) -> str:
    other = Fraction(b) if isinstance(b, int) and not isinstance(b, bool) else _quantity(str(b))
    return format_quantity(_quantity(a) + sign * other, quantity_format(a))


def _quantity_as_integer(a: str) -> int:
    amount = _quantity(a)
    if amount.denominator != 1 or not -(2**63) <= amount < 2**63:
        raise _CelError("cannot convert value to integer")
    return int(amount)


def _quantity_sign(a: str) -> int:
    amount = _quantity(a)
    return int(amount > 0) - int(amount < 0)


def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise _CelError(f"invalid regular expression: {exc}") from exc


def _find(text: str, pattern: str) -> str:
    m = _regex(pattern).search(text)
    return m.group(0) if m else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    found = [m.group(0) for m in _regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


def _url(text: str) -> urllib.parse.SplitResult:
    """Go's url.ParseRequestURI, as kube's url() library: an absolute URL or an absolute
    path."""
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError as exc:
        raise _CelError(f"URL parse error during conversion from string: {exc}") from exc
    if not (parts.scheme or text.startswith("/")) or parts.fragment:
        raise _CelError(
            f'URL parse error during conversion from string: parse "{text}": invalid URI for '
            "request"
        )
    return parts


def _url_of(text: str) -> str:
    _url(text)
    return text


def _is_url(text: str) -> bool:
    try:
        _url(text)
    except _CelError:
        return False
    return True


def _url_host(text: str) -> str:
    return _url(text).netloc.rsplit("@", 1)[-1]


def _url_hostname(text: str) -> str:
    return _url(text).hostname or ""


def _url_port(text: str) -> str:
    host = _url_host(text)
    if host.startswith("["):
        end = host.find("]")
        return host[end + 2 :] if host[end + 1 : end + 2] == ":" else ""
    return host.rsplit(":", 1)[1] if ":" in host else ""


def _url_query(text: str) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(_url(text).query, keep_blank_values=True)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """kube's ip(): an IPv4 or IPv6 address, no zone, no IPv4-mapped IPv6."""
    try:
        addr = ipaddress.ip_address(text)
    except ValueError as exc:
        raise _CelError(f"IP Address {text!r} parse error during conversion from string") from exc
    if isinstance(addr, ipaddress.IPv6Address) and (addr.ipv4_mapped or addr.scope_id):
        raise _CelError(f"IPv4-mapped IPv6 address {text!r} is not allowed")
    return addr


def _is_ip(text: str) -> bool:
    try:
        _ip(text)
    except _CelError:
        return False
    return True


def _cidr(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError as exc:
        raise _CelError(
            f"network address parse error during conversion from string: {exc}"
        ) from exc


def _is_cidr(text: str) -> bool:
    try:
        _cidr(text)
    except _CelError:
        return False
    return True


def _contains_ip(cidr: str, ip: str) -> bool:
    network, addr = _cidr(cidr), _ip(ip)
    return addr.version == network.version and addr in network


def _contains_cidr(cidr: str, other: str) -> bool:
    network, sub = _cidr(cidr), _cidr(other)
    return sub.version == network.version and sub.subnet_of(network)  # type: ignore[arg-type]


def _sets_contains(a: list[Any], b: list[Any]) -> bool:
    return all(any(_same(x, y) for y in a) for x in b)


def _sets_equivalent(a: list[Any], b: list[Any]) -> bool:
    return _sets_contains(a, b) and _sets_contains(b, a)


def _sets_intersects(a: list[Any], b: list[Any]) -> bool:
    return any(any(_same(x, y) for y in a) for x in b)


def _same(x: Any, y: Any) -> bool:
    """CEL equality of two plain values: 1 == 1.0, but true != 1."""
    if isinstance(x, bool) or isinstance(y, bool):
        return type(x) is type(y) and x == y
    return bool(x == y)


def _library() -> list[Any]:
    """Kube's list, quantity and string additions that cel-cpp's standard library and
    extensions lack. Each is one overload over `dyn` lists (cel-cpp dispatches on the argument
    kinds, so typed overloads of one name would collide)."""
    dyn_list = _T.List(_T.DYN)

    def decl(name: str, oid: str, ret: Any, params: list[Any], impl: Callable[..., Any]) -> Any:
        return _cel.FunctionDecl(
            name,
            [_cel.Overload(oid, return_type=ret, parameters=params, is_member=True, impl=impl)],
        )

    def free(name: str, oid: str, ret: Any, params: list[Any], impl: Callable[..., Any]) -> Any:
        return _cel.FunctionDecl(
            name,
            [_cel.Overload(oid, return_type=ret, parameters=params, is_member=False, impl=impl)],
        )

    return [
        decl("isSorted", "list_is_sorted", _T.BOOL, [dyn_list], _is_sorted),
        decl("sum", "list_sum", _T.DYN, [dyn_list], _sum),
        decl("min", "list_min", _T.DYN, [dyn_list], _min),
        decl("max", "list_max", _T.DYN, [dyn_list], _max),
        # kube's quantity library: a quantity is its (validated) string; the methods compare
        # and add the exact amounts.
        free("quantity", "string_to_quantity", _T.STRING, [_T.STRING], _quantity_of),
        free("isQuantity", "is_quantity_string", _T.BOOL, [_T.STRING], _is_quantity),
        decl("compareTo", "quantity_compare", _T.INT, [_T.STRING, _T.STRING], _quantity_compare),
        decl(
            "isGreaterThan",
            "quantity_greater",
            _T.BOOL,
            [_T.STRING, _T.STRING],
            lambda a, b: _quantity_compare(a, b) > 0,
        ),
        decl(
            "isLessThan",
            "quantity_less",
            _T.BOOL,
            [_T.STRING, _T.STRING],
            lambda a, b: _quantity_compare(a, b) < 0,
        ),
        _cel.FunctionDecl(
            "add",
            [
                _cel.Overload(
                    "quantity_add",
                    return_type=_T.STRING,
                    parameters=[_T.STRING, _T.STRING],
                    is_member=True,
                    impl=lambda a, b: _quantity_sum(a, b, 1),
                ),
                _cel.Overload(
                    "quantity_add_int",
                    return_type=_T.STRING,
                    parameters=[_T.STRING, _T.INT],
                    is_member=True,
                    impl=lambda a, b: _quantity_sum(a, b, 1),
                ),
            ],
        ),
        _cel.FunctionDecl(
            "sub",
            [
                _cel.Overload(
                    "quantity_sub",
                    return_type=_T.STRING,
                    parameters=[_T.STRING, _T.STRING],
                    is_member=True,
                    impl=lambda a, b: _quantity_sum(a, b, -1),
                ),
                _cel.Overload(
                    "quantity_sub_int",
                    return_type=_T.STRING,
                    parameters=[_T.STRING, _T.INT],
                    is_member=True,
                    impl=lambda a, b: _quantity_sum(a, b, -1),
                ),
            ],
        ),
        decl("asInteger", "quantity_as_integer", _T.INT, [_T.STRING], _quantity_as_integer),
        decl(
            "isInteger",
            "quantity_is_integer",
            _T.BOOL,
            [_T.STRING],
            lambda a: _quantity(a).denominator == 1,
        ),
        decl(
            "asApproximateFloat",
            "quantity_as_float",
            _T.DOUBLE,
            [_T.STRING],
            lambda a: float(_quantity(a)),
        ),
        decl("sign", "quantity_sign", _T.INT, [_T.STRING], _quantity_sign),
        # cel-go's lists extension (kube enables it): slice, flatten, distinct, sort
        _cel.FunctionDecl(
            "slice",
            [
                _cel.Overload(
                    "list_slice",
                    return_type=dyn_list,
                    parameters=[dyn_list, _T.INT, _T.INT],
                    is_member=True,
                    impl=_slice,
                )
            ],
        ),
        _cel.FunctionDecl(
            "flatten",
            [
                _cel.Overload(
                    "list_flatten",
                    return_type=dyn_list,
                    parameters=[dyn_list],
                    is_member=True,
                    impl=_flatten,
                ),
                _cel.Overload(
                    "list_flatten_int",
                    return_type=dyn_list,
                    parameters=[dyn_list, _T.INT],
                    is_member=True,
                    impl=_flatten,
                ),
            ],
        ),
        decl("distinct", "list_distinct", dyn_list, [dyn_list], _distinct),
        decl("sort", "list_sort", dyn_list, [dyn_list], _sort),
        # kube's regex library
        decl("find", "string_find", _T.STRING, [_T.STRING, _T.STRING], _find),
        _cel.FunctionDecl(
            "findAll",
            [
                _cel.Overload(
                    "string_find_all",
                    return_type=_T.List(_T.STRING),
                    parameters=[_T.STRING, _T.STRING],
                    is_member=True,
                    impl=_find_all,
                ),
                _cel.Overload(
                    "string_find_all_n",
                    return_type=_T.List(_T.STRING),
                    parameters=[_T.STRING, _T.STRING, _T.INT],
                    is_member=True,
                    impl=_find_all,
                ),
            ],
        ),
        # kube's URL library: a URL is its (validated) string
        free("url", "string_to_url", _T.STRING, [_T.STRING], _url_of),
        free("isURL", "is_url_string", _T.BOOL, [_T.STRING], _is_url),
        decl("getScheme", "url_get_scheme", _T.STRING, [_T.STRING], lambda u: _url(u).scheme),
        decl("getHost", "url_get_host", _T.STRING, [_T.STRING], _url_host),
        decl("getHostname", "url_get_hostname", _T.STRING, [_T.STRING], _url_hostname),
        decl("getPort", "url_get_port", _T.STRING, [_T.STRING], _url_port),
        decl(
            "getEscapedPath", "url_get_escaped_path", _T.STRING, [_T.STRING], lambda u: _url(u).path
        ),
        decl(
            "getQuery",
            "url_get_query",
            _T.Map(_T.STRING, _T.List(_T.STRING)),
            [_T.STRING],
            _url_query,
        ),
        # kube's IP and CIDR libraries: addresses and networks are their (validated) strings
        free("ip", "string_to_ip", _T.STRING, [_T.STRING], lambda t: str(_ip(t)) and t),
        free("isIP", "is_ip", _T.BOOL, [_T.STRING], _is_ip),
        free("cidr", "string_to_cidr", _T.STRING, [_T.STRING], lambda t: str(_cidr(t)) and t),
        free("isCIDR", "is_cidr", _T.BOOL, [_T.STRING], _is_cidr),
        decl("family", "ip_family", _T.INT, [_T.STRING], lambda t: _ip(t).version),
        decl("isLoopback", "ip_is_loopback", _T.BOOL, [_T.STRING], lambda t: _ip(t).is_loopback),
        decl(
            "isUnspecified",
            "ip_is_unspecified",
            _T.BOOL,
            [_T.STRING],
            lambda t: _ip(t).is_unspecified,
        ),
        decl(
            "isGlobalUnicast",
            "ip_is_global_unicast",
            _T.BOOL,
            [_T.STRING],
            lambda t: (
                not (
                    _ip(t).is_loopback
                    or _ip(t).is_multicast
                    or _ip(t).is_unspecified
                    or _ip(t).is_link_local
                    or t == "255.255.255.255"
                )
            ),
        ),
        decl(
            "isLinkLocalUnicast",
            "ip_is_link_local_unicast",
            _T.BOOL,
            [_T.STRING],
            lambda t: _ip(t).is_link_local,
        ),
        decl("containsIP", "cidr_contains_ip", _T.BOOL, [_T.STRING, _T.STRING], _contains_ip),
        decl(
            "containsCIDR",
            "cidr_contains_cidr",
            _T.BOOL,
            [_T.STRING, _T.STRING],
            _contains_cidr,
        ),
        decl(
            "prefixLength", "cidr_prefix_length", _T.INT, [_T.STRING], lambda t: _cidr(t).prefixlen
        ),
        decl("masked", "cidr_masked", _T.STRING, [_T.STRING], lambda t: str(_cidr(t))),
        # kube's sets library
        free(
            "sets.contains",
            "list_sets_contains_list",
            _T.BOOL,
            [dyn_list, dyn_list],
            _sets_contains,
        ),
        free(
            "sets.equivalent",
            "list_sets_equivalent_list",
            _T.BOOL,
            [dyn_list, dyn_list],
            _sets_equivalent,
        ),
        free(
            "sets.intersects",
            "list_sets_intersects_list",
            _T.BOOL,
            [dyn_list, dyn_list],
            _sets_intersects,
        ),
    ]


# ---- values ------------------------------------------------------------------------------------


def _decl_type(schema: Any) -> Any:
    """The CEL type of a value of this schema (kube's SchemaDeclType, objects as maps)."""
    if not isinstance(schema, dict) or schema.get("x-kubernetes-int-or-string"):
        return _T.DYN
    if schema.get("nullable"):
        return _T.DYN  # a null inside a typed list or map would not convert
    kind = schema.get("type")
    if kind == "string" and schema.get("format") in _FORMAT_TYPES:
        return _FORMAT_TYPES[schema["format"]]
    if kind == "object":
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict) and not schema.get("properties"):
            return _T.Map(_T.STRING, _decl_type(additional))
        return _T.Map(_T.STRING, _T.DYN)
    if kind == "array":
        return _T.List(_decl_type(schema.get("items")))
    return {
        "string": _T.STRING,
        "integer": _T.INT,
        "number": _T.DOUBLE,
        "boolean": _T.BOOL,
    }.get(str(kind), _T.DYN)


_FORMAT_TYPES = {
    "byte": _T.BYTES,
    "duration": _T.DURATION,
    "date": _T.TIMESTAMP,
    "date-time": _T.TIMESTAMP,
}


# CEL's reserved words (k8s.io/apiserver/pkg/cel/escaping.go): a property so named is
# `self.__<name>__` in CEL (`namespace` is `self.__namespace__`), and no variable may be so named.
_CEL_RESERVED = frozenset(
    [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)
_CEL_IDENTIFIER = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
# kube's property name escaping (escaping.go): a property `foo-bar` is `self.foo__dash__bar`.
_ESCAPES = (("__", "__underscores__"), (".", "__dot__"), ("-", "__dash__"), ("/", "__slash__"))


def is_cel_identifier(name: str) -> bool:
    """Whether `name` can name a CEL variable: an identifier, not a reserved word (kube's
    isCELIdentifier, for a ValidatingAdmissionPolicy's variables)."""
    return _CEL_IDENTIFIER.match(name) is not None and name not in _CEL_RESERVED


def escape_property(name: str) -> str | None:
    """A property's name in CEL, or None when it cannot be written there."""
    if name in _CEL_RESERVED:
        return f"__{name}__"
    escaped = name
    for old, new in _ESCAPES:
        escaped = escaped.replace(old, new)
    return escaped if _CEL_IDENTIFIER.match(escaped) else None


def _escaped_properties(schema: dict[str, Any]) -> dict[str, Any]:
    props = schema.get("properties")
    if not isinstance(props, dict):
        return {}
    out: dict[str, Any] = {}
    for name, sub in props.items():
        cel_name = escape_property(str(name))
        if cel_name is not None:
            out[cel_name] = sub
    return out


def _has_number(schema: Any) -> bool:
    """Whether values of this schema need `_coerce` (numbers, formatted strings, property
    names CEL sees escaped)."""
    if not isinstance(schema, dict):
        return False
    if schema.get("type") == "number" or (
        schema.get("type") == "string" and schema.get("format") in _FORMAT_TYPES
    ):
        return True
    props = schema.get("properties")
    if isinstance(props, dict) and any(escape_property(str(k)) != k for k in props):
        return True
    return any(_has_number(sub) for sub in _children(schema))


def _children(schema: dict[str, Any]) -> Iterator[Any]:
    props = schema.get("properties")
    if isinstance(props, dict):
        yield from props.values()
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield schema[key]


def _coerce(value: Any, schema: Any) -> Any:
    """JSON numbers of `type: number` schemas as doubles (kube's CEL values are typed by the
    schema; json.loads gives 3 for 3, which CEL would see as an int)."""
    if not isinstance(schema, dict):
        return value
    kind = schema.get("type")
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind == "string" and isinstance(value, str) and schema.get("format") in _FORMAT_TYPES:
        return _formatted(value, schema["format"])
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        return [_coerce(v, items) for v in value]
    if isinstance(value, dict):
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        out: dict[str, Any] = {}
        for k, v in value.items():
            sub = props.get(k) if isinstance(props, dict) else None
            key = k
            if sub is not None:
                escaped = escape_property(k)
                if escaped is None:
                    continue  # not addressable from CEL
                key = escaped
            elif isinstance(additional, dict):
                sub = additional
            out[key] = _coerce(v, sub) if sub is not None else v
        return out
    return value


_GO_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h|d|w)")
_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}


def _formatted(value: str, fmt: str) -> Any:
    """A formatted string as kube's CEL sees it (bytes, duration, timestamp); unchanged when it
    does not parse (schema validation reports that)."""
    try:
        if fmt == "byte":
            return base64.b64decode(value, validate=True)
        if fmt == "date":
            return datetime.datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=datetime.UTC)
        if fmt == "date-time":
            parsed = datetime.datetime.fromisoformat(value.replace("z", "Z"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
        if fmt == "duration":
            return _go_duration(value)
    except (ValueError, TypeError):
        return value
    return value


def _go_duration(text: str) -> datetime.timedelta:
    """Go's time.ParseDuration (and strfmt's d and w units): "1h30m", "-1.5h", "300ms"."""
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    if body == "0":
        return datetime.timedelta(0)
    seconds = 0.0
    pos = 0
    while pos < len(body):
        m = _GO_DURATION_PART.match(body, pos)
        if m is None or m[1] in ("", "."):
            raise ValueError(f"invalid duration {text!r}")
        seconds += float(m[1]) * _DURATION_UNITS[m[2]]
        pos = m.end()
    if not body:
        raise ValueError(f"invalid duration {text!r}")
    return datetime.timedelta(seconds=sign * seconds)


# ---- errors ------------------------------------------------------------------------------------

# cel-cpp's runtime error texts as cel-go words them (what kube's messages quote).
_COST_LIMIT_EXCEEDED = "operation cancelled: actual cost limit exceeded"
_RUNTIME_ERRORS: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r'Key not found in map\s*:\s*"?(.*?)"?$'), lambda m: f"no such key: {m[1]}"),
    (re.compile(r"Index error: index=(-?\d+)"), lambda m: f"index out of bounds: {m[1]}"),
    (re.compile(r"No matching overloads? found"), lambda m: "no such overload"),
    (re.compile(r"divide by zero|division by zero"), lambda m: "division by zero"),
    (re.compile(r"modulus by zero"), lambda m: "modulus by zero"),
    (re.compile(r"no_such_field|No such field"), lambda m: "no such key"),
    # cel-cpp's own guard: at most 10,000 comprehension iterations per evaluation
    (re.compile(r"Iteration budget exceeded"), lambda m: _COST_LIMIT_EXCEEDED),
)
_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")
_NEWLINES = re.compile(r"[\n\r]+")


def _runtime_error_text(raw: str) -> str:
    text = _STATUS_PREFIX.sub("", raw.strip())
    text = re.sub(r"\s*\[[A-Z_]+\]$", "", text)
    for pattern, word in _RUNTIME_ERRORS:
        m = pattern.search(text)
        if m:
            return word(m)
    return text


def _compile_error_text(exc: Exception) -> str:
    """cel-cpp's compile error as cel-go's issues.String(): `ERROR: <input>:1:6: ...` lines."""
    text = _STATUS_PREFIX.sub("", str(exc).strip())
    return re.sub(r"\s*\[[A-Z_]+\]$", "", text)


def _rule_repr(rule: dict[str, Any]) -> str:
    """The rule as Go's %#v of apiextensions.ValidationRule (kube's field.Invalid value)."""
    reason = rule.get("reason")
    optional = rule.get("optionalOldSelf")
    reason_text = (
        "(*apiextensions.FieldValueErrorReason)(nil)"
        if reason is None
        else f"(*apiextensions.FieldValueErrorReason)({go_quote(str(reason))})"
    )
    optional_text = (
        "(*bool)(nil)" if optional is None else f"(*bool)({str(bool(optional)).lower()})"
    )
    return (
        "apiextensions.ValidationRule{"
        f"Rule:{go_quote(str(rule.get('rule') or ''))}, "
        f"Message:{go_quote(str(rule.get('message') or ''))}, "
        f"MessageExpression:{go_quote(str(rule.get('messageExpression') or ''))}, "
        f"Reason:{reason_text}, "
        f"FieldPath:{go_quote(str(rule.get('fieldPath') or ''))}, "
        f"OptionalOldSelf:{optional_text}}}"
    )


def _invalid_rule(path: str, rule: dict[str, Any], detail: str) -> FieldError:
    return FieldError(path, f"Invalid value: {_rule_repr(rule)}: {detail}")


def _invalid(path: str, shown: str, detail: str) -> FieldError:
    return FieldError(path, f"Invalid value: {go_quote(shown)}: {detail}")


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path and path != "<nil>" else name


def _index(path: str, i: int) -> str:
    return f"{'' if path == '<nil>' else path}[{i}]"


def _key(path: str, key: str) -> str:
    return f"{'' if path == '<nil>' else path}[{key}]"


# ---- compiled rules ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    source: dict[str, Any]
    rule: str
    program: Any
    uses_old_self: bool
    optional_old_self: bool
    message: str
    message_program: Any | None
    reason: str | None
    field_path: str  # normalized (kube's NormalizedRuleFieldPath), "" when unset
    ast: _Ast  # the checked expression, for the runtime cost
    cost: float  # estimated cost of one evaluation, from the schema's bounds
    message_cost: float

    def error_string(self) -> str:
        return self.message.strip() if self.message else self.rule.strip()


@dataclass
class _Node:
    type_name: str  # the schema's `type`, shown as the invalid value ("object")
    schema: dict[str, Any]
    rules: list[_Rule] = field(default_factory=list)
    properties: dict[str, _Node] = field(default_factory=dict)
    items: _Node | None = None
    additional: _Node | None = None
    all_of: list[_Node] = field(default_factory=list)
    map_keys: tuple[str, ...] | None = None  # list-type map: old items correlate by these keys
    coerce: bool = False


@dataclass
class _Budget:
    remaining: int


class RuleSet:
    """The compiled `x-kubernetes-validations` of one schema, at every level."""

    def __init__(self, root: _Node | None) -> None:
        self._root = root

    def __bool__(self) -> bool:
        return self._root is not None

    def validate(self, new: Any, old: Any | None) -> list[FieldError]:
        """Every rule against `new` (and `old` for transition rules, on update). The errors
        are kube's (`spec: Invalid value: "object": <message>`); the root's path is kube's
        `<nil>`."""
        if self._root is None:
            return []
        errs: list[FieldError] = []
        self._validate(self._root, "<nil>", new, old, _Budget(RUNTIME_CEL_COST_BUDGET), errs)
        return errs

    def _validate(
        self,
        node: _Node,
        path: str,
        value: Any,
        old: Any,
        budget: _Budget,
        errs: list[FieldError],
        anchor: tuple[Any, Any] | None = None,
    ) -> None:
        """`anchor` is (new, old) of this value or, under a list whose items do not correlate,
        of the nearest value that does: kube's ratcheting keeps a failing rule that does not
        use oldSelf from refusing an update that leaves that value unchanged."""
        if value is None:
            return
        if old is not None:
            anchor = (value, old)
        if node.rules and not self._expressions(node, path, value, old, budget, errs, anchor):
            return
        for sub in node.all_of:
            self._validate(sub, path, value, old, budget, errs, anchor)
            if budget.remaining < 0:
                return
        if isinstance(value, list) and node.items is not None:
            olds = _correlate(node.map_keys, old)
            for i, item in enumerate(value):
                if olds is not None:
                    old_item = olds(item)
                    item_anchor = None
                else:
                    old_item, item_anchor = None, anchor
                self._validate(
                    node.items, _index(path, i), item, old_item, budget, errs, item_anchor
                )
                if budget.remaining < 0:
                    return
        elif isinstance(value, dict):
            old_map = old if isinstance(old, dict) else {}
            if node.additional is not None:
                for k, v in value.items():
                    self._validate(node.additional, _key(path, k), v, old_map.get(k), budget, errs)
                    if budget.remaining < 0:
                        return
            for k, v in value.items():
                prop = node.properties.get(k)
                if prop is not None:
                    self._validate(prop, _child(path, k), v, old_map.get(k), budget, errs)
                    if budget.remaining < 0:
                        return

    def _expressions(
        self,
        node: _Node,
        path: str,
        value: Any,
        old: Any,
        budget: _Budget,
        errs: list[FieldError],
        anchor: tuple[Any, Any] | None,
    ) -> bool:
        """Evaluates the rules of one level; False when the budget ran out."""
        shown = node.type_name
        if budget.remaining <= 0:
            errs.append(
                _invalid(
                    path,
                    shown,
                    "validation failed due to running out of cost budget, "
                    "no further validation rules will be run",
                )
            )
            budget.remaining = -1
            return False
        self_value = _coerce(value, node.schema) if node.coerce else value
        old_value = None
        if old is not None:
            old_value = _coerce(old, node.schema) if node.coerce else old
        for rule in node.rules:
            if rule.uses_old_self and old is None and not rule.optional_old_self:
                continue  # a transition rule needs an existing value to compare with
            activation: dict[str, Any] = {SELF: self_value}
            if rule.optional_old_self:
                activation[_OLD_VALUE] = old_value
                activation[_HAS_OLD] = old is not None
            elif rule.uses_old_self:
                activation[OLD_SELF] = old_value
            cost = rule.cost
            if cost > _CHEAP:
                cost = _actual_cost(rule.ast, self_value, old_value)
            if cost > PER_CALL_LIMIT:
                errs.append(
                    _invalid(
                        path,
                        shown,
                        f"'{_COST_LIMIT_EXCEEDED}': no further validation rules will be run "
                        f"due to call cost exceeds limit for rule: {rule.error_string()}",
                    )
                )
                budget.remaining = -1
                return False
            if cost > budget.remaining:
                errs.append(
                    _invalid(
                        path,
                        shown,
                        "validation failed due to running out of cost budget, "
                        "no further validation rules will be run",
                    )
                )
                budget.remaining = -1
                return False
            budget.remaining -= math.ceil(cost)
            ok, result = _eval(rule.program, activation)
            if not ok:
                text = str(result)
                if text == _COST_LIMIT_EXCEEDED:
                    errs.append(
                        _invalid(
                            path,
                            shown,
                            f"'{text}': no further validation rules will be run due to call "
                            f"cost exceeds limit for rule: {rule.error_string()}",
                        )
                    )
                    budget.remaining = -1
                    return False
                if text.startswith("no such overload"):
                    detail = (
                        f"'{text}': call arguments did not match a supported operator, "
                        f"function or macro signature for rule: {rule.error_string()}"
                    )
                else:
                    detail = f"{text} evaluating rule: {rule.error_string()}"
                errs.append(_invalid(path, shown, detail))
                continue
            if result is True:
                continue
            if not isinstance(result, bool):
                errs.append(
                    _invalid(
                        path,
                        shown,
                        f"no such overload evaluating rule: {rule.error_string()}",
                    )
                )
                continue
            where = _child(path, rule.field_path) if rule.field_path else path
            detail = ""
            if rule.message_program is not None:
                detail = _message(rule.message_program, {SELF: self_value, OLD_SELF: old_value})
            if not detail:
                detail = (
                    rule.message.strip() if rule.message else f"failed rule: {rule.rule.strip()}"
                )
            if not rule.uses_old_self and anchor is not None and anchor[0] == anchor[1]:
                continue  # ratcheted: kube turns this into a warning
            errs.append(_for_reason(where, shown, detail, rule.reason))
        return True


def _for_reason(path: str, shown: str, detail: str, reason: str | None) -> FieldError:
    if reason == "FieldValueForbidden":
        return FieldError(path, f"Forbidden: {detail}")
    if reason == "FieldValueRequired":
        return FieldError(path, f"Required value: {detail}")
    if reason == "FieldValueDuplicate":
        return FieldError(path, f"Duplicate value: {go_quote(shown)}")
    return _invalid(path, shown, detail)


def _message(program: Any, activation: dict[str, Any]) -> str:
    """A messageExpression's text, or "" when it fails (kube logs it and uses the message)."""
    ok, result = _eval(program, activation)
    if not ok or not isinstance(result, str):
        return ""
    text = result.strip()
    if not text or "\n" in text or len(text) > MAX_EVALUATED_MESSAGE_EXPRESSION_SIZE_BYTES:
        return ""
    return text


def _eval(program: Any, activation: dict[str, Any]) -> tuple[bool, Any]:
    """(True, value) or (False, error text in cel-go's words)."""
    try:
        result = program.eval(data=activation)
    except Exception as exc:  # a value cel-cpp cannot take (e.g. a null in a typed list)
        return False, _runtime_error_text(str(exc))
    if result.type() == _T.ERROR:
        return False, _runtime_error_text(str(result.value()))
    return True, result.plain_value()


def _correlate(map_keys: tuple[str, ...] | None, old: Any) -> Callable[[Any], Any] | None:
    """Kube correlates old items only for list-type map lists (by their keys)."""
    if map_keys is None or not isinstance(old, list):
        return None
    index: dict[tuple[Any, ...], Any] = {}
    for item in old:
        if isinstance(item, dict):
            index[tuple(repr(item.get(k)) for k in map_keys)] = item

    def lookup(item: Any) -> Any:
        if not isinstance(item, dict):
            return None
        return index.get(tuple(repr(item.get(k)) for k in map_keys))

    return lookup


# ---- compilation -------------------------------------------------------------------------------


def compile_rules(schema: dict[str, Any], path: str) -> tuple[RuleSet, list[FieldError]]:
    """Compiles every `x-kubernetes-validations` rule of a CRD's schema (all levels). The
    errors are the CRD's validation errors, at e.g.
    `<path>.properties[spec].x-kubernetes-validations[0].rule`."""
    compiler = _Compiler(path)
    root = compiler.node(schema, path, resource_root=True, uncorrelatable=None)
    errs = compiler.errors
    total = compiler.total_cost
    if total > STATIC_ESTIMATED_CRD_COST_LIMIT:
        for rule_path, cost in compiler.costs:
            if cost > STATIC_ESTIMATED_CRD_COST_LIMIT // 100:
                errs.append(
                    FieldError(
                        rule_path,
                        "Forbidden: contributed to estimated rule & messageExpression cost "
                        "total exceeding cost limit",
                    )
                )
        errs.append(
            FieldError(
                path,
                "Forbidden: x-kubernetes-validations estimated rule cost total for entire "
                "OpenAPIv3 schema exceeds budget by factor of "
                f"{_factor(total, STATIC_ESTIMATED_CRD_COST_LIMIT)}",
            )
        )
    return RuleSet(root), errs


def _factor(cost: float, limit: int) -> str:
    factor = cost / limit
    if factor > 100:
        return "more than 100x"
    if factor < 1.5:
        return f"{factor:f}x"  # Go's %f: never "by a factor of 1.0x"
    return f"{factor:.1f}x"


_COST_HINT = (
    " (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where "
    "arrays, maps, and strings are declared)"
)


class _Compiler:
    def __init__(self, path: str) -> None:
        self.path = path
        self.errors: list[FieldError] = []
        self.envs = _Env()
        self.total_cost = 0.0
        self.costs: list[tuple[str, float]] = []

    def node(
        self,
        schema: Any,
        path: str,
        *,
        resource_root: bool,
        uncorrelatable: str | None,
        cardinality: float = 1,
    ) -> _Node | None:
        if not isinstance(schema, dict):
            return None
        out = _Node(type_name=str(schema.get("type") or ""), schema=schema)
        rules = schema.get("x-kubernetes-validations")
        if isinstance(rules, list) and rules:
            out.rules = self.rules(schema, rules, path, uncorrelatable, cardinality, resource_root)
            out.coerce = _has_number(schema)
        props = schema.get("properties")
        if isinstance(props, dict):
            for name, sub in props.items():
                child = self.node(
                    sub,
                    f"{path}.properties[{name}]",
                    resource_root=bool(
                        isinstance(sub, dict) and sub.get("x-kubernetes-embedded-resource")
                    ),
                    uncorrelatable=uncorrelatable,
                    cardinality=cardinality,
                )
                if child is not None:
                    out.properties[name] = child
        items = schema.get("items")
        if isinstance(items, dict):
            list_type = schema.get("x-kubernetes-list-type")
            keys = schema.get("x-kubernetes-list-map-keys")
            correlated = list_type == "map" and isinstance(keys, list)
            out.items = self.node(
                items,
                f"{path}.items",
                resource_root=bool(items.get("x-kubernetes-embedded-resource")),
                uncorrelatable=uncorrelatable if correlated or uncorrelatable else path,
                cardinality=cardinality * _max_elements(schema),
            )
            if correlated and isinstance(keys, list):
                out.map_keys = tuple(str(k) for k in keys)
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            out.additional = self.node(
                additional,
                f"{path}.additionalProperties",
                resource_root=bool(additional.get("x-kubernetes-embedded-resource")),
                uncorrelatable=uncorrelatable,
                cardinality=cardinality * _max_elements(schema),
            )
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            for i, sub in enumerate(all_of):
                if isinstance(sub, dict):
                    merged = {**schema, **{k: v for k, v in sub.items() if k != "type"}}
                    merged.pop("allOf", None)
                    merged["x-kubernetes-validations"] = sub.get("x-kubernetes-validations")
                    for key in ("properties", "items", "additionalProperties"):
                        merged.pop(key, None)
                    child = self.node(
                        merged,
                        f"{path}.allOf[{i}]",
                        resource_root=resource_root,
                        uncorrelatable=uncorrelatable,
                        cardinality=cardinality,
                    )
                    if child is not None and child.rules:
                        out.all_of.append(child)
        if out.rules or out.properties or out.items or out.additional or out.all_of:
            return out
        return None

    def rules(
        self,
        schema: dict[str, Any],
        rules: list[Any],
        path: str,
        uncorrelatable: str | None,
        cardinality: float,
        resource_root: bool,
    ) -> list[_Rule]:
        self_type = _decl_type(schema)
        compiled: list[_Rule] = []
        for i, raw in enumerate(rules):
            rule_path = f"{path}.x-kubernetes-validations[{i}]"
            if not isinstance(raw, dict):
                continue
            result = self.rule(schema, raw, rule_path, self_type, uncorrelatable, resource_root)
            if result is None:
                continue
            ok = True
            for what, where, one in (
                ("rule", "rule", result.cost),
                ("messageExpression", "messageExpression", result.message_cost),
            ):
                cost = one * cardinality
                if cost > STATIC_ESTIMATED_COST_LIMIT:
                    self.errors.append(
                        FieldError(
                            f"{rule_path}.{where}",
                            f"Forbidden: estimated {what} cost exceeds budget by factor of "
                            f"{_factor(cost, STATIC_ESTIMATED_COST_LIMIT)}{_COST_HINT}",
                        )
                    )
                    ok = False
                self.total_cost += cost
                self.costs.append((f"{rule_path}.{where}", cost))
            if ok:
                compiled.append(result)
        return compiled

    def rule(
        self,
        schema: dict[str, Any],
        raw: dict[str, Any],
        rule_path: str,
        self_type: Any,
        uncorrelatable: str | None,
        resource_root: bool,
    ) -> _Rule | None:
        text = raw.get("rule")
        if not isinstance(text, str) or not text.strip():
            return None  # "rule is not specified": schema.py's (kube's schema errors)
        # Kube compiles a level's rules only when its static checks passed. Those checks
        # (message, messageExpression, reason, fieldPath) are reported by schema.py's
        # schema_problems; here they only keep the rule from compiling, so that the CRD's
        # errors are not reported twice. schema.py has no check of the message's length, so
        # that one is reported here.
        message = raw.get("message") or ""
        if not isinstance(message, str):
            message = str(message)
        ok = True
        if len(message) > 2048:
            self.errors.append(
                _invalid(
                    f"{rule_path}.message",
                    message[:10] + "...",
                    "message must have a maximum length of 2048 characters",
                )
            )
            ok = False
        elif message.strip():
            ok = not _NEWLINES.search(message.strip())
        else:  # no message: allowed unless the message is blank or the rule spans lines
            ok = not message and not _NEWLINES.search(text.strip())
        message_expression = raw.get("messageExpression") or ""
        if not isinstance(message_expression, str):
            message_expression = str(message_expression)
        if message_expression and not message_expression.strip():
            ok = False
        reason = raw.get("reason")
        if reason is not None and reason not in REASONS:
            ok = False
        field_path = ""
        raw_field_path = raw.get("fieldPath")
        if raw_field_path is not None and raw_field_path != "":
            shown_path = str(raw_field_path)
            if not shown_path.strip() or _NEWLINES.search(shown_path):
                ok = False
            else:
                field_path, why = _valid_field_path(shown_path, schema)
                ok = ok and not why
        if not ok:
            return None
        optional_old_self = bool(raw.get("optionalOldSelf"))
        env_plain = self.envs.get({SELF: self_type, OLD_SELF: self_type})
        uses_old_self = _uses(self.envs, self_type, text)
        source = text
        env = env_plain
        if optional_old_self and uses_old_self:
            # oldSelf is an optional: cel.bind it from the old value and whether there is one
            env = self.envs.get({SELF: self_type, _OLD_VALUE: self_type, _HAS_OLD: _T.BOOL})
            source = (
                f"cel.bind({OLD_SELF}, {_HAS_OLD} ? optional.of({_OLD_VALUE}) : "
                f"optional.none(),\n{text}\n)"
            )
        try:
            program = env.compile(source)
        except Exception as exc:
            issues = _compile_error_text(exc)
            if source != text:  # the rule starts on the wrapper's second line
                issues = re.sub(r"<input>:(\d+):", lambda m: f"<input>:{int(m[1]) - 1}:", issues)
                try:  # syntax errors (which may sit at the wrapper's end) from the rule alone
                    env_plain.compile(text)
                except Exception as plain_exc:
                    if "Syntax error" in str(plain_exc):
                        issues = _compile_error_text(plain_exc)
            self.errors.append(
                _invalid_rule(f"{rule_path}.rule", raw, f"compilation failed: {issues}")
            )
            return None
        if program.return_type() not in (_T.BOOL, _T.DYN):
            self.errors.append(
                _invalid_rule(f"{rule_path}.rule", raw, "cel expression must evaluate to a bool")
            )
            return None
        ast, positions = _checked(program)
        shift = source.find(text)  # the cel.bind wrapper of optionalOldSelf rules, else 0
        undefined = _undefined_fields(ast, _with_root_fields(schema) if resource_root else schema)
        if undefined:
            issues = "\n".join(
                _located(text, max(positions.get(i, 0) - shift, 0), f"undefined field '{name}'")
                for i, name in undefined
            )
            self.errors.append(
                _invalid_rule(f"{rule_path}.rule", raw, f"compilation failed: {issues}")
            )
            return None
        if uses_old_self and uncorrelatable is not None:
            self.errors.append(
                FieldError(
                    f"{rule_path}.rule",
                    f"Invalid value: {go_quote(text)}: oldSelf cannot be used on the "
                    f"uncorrelatable portion of the schema within {uncorrelatable}",
                )
            )
            ok = False
        if raw.get("optionalOldSelf") is not None and not uses_old_self:
            shown = str(bool(raw.get("optionalOldSelf"))).lower()
            self.errors.append(
                FieldError(
                    f"{rule_path}.optionalOldSelf",
                    f"Invalid value: {shown}: may not be set if oldSelf is not used in rule",
                )
            )
            ok = False
        message_program = None
        if message_expression.strip():
            try:
                message_program = env_plain.compile(message_expression)
                if message_program.return_type() not in (_T.STRING, _T.DYN):
                    self.errors.append(
                        _invalid_rule(
                            f"{rule_path}.messageExpression", raw, "must evaluate to a string"
                        )
                    )
                    ok = False
            except Exception as exc:
                self.errors.append(
                    _invalid_rule(
                        f"{rule_path}.messageExpression",
                        raw,
                        f"messageExpression compilation failed: {_compile_error_text(exc)}",
                    )
                )
                ok = False
        cost = _cost(ast, schema)
        message_cost = (
            _cost(_checked_ast(message_program), schema) if message_program is not None else 0.0
        )
        if not ok:
            return None
        return _Rule(
            source=raw,
            rule=text,
            program=program,
            uses_old_self=uses_old_self,
            optional_old_self=optional_old_self,
            message=message,
            message_program=message_program,
            reason=reason if isinstance(reason, str) else None,
            field_path=field_path,
            ast=ast,
            cost=cost,
            message_cost=message_cost,
        )


def _uses(envs: _Env, self_type: Any, text: str) -> bool:
    """Whether a (compiling) rule refers to oldSelf: it fails to compile without it."""
    if OLD_SELF not in text:
        return False
    try:
        envs.get({SELF: self_type}).compile(text)
    except Exception:
        return True
    return False


def _max_elements(schema: dict[str, Any]) -> float:
    """How many items/properties a list or map of this schema may hold (kube's estimate from
    maxItems/maxProperties, else from the largest request)."""
    for key in ("maxItems", "maxProperties"):
        bound = schema.get(key)
        if isinstance(bound, int) and not isinstance(bound, bool):
            return float(bound)
    return _unbounded_elements(schema)


# ---- field paths -------------------------------------------------------------------------------


def _field_path_tokens(text: str) -> list[str]:
    """kube's ValidFieldPath scanner: '.', '[' and ']' alone, quoted strings whole."""
    tokens: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c in ".[]":
            tokens.append(c)
            i += 1
        elif c == "'":
            j = i + 1
            while j < len(text) and not (text[j] == "'" and text[j - 1] != "\\"):
                j += 1
            tokens.append(text[i : j + 1])
            i = j + 1
        else:
            j = i
            while j < len(text) and text[j] not in ".[]":
                j += 1
            tokens.append(text[i:j])
            i = j
    return tokens


_SINGLE_QUOTE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "'": "'",
    "\\": "\\",
}


def _valid_field_path(text: str, schema: dict[str, Any]) -> tuple[str, str]:
    """kube's ValidFieldPath: `.a.b['c.d']` against the schema -> (normalized path, problem)."""
    tokens = iter(_field_path_tokens(text))
    parts: list[str] = []
    node: Any = schema

    def step(name: str) -> str:
        nonlocal node
        if not isinstance(node, dict):
            return "does not refer to a valid field"
        props = node.get("properties")
        additional = node.get("additionalProperties")
        if isinstance(props, dict):
            if name not in props:
                return "does not refer to a valid field"
            node = props[name]
            parts.append(("." if parts else "") + name)
        elif isinstance(additional, dict):
            node = additional
            parts.append(f"[{name}]")
        else:
            return "does not refer to a valid field"
        return ""

    for tok in tokens:
        if tok == "[":
            quoted = next(tokens, None)
            if quoted is None:
                return "", "unexpected end of JSON path"
            if len(quoted) < 2 or quoted[0] != "'" or quoted[-1] != "'":
                return "", f"expected single quoted string but got {quoted}"
            bad = [m for m in re.findall(r"\\(.)", quoted[1:-1]) if m not in _SINGLE_QUOTE_ESCAPES]
            if bad:
                return "", f"invalid string literal: invalid escape char \\{bad[0]}"
            name = re.sub(r"\\(.)", lambda m: _SINGLE_QUOTE_ESCAPES[m[1]], quoted[1:-1])
            problem = step(name)
            if problem:
                return "", problem
            close = next(tokens, None)
            if close is None:
                return "", "unexpected end of JSON path"
            if close != "]":
                return "", f"expected ] but got {close}"
        elif tok == ".":
            child = next(tokens, None)
            if child is None:
                return "", "unexpected end of JSON path"
            problem = step(child)
            if problem:
                return "", problem
        else:
            return "", f"expected [ or . but got: {tok}"
    return "".join(parts), ""


# ---- free expressions --------------------------------------------------------------------------


class Program:
    """A compiled free expression (webhooks' matchConditions)."""

    def __init__(self, expression: str, program: Any, variables: Sequence[str] = ()) -> None:
        self.expression = expression
        self._program = program
        self._unset = dict.fromkeys(variables)

    def evaluate(self, activation: dict[str, Any]) -> Any:
        """The expression's value as plain Python (bool, int, float, str, bytes, list, dict,
        None); raises `EvaluationError` with cel-go's wording of a runtime error. A declared
        variable missing from `activation` is null (oldObject on a create)."""
        ok, result = _eval(self._program, {**self._unset, **activation})
        if not ok:
            raise EvaluationError(str(result))
        return result


class EvaluationError(Exception):
    """A CEL runtime error (`no such key: foo`, `division by zero`, ...)."""


def compile_expression(
    expression: str, variables: Sequence[str], path: str
) -> tuple[Program | None, list[FieldError]]:
    """Compiles a free expression whose variables are `dyn` (webhooks' matchConditions:
    object, oldObject, request, authorizer, ...). The error is at `path`, kube's shape:
    `Invalid value: "<expression>": compilation failed: ERROR: <input>:1:1: ...`."""
    if not expression.strip():
        return None, [FieldError(path, "Required value")]
    env = _Env().get({name: _T.DYN for name in variables})
    try:
        program = env.compile(expression)
    except Exception as exc:
        return None, [_invalid(path, expression, f"compilation failed: {_compile_error_text(exc)}")]
    return Program(expression, program, variables), []


# ---- cost --------------------------------------------------------------------------------------
#
# cel-cpp (and so cel-expr-python) has no cost accounting, so kube's three limits are modelled
# here over the checked expression, which cel-expr-python hands out serialized
# (`Expression.serialize()`: a google.protobuf.Any of a cel.expr.CheckedExpr, decoded below
# from the wire format with the field numbers of cel/expr/syntax.proto):
#
# - estimated cost (CRD validation): cel-go's estimator in outline. Identifiers and field
#   selections cost 1, calls 1 plus their arguments, string functions a tenth of the string's
#   size per call, `in` on a list its size, a comprehension its range's size times its body.
#   Sizes come from the schema (maxLength, maxItems, maxProperties; without them, what fits in
#   kube's 3 MiB request limit), and a rule under lists and maps is multiplied by how many
#   times it can run (the schema's cardinality). Per rule over 10M is Forbidden; all rules of
#   a schema together over 100M is Forbidden.
# - runtime cost: the same walk with the actual sizes of `self` instead of the schema's bounds
#   (not cel-go's count of executed steps: short-circuits are not credited, so it is an upper
#   bound of it), checked before the rule runs against kube's per-call limit (1M) and charged
#   to kube's per-object budget (10M). cel-cpp cannot be interrupted mid-evaluation, so nothing
#   is time-based; a rule whose estimate is tiny is charged its static estimate without a walk.
# - cel-cpp's own guard, not configurable through cel-expr-python: an evaluation stops after
#   10,000 comprehension iterations in all ("Iteration budget exceeded"), reported as kube's
#   per-call limit. Kube's cost limit allows more (a plain `all` over ~250k items), so a rule
#   iterating over more than 9,999 items (or nested loops over more than ~99x99) fails here
#   where kube's would pass.


@dataclass
class _Ast:
    kind: str  # const, ident, select, call, list, map, comprehension
    name: str = ""  # identifier, selected field, function
    test_only: bool = False
    target: _Ast | None = None
    args: list[_Ast] = field(default_factory=list)
    size: int = 0  # a string or bytes literal's length
    iter_var: str = ""
    accu_var: str = ""
    id: int = 0


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[i]
        i += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, i


def _wire(buf: bytes) -> Iterator[tuple[int, Any]]:
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire_type = key >> 3, key & 7
        value: Any
        if wire_type == 0:
            value, i = _varint(buf, i)
        elif wire_type == 2:
            n, i = _varint(buf, i)
            value = buf[i : i + n]
            i += n
        elif wire_type == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire_type == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        yield number, value


def _decode_expr(buf: bytes) -> _Ast:
    fields = list(_wire(buf))
    expr_id = next((v for n, v in fields if n == 2 and isinstance(v, int)), 0)
    node = _decode_kind(fields)
    node.id = expr_id
    return node


def _decode_kind(fields: list[tuple[int, Any]]) -> _Ast:
    for number, value in fields:
        if number == 3:  # Constant
            size = 0
            for n, v in _wire(value):
                if n in (6, 7):  # string_value, bytes_value
                    size = len(v)
            return _Ast("const", size=size)
        if number == 4:  # Ident
            name = next((v.decode() for n, v in _wire(value) if n == 1), "")
            return _Ast("ident", name=name)
        if number == 5:  # Select
            out = _Ast("select")
            for n, v in _wire(value):
                if n == 1:
                    out.target = _decode_expr(v)
                elif n == 2:
                    out.name = v.decode()
                elif n == 3:
                    out.test_only = bool(v)
            return out
        if number == 6:  # Call
            out = _Ast("call")
            for n, v in _wire(value):
                if n == 1:
                    out.target = _decode_expr(v)
                elif n == 2:
                    out.name = v.decode()
                elif n == 3:
                    out.args.append(_decode_expr(v))
            return out
        if number == 7:  # CreateList
            return _Ast("list", args=[_decode_expr(v) for n, v in _wire(value) if n == 1])
        if number == 8:  # CreateStruct: its entries' keys and values
            out = _Ast("map")
            for n, entry in _wire(value):
                if n == 2:
                    out.args.extend(_decode_expr(v) for m, v in _wire(entry) if m in (3, 4))
            return out
        if number == 9:  # Comprehension: range, init, condition, step, result
            out = _Ast("comprehension")
            parts: dict[int, _Ast] = {}
            for n, v in _wire(value):
                if n == 1:
                    out.iter_var = v.decode()
                elif n == 3:
                    out.accu_var = v.decode()
                elif n in (2, 4, 5, 6, 7):
                    parts[n] = _decode_expr(v)
            out.args = [parts.get(n, _Ast("const")) for n in (2, 4, 5, 6, 7)]
            return out
    return _Ast("const")


def _checked_ast(program: Any) -> _Ast:
    return _checked(program)[0]


def _checked(program: Any) -> tuple[_Ast, dict[int, int]]:
    """The checked expression and its source positions (expression id -> offset)."""
    any_fields = dict(_wire(program.serialize()))
    checked = dict(_wire(any_fields.get(2, b"")))
    expr_field = 4 if any_fields.get(1, b"").endswith(b"CheckedExpr") else 2
    positions: dict[int, int] = {}
    source_info = checked.get(5 if expr_field == 4 else 3, b"")
    for n, entry in _wire(source_info):
        if n == 4:  # positions: map<int64, int32>
            kv = dict(_wire(entry))
            positions[int(kv.get(1, 0))] = int(kv.get(2, 0))
    return _decode_expr(checked.get(expr_field, b"")), positions


# What of a resource's root CEL sees (kube's WithTypeAndObjectMeta): apiVersion, kind and
# only the name and generateName of its metadata.
_ROOT_FIELDS = {
    "apiVersion": {"type": "string"},
    "kind": {"type": "string"},
    "metadata": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "generateName": {"type": "string"}},
    },
}


def _with_root_fields(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    props = dict(schema.get("properties") or {})
    props.update(_ROOT_FIELDS)
    return {**schema, "properties": props}


def _undefined_fields(ast: _Ast, schema: Any) -> list[tuple[int, str]]:
    """Field selections of `self` that its object schema does not declare (kube's typed
    objects make them compile errors: `undefined field 'foo'`). (expression id, field)."""
    found: list[tuple[int, str]] = []
    scopes: dict[str, Any] = {SELF: schema}

    def closed(s: Any) -> bool:
        return (
            isinstance(s, dict)
            and s.get("type") == "object"
            and isinstance(s.get("properties"), dict)
            and not s.get("additionalProperties")
            and not s.get("x-kubernetes-preserve-unknown-fields")
        )

    def resolve(node: _Ast) -> Any:
        if node.kind == "ident":
            return scopes.get(node.name)
        if node.kind == "select" and node.target is not None:
            base = resolve(node.target)
            if not isinstance(base, dict):
                return None
            props = _escaped_properties(base) if isinstance(base.get("properties"), dict) else None
            if closed(base) and isinstance(props, dict):
                if node.name not in props:
                    found.append((node.id, node.name))
                    return None
                sub = props[node.name]
                if isinstance(sub, dict) and sub.get("x-kubernetes-embedded-resource"):
                    return _with_root_fields(sub)
                return sub
            if isinstance(props, dict) and node.name in props:
                return props[node.name]
            additional = base.get("additionalProperties")
            return additional if isinstance(additional, dict) else None
        if node.kind == "call" and node.name == "_[_]" and len(node.args) == 2:
            base = resolve(node.args[0])
            resolve(node.args[1])
            return _element_schema(base)
        if node.kind == "comprehension":
            range_, init, condition, step, result = node.args
            base = resolve(range_)
            resolve(init)
            saved = dict(scopes)
            scopes.pop(node.accu_var, None)
            if isinstance(base, dict) and base.get("type") == "array":
                scopes[node.iter_var] = _element_schema(base)
            else:
                scopes.pop(node.iter_var, None)
            for part in (condition, step, result):
                resolve(part)
            scopes.clear()
            scopes.update(saved)
            return None
        if node.target is not None:
            resolve(node.target)
        for arg in node.args:
            resolve(arg)
        return None

    resolve(ast)
    return found


def _element_schema(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return None
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            return schema[key]
    return None


def _located(source: str, offset: int, message: str) -> str:
    """A compile error as cel-go prints it: the location, the line and a caret."""
    line_no = source.count("\n", 0, offset) + 1
    start = source.rfind("\n", 0, offset) + 1
    end = source.find("\n", offset)
    line = source[start : end if end >= 0 else len(source)]
    column = offset - start + 1
    return f"ERROR: <input>:{line_no}:{column}: {message}\n | {line}\n | {'.' * (column - 1)}^"


# Unbounded sizes, as kube's estimates from the 3 MiB request limit: a string without
# maxLength, and a list or map without maxItems/maxProperties (the smallest element, `""` or
# `{}` or a digit, plus its comma).
_UNBOUNDED_STRING = MAX_REQUEST_SIZE_BYTES - 2


class _Sized:
    """What the estimator knows of a value: its schema (or its actual value) and its size."""

    __slots__ = ("schema", "size", "value")

    def __init__(self, size: float, schema: Any = None, value: Any = None) -> None:
        self.size = size
        self.schema = schema
        self.value = value


def _schema_size(schema: Any) -> float:
    if not isinstance(schema, dict):
        return 1.0
    kind = schema.get("type")
    if kind == "string" or schema.get("x-kubernetes-int-or-string"):
        bound = schema.get("maxLength")
        return float(bound) if isinstance(bound, int) else float(_UNBOUNDED_STRING)
    if kind == "array":
        bound = schema.get("maxItems")
        return float(bound) if isinstance(bound, int) else _unbounded_elements(schema)
    if kind == "object" or schema.get("x-kubernetes-preserve-unknown-fields"):
        bound = schema.get("maxProperties")
        if isinstance(bound, int):
            return float(bound)
        if schema.get("properties") and not schema.get("additionalProperties"):
            return float(len(schema["properties"]))
        return _unbounded_elements(schema)
    return 1.0


def _min_serialized(schema: Any) -> int:
    """The fewest JSON bytes a value of this schema takes (`""`, `0`, `true`, `{}`, `[]`)."""
    if not isinstance(schema, dict):
        return 1
    kind = schema.get("type")
    return {"string": 2, "integer": 1, "number": 1, "boolean": 4}.get(str(kind), 2)


def _unbounded_elements(schema: dict[str, Any]) -> float:
    """How many items (or entries) of this list (or map) fit in kube's 3 MiB request."""
    if schema.get("type") == "array":
        element = _min_serialized(schema.get("items"))
    else:  # an entry: "":<value>
        element = 3 + _min_serialized(schema.get("additionalProperties"))
    return float((MAX_REQUEST_SIZE_BYTES - 2) // (element + 1))


def _value_size(value: Any) -> float:
    if isinstance(value, str | bytes | list | dict):
        return float(len(value))
    return 1.0


def _sized_schema(schema: Any) -> _Sized:
    return _Sized(_schema_size(schema), schema=schema)


def _sized_value(value: Any) -> _Sized:
    return _Sized(_value_size(value), value=value, schema=_ACTUAL)


_ACTUAL = object()  # marks a _Sized that carries an actual value
_UNKNOWN = _Sized(1.0)


def _select(base: _Sized, name: str) -> _Sized:
    if base.schema is _ACTUAL:
        value = base.value.get(name) if isinstance(base.value, dict) else None
        return _sized_value(value)
    schema = base.schema
    if isinstance(schema, dict):
        props = _escaped_properties(schema)
        if name in props:
            return _sized_schema(props[name])
        if isinstance(schema.get("additionalProperties"), dict):
            return _sized_schema(schema["additionalProperties"])
        if name in ("apiVersion", "kind"):
            return _Sized(float(_UNBOUNDED_STRING))
    return _UNKNOWN


def _element(base: _Sized) -> _Sized:
    """An element of a list (or a value of a map): the largest one for actual values."""
    if base.schema is _ACTUAL:
        items = base.value.values() if isinstance(base.value, dict) else base.value
        if isinstance(items, list) or isinstance(base.value, dict):
            largest = max(items, key=_value_size, default=None)
            return _sized_value(largest)
        return _UNKNOWN
    schema = base.schema
    if isinstance(schema, dict):
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), dict):
                return _sized_schema(schema[key])
        if schema.get("type") == "object" and schema.get("properties"):
            return _Sized(float(_UNBOUNDED_STRING))
    return _UNKNOWN


def _iteration_item(base: _Sized) -> _Sized:
    """What a comprehension's variable ranges over: list elements, map keys."""
    if base.schema is _ACTUAL:
        if isinstance(base.value, dict):
            return _Sized(float(max((len(k) for k in base.value), default=0)))
        return _element(base)
    schema = base.schema
    if isinstance(schema, dict) and schema.get("type") == "object":
        return _Sized(float(_UNBOUNDED_STRING))
    return _element(base)


# cel-go's per-call cost of string functions: a tenth of a traversal per byte.
_STRING_FUNCTIONS = frozenset(
    {
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "lowerAscii",
        "upperAscii",
        "split",
        "replace",
        "indexOf",
        "lastIndexOf",
        "trim",
        "substring",
        "join",
        "format",
        "quote",
        "reverse",
        "url",
        "isURL",
        "quantity",
        "isQuantity",
        "string",
        "_+_",
    }
)
# functions whose result is about as large as their first operand
_SIZE_PRESERVING = frozenset(
    {
        "lowerAscii",
        "upperAscii",
        "replace",
        "trim",
        "substring",
        "join",
        "format",
        "quote",
        "reverse",
        "split",
        "string",
        "sort",
        "distinct",
        "slice",
        "flatten",
    }
)
_LIST_FUNCTIONS = frozenset(
    {"isSorted", "sum", "min", "max", "sort", "distinct", "slice", "flatten", "sets.contains"}
)
_COMPARISONS = frozenset({"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"})
_FREE_CALLS = frozenset({"_&&_", "_||_", "!_", "_?_:_"})


def _is_map(sized: _Sized) -> bool:
    if sized.schema is _ACTUAL:
        return isinstance(sized.value, dict)
    return isinstance(sized.schema, dict) and sized.schema.get("type") == "object"


class _Estimator:
    def __init__(self, variables: dict[str, _Sized]) -> None:
        self.variables = dict(variables)
        self.accumulators: set[str] = set()

    def cost(self, node: _Ast) -> tuple[float, _Sized]:
        """(cost, size of the result)."""
        if node.kind == "const":
            return 0.0, _Sized(float(node.size))
        if node.kind == "ident":
            return 1.0, self.variables.get(node.name, _UNKNOWN)
        if node.kind == "select":
            assert node.target is not None
            base_cost, base = self.cost(node.target)
            return base_cost + 1.0, _select(base, node.name)
        if node.kind in ("list", "map"):
            total = 0.0
            largest = 0.0
            for arg in node.args:
                c, sized = self.cost(arg)
                total += c
                largest = max(largest, sized.size)
            return total + 10.0, _Sized(float(len(node.args)))
        if node.kind == "comprehension":
            return self.comprehension(node)
        return self.call(node)

    def call(self, node: _Ast) -> tuple[float, _Sized]:
        name = node.name
        # logical operators and the comprehensions' internal helpers cost only their operands
        total = 0.0 if name in _FREE_CALLS or name.startswith("@") else 1.0
        operands: list[_Sized] = []
        if node.target is not None:
            c, sized = self.cost(node.target)
            total += c
            operands.append(sized)
        for arg in node.args:
            c, sized = self.cost(arg)
            total += c
            operands.append(sized)
        if name == "_+_" and node.args and node.args[0].name in self.accumulators:
            pass  # a comprehension's list append: cel-go appends in place
        elif name in _COMPARISONS and operands:
            total += math.ceil(0.1 * min(o.size for o in operands))
        elif name in _STRING_FUNCTIONS and operands:
            total += math.ceil(0.1 * max(o.size for o in operands))
            if name == "matches" and len(operands) > 1:
                total += math.ceil(0.1 * operands[0].size * max(operands[1].size, 1.0))
        elif name == "@in" and len(operands) > 1:
            if not _is_map(operands[1]):
                total += operands[1].size
        elif name in _LIST_FUNCTIONS and operands:
            total += max(o.size for o in operands)
        if name == "_[_]" and operands:
            return total, _element(operands[0])
        if name == "_+_":
            return total, _Sized(sum(o.size for o in operands))
        if name in _SIZE_PRESERVING and operands:
            return total, _Sized(operands[0].size)
        if name in ("dyn", "optional.of", "value", "orValue") and operands:
            return total, operands[0] if name != "orValue" else _Sized(
                max(o.size for o in operands)
            )
        return total, _Sized(1.0)

    def comprehension(self, node: _Ast) -> tuple[float, _Sized]:
        range_, init, condition, step, result = node.args
        range_cost, range_sized = self.cost(range_)
        init_cost, _ = self.cost(init)
        saved = dict(self.variables)
        self.variables[node.iter_var] = _iteration_item(range_sized)
        self.variables[node.accu_var] = _Sized(range_sized.size)
        self.accumulators.add(node.accu_var)
        condition_cost, _ = self.cost(condition)
        step_cost, _ = self.cost(step)
        result_cost, _ = self.cost(result)
        self.accumulators.discard(node.accu_var)
        self.variables = saved
        body = range_sized.size * (condition_cost + step_cost)
        return range_cost + init_cost + body + result_cost, _Sized(range_sized.size)


def _cost(ast: _Ast, schema: dict[str, Any]) -> float:
    """The estimated cost of a rule at a schema level (one evaluation)."""
    self_size = _sized_schema(schema)
    estimator = _Estimator({SELF: self_size, OLD_SELF: self_size, _OLD_VALUE: self_size})
    return estimator.cost(ast)[0]


def _actual_cost(ast: _Ast, value: Any, old: Any) -> float:
    """The same estimate over the actual values (kube's runtime cost, see above)."""
    estimator = _Estimator(
        {SELF: _sized_value(value), OLD_SELF: _sized_value(old), _OLD_VALUE: _sized_value(old)}
    )
    return estimator.cost(ast)[0]
