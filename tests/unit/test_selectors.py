"""Label and field selector parsing and matching, table-driven."""

from __future__ import annotations

import pytest

from tinykube.selectors import (
    DOES_NOT_EXIST,
    EQUALS,
    EXISTS,
    IN,
    NOT_EQUALS,
    NOT_IN,
    Requirement,
    SelectorError,
    check_fields,
    from_proto,
    parse_field_selector,
    parse_label_selector,
    validate_label_key,
    validate_label_value,
)
from tinykube.v1 import meta_pb2

LABELS = {"app": "web", "tier": "frontend", "env": "prod", "empty": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("   ", ()),
        ("app=web", (Requirement("app", EQUALS, frozenset({"web"})),)),
        ("app==web", (Requirement("app", EQUALS, frozenset({"web"})),)),
        ("app!=web", (Requirement("app", NOT_EQUALS, frozenset({"web"})),)),
        ("app", (Requirement("app", EXISTS),)),
        ("!app", (Requirement("app", DOES_NOT_EXIST),)),
        ("env in (a,b)", (Requirement("env", IN, frozenset({"a", "b"})),)),
        ("env notin (a)", (Requirement("env", NOT_IN, frozenset({"a"})),)),
        ("env in ( a , b )", (Requirement("env", IN, frozenset({"a", "b"})),)),
        ("a=", (Requirement("a", EQUALS, frozenset({""})),)),
        (
            "example.com/app=web, !legacy",
            (
                Requirement("example.com/app", EQUALS, frozenset({"web"})),
                Requirement("legacy", DOES_NOT_EXIST),
            ),
        ),
    ],
)
def test_parse_label_selector(text: str, expected: tuple[Requirement, ...]) -> None:
    assert parse_label_selector(text).requirements == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("app=web,", "identifier after ','"),
        ("=web", "expected: identifier"),
        ("app in a,b", "'(' after 'in' or 'notin'"),
        ("app in ()", "values set can't be empty"),
        ("app in (a", "expected: ')'"),
        ("app web", "expected: '=', '==', '!=', 'in', 'notin' or ','"),
        ("app=we b", "expected: ','"),
        ("bad key!=x", "expected"),
        ("-app=web", 'key "-app"'),
        ("app=-web", 'value "-web"'),
        ("a/b/c=d", 'key "a/b/c"'),
        ("!", "identifier after '!'"),
        ("x" * 64 + "=a", "no more than 63 characters"),
    ],
)
def test_parse_label_selector_errors_name_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_label_selector(text)
    assert fragment in str(info.value)
    assert text.strip() in str(info.value) or len(text) > 60


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app=db", False),
        ("app!=db", True),
        ("missing!=x", True),  # != matches objects without the label, as in Kubernetes
        ("missing notin (x)", True),
        ("missing in (x)", False),
        ("app in (db,web)", True),
        ("app notin (db,web)", False),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("empty=", True),
        ("empty", True),
        ("app=web,tier=frontend,env in (prod,dev)", True),
        ("app=web,tier=backend", False),
    ],
)
def test_label_selector_matches(text: str, matches: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is matches


def test_empty_selector_is_empty_and_round_trips() -> None:
    assert parse_label_selector("").empty
    sel = parse_label_selector("app=web,!legacy,env in (b,a)")
    assert not sel.empty
    assert str(sel) == "app=web,!legacy,env in (a,b)"
    assert parse_label_selector(str(sel)) == sel
    assert sel.equality_value("app") == "web"
    assert sel.equality_value("env") is None


def test_from_proto_match_labels_and_expressions() -> None:
    msg = meta_pb2.LabelSelector(
        matchLabels={"app": "web"},
        matchExpressions=[
            meta_pb2.LabelSelectorRequirement(key="env", operator="In", values=["prod", "dev"]),
            meta_pb2.LabelSelectorRequirement(key="tier", operator="NotIn", values=["db"]),
            meta_pb2.LabelSelectorRequirement(key="app", operator="Exists"),
            meta_pb2.LabelSelectorRequirement(key="legacy", operator="DoesNotExist"),
        ],
    )
    sel = from_proto(msg)
    assert sel.matches(LABELS)
    assert not sel.matches({**LABELS, "legacy": "1"})
    assert not sel.matches({**LABELS, "env": "staging"})
    assert from_proto(meta_pb2.LabelSelector()).empty


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        (meta_pb2.LabelSelectorRequirement(key="a", operator="Gt", values=["1"]), "Unsupported"),
        (meta_pb2.LabelSelectorRequirement(key="a", operator="In"), "Required value"),
        (meta_pb2.LabelSelectorRequirement(key="a", operator="Exists", values=["x"]), "Forbidden"),
        (meta_pb2.LabelSelectorRequirement(key="-a", operator="Exists"), "Invalid value"),
    ],
)
def test_from_proto_rejects_bad_expressions(
    expr: meta_pb2.LabelSelectorRequirement, fragment: str
) -> None:
    with pytest.raises(SelectorError) as info:
        from_proto(meta_pb2.LabelSelector(matchExpressions=[expr]))
    assert fragment in str(info.value)
    assert "selector.matchExpressions[0]" in str(info.value)


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("app", True),
        ("example.com/app", True),
        ("a.b_c-d", True),
        ("", False),
        ("-a", False),
        ("a/", False),
        ("/a", False),
        ("Example.com/app", False),
        ("a" * 63, True),
        ("a" * 64, False),
    ],
)
def test_validate_label_key(key: str, ok: bool) -> None:
    assert (validate_label_key(key) == []) is ok


@pytest.mark.parametrize(
    ("value", "ok"), [("", True), ("web", True), ("a_b.c-d", True), ("-a", False), ("a b", False)]
)
def test_validate_label_value(value: str, ok: bool) -> None:
    assert (validate_label_value(value) == []) is ok


FIELDS = {"spec.nodeName": "n1", "status.phase": "Running", "metadata.name": "web"}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("", True),
        ("spec.nodeName=n1", True),
        ("spec.nodeName==n1", True),
        ("spec.nodeName!=n1", False),
        ("spec.nodeName=", False),
        ("spec.nodeName=n1,status.phase!=Running", False),
        ("spec.nodeName=n1,status.phase!=Pending", True),
        ("spec.nodeName=n2", False),
        ("metadata.name=web, status.phase=Running", True),
    ],
)
def test_field_selector_matches(text: str, matches: bool) -> None:
    assert parse_field_selector(text).matches(FIELDS) is matches


def test_field_selector_unassigned_pods() -> None:
    sel = parse_field_selector("spec.nodeName=")
    assert sel.matches({"spec.nodeName": ""})
    assert not sel.matches({"spec.nodeName": "n1"})
    assert sel.equality_value("spec.nodeName") == ""
    assert sel.fields == frozenset({"spec.nodeName"})


def test_field_selector_escapes() -> None:
    sel = parse_field_selector(r"metadata.name=a\,b\=c")
    assert sel.matches({"metadata.name": "a,b=c"})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("spec.nodeName", "has no operator"),
        ("=n1", "has no field"),
        ("spec.nodeName=n1,", "empty term"),
        ("spec.nodeName in (a)", "has no operator"),
        (r"metadata.name=a\x", "invalid escape"),
    ],
)
def test_field_selector_errors(text: str, fragment: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_field_selector(text)
    assert fragment in str(info.value)


def test_check_fields_names_supported_fields() -> None:
    sel = parse_field_selector("spec.foo=x")
    with pytest.raises(SelectorError) as info:
        check_fields(sel, ("metadata.name", "spec.nodeName"), "pods")
    assert '"spec.foo" is not a known field selector for pods' in str(info.value)
    assert '"spec.nodeName"' in str(info.value)
    check_fields(parse_field_selector("spec.nodeName=a"), ("spec.nodeName",), "pods")
