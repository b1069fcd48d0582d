"""Kubernetes label and field selectors: parsing, validation and matching.

Label selectors use the string syntax of `kubectl -l` (`app=web,tier!=db,env in (a,b),!legacy`)
or the structured `LabelSelector` message (matchLabels plus matchExpressions); field selectors
use `spec.nodeName=n1,status.phase!=Running` (only `=`, `==` and `!=`). Parsed selectors are
immutable and cheap to match, so the apiserver's watch cache can test every event against
every watcher. Pure functions, no I/O; errors are `SelectorError` (a ValueError) naming the
problem. The label key/value validators live here too because both the apiserver's validation
and the selector parser need them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tinykube.v1 import meta_pb2

# \Z, not $: $ also matches before a trailing newline, which would let "web\n" through.
_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
)

QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


class SelectorError(ValueError):
    """A selector string or message that cannot be parsed; the text says what is wrong."""


def validate_label_key(key: str) -> list[str]:
    """Problems with a label (or annotation) key, a qualified name `[prefix/]name`; [] if valid."""
    errors: list[str] = []
    if key.count("/") > 1:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character, with an optional DNS subdomain "
            "prefix and '/' (e.g. 'example.com/MyName')"
        ]
    prefix, _, name = key.rpartition("/")
    if "/" in key:
        if not prefix:
            errors.append("prefix part must be non-empty")
        elif len(prefix) > 253:
            errors.append("prefix part must be no more than 253 characters")
        elif not _DNS1123_SUBDOMAIN_RE.match(prefix):
            errors.append(f"prefix part {DNS1123_SUBDOMAIN_MSG}")
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    elif not _NAME_RE.match(name):
        errors.append(QUALIFIED_NAME_MSG)
    return errors


def validate_label_value(value: str) -> list[str]:
    """Problems with a label value (empty is allowed); [] if valid."""
    if not value:
        return []
    errors: list[str] = []
    if len(value) > 63:
        errors.append("must be no more than 63 characters")
    if not _NAME_RE.match(value):
        errors.append(LABEL_VALUE_MSG)
    return errors


# ---------------------------------------------------------------------------------------------
# Label selectors

EQUALS = "="
NOT_EQUALS = "!="
IN = "in"
NOT_IN = "notin"
EXISTS = "exists"
DOES_NOT_EXIST = "!"


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector: `key op values`."""

    key: str
    operator: str  # one of the module constants above
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if op in (EQUALS, IN):
            return value is not None and value in self.values
        # != and notin also match objects without the label, as in Kubernetes.
        return value is None or value not in self.values

    def __str__(self) -> str:
        if self.operator == EXISTS:
            return self.key
        if self.operator == DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.operator in (EQUALS, NOT_EQUALS):
            return f"{self.key}{self.operator}{next(iter(self.values))}"
        return f"{self.key} {self.operator} ({','.join(sorted(self.values))})"


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    def equality_value(self, key: str) -> str | None:
        """The value `key` must equal for this selector to match, if a term pins it."""
        for r in self.requirements:
            if r.key == key and r.operator in (EQUALS, IN) and len(r.values) == 1:
                return next(iter(r.values))
        return None


EVERYTHING = LabelSelector()

_TOKEN_RE = re.compile(r"\s*(==|!=|=|!|\(|\)|,|[^\s=!(),]+)")


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            break  # only trailing whitespace remains
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


def _check_key(key: str, text: str) -> None:
    problems = validate_label_key(key)
    if problems:
        raise SelectorError(f'invalid label selector "{text}": key "{key}": {"; ".join(problems)}')


def _check_value(value: str, text: str) -> None:
    problems = validate_label_value(value)
    if problems:
        raise SelectorError(
            f'invalid label selector "{text}": value "{value}": {"; ".join(problems)}'
        )


def parse_label_selector(text: str) -> LabelSelector:
    """Parse `kubectl -l` syntax. Raises SelectorError naming the problem."""
    tokens = _tokens(text)
    if not tokens:
        return EVERYTHING
    reqs: list[Requirement] = []
    i = 0
    n = len(tokens)

    def peek() -> str | None:
        return tokens[i] if i < n else None

    def fail(expected: str) -> SelectorError:
        found = peek()
        shown = f"'{found}'" if found is not None else "end of string"
        return SelectorError(
            f'invalid label selector "{text}": found {shown}, expected: {expected}'
        )

    while True:
        if peek() == "!":
            i += 1
            key = peek()
            if key is None or key in ("=", "==", "!=", "!", "(", ")", ","):
                raise fail("identifier after '!'")
            i += 1
            _check_key(key, text)
            reqs.append(Requirement(key, DOES_NOT_EXIST))
        else:
            key = peek()
            if key is None or key in ("=", "==", "!=", "!", "(", ")", ","):
                raise fail("identifier or '!'")
            i += 1
            _check_key(key, text)
            op = peek()
            if op is None or op == ",":
                reqs.append(Requirement(key, EXISTS))
            elif op in ("=", "==", "!="):
                i += 1
                value = peek()
                if value is None or value in (",",):
                    value = ""  # `a=` selects the empty value, as kubectl does
                elif value in ("=", "==", "!=", "!", "(", ")"):
                    raise fail("a value")
                else:
                    i += 1
                _check_value(value, text)
                reqs.append(
                    Requirement(key, NOT_EQUALS if op == "!=" else EQUALS, frozenset({value}))
                )
            elif op in ("in", "notin"):
                i += 1
                if peek() != "(":
                    raise fail("'(' after 'in' or 'notin'")
                i += 1
                values: list[str] = []
                expect_value = True
                while True:
                    tok = peek()
                    if tok is None:
                        raise fail("')'")
                    if tok == ")":
                        if expect_value and values:
                            values.append("")  # `(a,)` ends with an empty value
                        i += 1
                        break
                    if tok == ",":
                        if expect_value:
                            values.append("")
                        expect_value = True
                        i += 1
                        continue
                    if tok in ("=", "==", "!=", "!", "("):
                        raise fail("a value, ',' or ')'")
                    if not expect_value:
                        raise fail("',' or ')'")
                    values.append(tok)
                    expect_value = False
                    i += 1
                if not values:
                    raise SelectorError(
                        f"invalid label selector \"{text}\": for 'in', 'notin' operators, "
                        "values set can't be empty"
                    )
                for v in values:
                    _check_value(v, text)
                reqs.append(Requirement(key, IN if op == "in" else NOT_IN, frozenset(values)))
            else:
                raise fail("'=', '==', '!=', 'in', 'notin' or ','")
        tok = peek()
        if tok is None:
            break
        if tok != ",":
            raise fail("','")
        i += 1
        if peek() is None:
            raise fail("identifier after ','")
    return LabelSelector(tuple(reqs))


_PROTO_OPERATORS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def label_selector_problems(selector: meta_pb2.LabelSelector, path: str) -> list[tuple[str, str]]:
    """(field, message) pairs for every problem in a LabelSelector message."""
    problems: list[tuple[str, str]] = []
    for key, value in sorted(selector.matchLabels.items()):
        for p in validate_label_key(key):
            problems.append((f"{path}.matchLabels", f'Invalid value: "{key}": {p}'))
        for p in validate_label_value(value):
            problems.append((f"{path}.matchLabels", f'Invalid value: "{value}": {p}'))
    for i, expr in enumerate(selector.matchExpressions):
        where = f"{path}.matchExpressions[{i}]"
        for p in validate_label_key(expr.key):
            problems.append((f"{where}.key", f'Invalid value: "{expr.key}": {p}'))
        if expr.operator not in _PROTO_OPERATORS:
            problems.append(
                (
                    f"{where}.operator",
                    f'Unsupported value: "{expr.operator}": supported values: '
                    '"In", "NotIn", "Exists", "DoesNotExist"',
                )
            )
        elif expr.operator in ("In", "NotIn") and not expr.values:
            problems.append(
                (
                    f"{where}.values",
                    "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                )
            )
        elif expr.operator in ("Exists", "DoesNotExist") and expr.values:
            problems.append(
                (
                    f"{where}.values",
                    "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
            )
        for v in expr.values:
            for p in validate_label_value(v):
                problems.append((f"{where}.values", f'Invalid value: "{v}": {p}'))
    return problems


def from_proto(selector: meta_pb2.LabelSelector) -> LabelSelector:
    """The selector a LabelSelector message stands for; an empty message selects everything.

    Raises SelectorError for an unknown operator or a bad key/value.
    """
    problems = label_selector_problems(selector, "selector")
    if problems:
        raise SelectorError("; ".join(f"{f}: {m}" for f, m in problems))
    reqs = [Requirement(k, EQUALS, frozenset({v})) for k, v in sorted(selector.matchLabels.items())]
    for expr in selector.matchExpressions:
        reqs.append(Requirement(expr.key, _PROTO_OPERATORS[expr.operator], frozenset(expr.values)))
    return LabelSelector(tuple(reqs))


# ---------------------------------------------------------------------------------------------
# Field selectors


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    operator: str  # EQUALS or NOT_EQUALS
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        actual = fields.get(self.field, "")
        return (actual == self.value) == (self.operator == EQUALS)

    def __str__(self) -> str:
        return f"{self.field}{self.operator}{self.value}"


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of `field=value` / `field!=value` terms over an object's selectable fields."""

    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(r.field for r in self.requirements)

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(r.matches(fields) for r in self.requirements)

    def equality_value(self, field: str) -> str | None:
        """The value `field` must equal for this selector to match, if a term pins it."""
        for r in self.requirements:
            if r.field == field and r.operator == EQUALS:
                return r.value
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


FIELD_EVERYTHING = FieldSelector()


def _split_unescaped(text: str, sep: str) -> list[str]:
    """Split on `sep` not preceded by a backslash escape; escapes are kept for the next step."""
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            current.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts


def _unescape(value: str, text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise SelectorError(
                    f'invalid field selector "{text}": invalid escape sequence in "{value}"'
                )
            out.append(value[i + 1])
            i += 2
            continue
        if ch in ",=":
            raise SelectorError(
                f'invalid field selector "{text}": unescaped "{ch}" in value "{value}"'
            )
        out.append(ch)
        i += 1
    return "".join(out)


def parse_field_selector(text: str) -> FieldSelector:
    """Parse `spec.nodeName=n1,status.phase!=Running`. Raises SelectorError naming the problem."""
    if not text.strip():
        return FIELD_EVERYTHING
    reqs: list[FieldRequirement] = []
    for term in _split_unescaped(text, ","):
        term = term.strip()
        if not term:
            raise SelectorError(f'invalid field selector "{text}": empty term')
        for op_text, op in (("!=", NOT_EQUALS), ("==", EQUALS), ("=", EQUALS)):
            idx = term.find(op_text)
            if idx >= 0:
                operator = op
                field = term[:idx].strip()
                value = term[idx + len(op_text) :]
                break
        else:
            raise SelectorError(
                f'invalid field selector "{text}": term "{term}" has no operator; '
                "expected 'field=value', 'field==value' or 'field!=value'"
            )
        if not field:
            raise SelectorError(f'invalid field selector "{text}": term "{term}" has no field')
        reqs.append(FieldRequirement(field, operator, _unescape(value, text)))
    return FieldSelector(tuple(reqs))


def check_fields(selector: FieldSelector, supported: Sequence[str], kind: str) -> None:
    """Raise SelectorError if the selector uses a field the kind does not support."""
    for r in selector.requirements:
        if r.field not in supported:
            allowed = ", ".join(f'"{f}"' for f in supported)
            raise SelectorError(
                f'field label not supported: "{r.field}" is not a known field selector for '
                f"{kind}: only {allowed}"
            )
