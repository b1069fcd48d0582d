"""CEL rules of CRDs (apiserver/crd/cel.py): compilation errors, evaluation with kube's
messages, transition rules, messageExpression, reason, fieldPath, list and map `self`,
cost limits, and free expressions (webhooks' matchConditions)."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.crd.cel import (
    EvaluationError,
    compile_expression,
    compile_rules,
    escape_property,
    is_cel_identifier,
)

ROOT = "spec.validation.openAPIV3Schema"


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


def with_rules(schema: dict[str, Any], *rules: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "x-kubernetes-validations": list(rules)}


INT = {"type": "integer"}
STR = {"type": "string"}
NUM = {"type": "number"}


def messages(schema: dict[str, Any], new: Any, old: Any = None) -> list[str]:
    rules, errs = compile_rules(schema, ROOT)
    assert errs == [], [str(e) for e in errs]
    return [str(e) for e in rules.validate(new, old)]


def compile_errors(schema: dict[str, Any]) -> list[str]:
    return [str(e) for e in compile_rules(schema, ROOT)[1]]


SPEC = with_rules(
    obj(replicas=INT, maxReplicas=INT, name=STR, ratio=NUM),
    {"rule": "self.replicas <= self.maxReplicas", "message": "replicas must be <= maxReplicas"},
)


@pytest.mark.parametrize(
    ("rule", "spec", "want"),
    [
        ("self.replicas <= self.maxReplicas", {"replicas": 1, "maxReplicas": 3}, []),
        (
            "self.replicas <= self.maxReplicas",
            {"replicas": 5, "maxReplicas": 3},
            ['spec: Invalid value: "object": failed rule: self.replicas <= self.maxReplicas'],
        ),
        ("self.name.startsWith('web-')", {"name": "web-1"}, []),
        ("self.name.endsWith('-1') && self.name.contains('eb')", {"name": "web-1"}, []),
        ("self.name.matches('^[a-z]+-[0-9]+$')", {"name": "web-1"}, []),
        (
            "self.name.matches('^[a-z]+$')",
            {"name": "web-1"},
            ["spec: Invalid value: \"object\": failed rule: self.name.matches('^[a-z]+$')"],
        ),
        ("has(self.name) || !has(self.replicas)", {}, []),
        ("size(self.name) == 5 && self.name.size() == 5", {"name": "web-1"}, []),
        ("self.ratio > 0.5", {"ratio": 1}, []),  # a JSON 1 of a `number` schema is a double
        ("self.ratio + 0.5 == 1.5", {"ratio": 1}, []),
        (
            "self.name == 'x'",
            {"replicas": 1},
            [
                'spec: Invalid value: "object": no such key: name evaluating rule: '
                "self.name == 'x'"
            ],
        ),
        ("self.name.lowerAscii() == 'abc'", {"name": "ABC"}, []),
        ("self.name.upperAscii() == 'ABC'", {"name": "abc"}, []),
        ("self.name.split('-') == ['a', 'b']", {"name": "a-b"}, []),
        ("['a', 'b'].join('-') == self.name", {"name": "a-b"}, []),
        ("self.name.indexOf('b') == 2", {"name": "a-b"}, []),
    ],
)
def test_rules_on_an_object(rule: str, spec: dict[str, Any], want: list[str]) -> None:
    schema = obj(
        spec=with_rules(obj(replicas=INT, maxReplicas=INT, name=STR, ratio=NUM), {"rule": rule})
    )
    assert messages(schema, {"spec": spec}) == want


def test_message_replaces_the_rule_in_the_error() -> None:
    assert messages(obj(spec=SPEC), {"spec": {"replicas": 5, "maxReplicas": 3}}) == [
        'spec: Invalid value: "object": replicas must be <= maxReplicas'
    ]


def test_a_rule_at_the_root_is_reported_at_kubes_nil_path() -> None:
    schema = with_rules(obj(spec=obj(a=INT)), {"rule": "has(self.spec)", "message": "need spec"})
    assert messages(schema, {"apiVersion": "x/v1", "kind": "X"}) == [
        '<nil>: Invalid value: "object": need spec'
    ]


@pytest.mark.parametrize(
    ("schema", "value", "want"),
    [
        # self is the value at the rule's level: a string, an int, a list, a map
        (with_rules(STR, {"rule": "self.size() <= 3"}), "abcd", "failed rule: self.size() <= 3"),
        (with_rules(INT, {"rule": "self % 2 == 0"}), 3, "failed rule: self % 2 == 0"),
        (
            with_rules({"type": "array", "items": INT}, {"rule": "self.all(x, x > 0)"}),
            [1, -1],
            "failed rule: self.all(x, x > 0)",
        ),
        (
            with_rules({"type": "array", "items": INT}, {"rule": "self.exists_one(x, x == 1)"}),
            [1, 1],
            "failed rule: self.exists_one(x, x == 1)",
        ),
        (
            with_rules({"type": "array", "items": INT}, {"rule": "self.isSorted()"}),
            [3, 1],
            "failed rule: self.isSorted()",
        ),
        (
            with_rules(
                {"type": "array", "items": INT, "maxItems": 100},
                {"rule": "self.map(x, x * 2).sum() <= 10"},
            ),
            [3, 4],
            "failed rule: self.map(x, x * 2).sum() <= 10",
        ),
        (
            with_rules(
                {"type": "array", "items": INT, "maxItems": 100},
                {"rule": "self.filter(x, x > 1).max() < 4"},
            ),
            [3, 4],
            "failed rule: self.filter(x, x > 1).max() < 4",
        ),
        (
            with_rules({"type": "object", "additionalProperties": STR}, {"rule": "'a' in self"}),
            {"b": "x"},
            "failed rule: 'a' in self",
        ),
        (
            with_rules(
                {"type": "object", "additionalProperties": STR},
                {"rule": "self.all(k, self[k].size() < 2)"},
            ),
            {"b": "xyz"},
            "failed rule: self.all(k, self[k].size() < 2)",
        ),
    ],
)
def test_self_at_each_level(schema: dict[str, Any], value: Any, want: str) -> None:
    shown = schema.get("type", "")
    assert messages(obj(v=schema), {"v": value}) == [f'v: Invalid value: "{shown}": {want}']


def test_rules_under_items_and_additional_properties_get_indexed_paths() -> None:
    item = with_rules(obj(name=STR), {"rule": "self.name != 'bad'", "message": "bad name"})
    schema = obj(
        list={"type": "array", "items": item},
        map={"type": "object", "additionalProperties": item},
    )
    value = {"list": [{"name": "ok"}, {"name": "bad"}], "map": {"k1": {"name": "bad"}}}
    assert messages(schema, value) == [
        'list[1]: Invalid value: "object": bad name',
        'map[k1]: Invalid value: "object": bad name',
    ]


def test_int_or_string_and_preserve_unknown_fields_are_dyn() -> None:
    schema = obj(
        port=with_rules(
            {"x-kubernetes-int-or-string": True},
            {"rule": "type(self) == int ? self > 0 : self.startsWith('http')"},
        ),
        extra=with_rules(
            {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            {"rule": "!has(self.forbidden)"},
        ),
    )
    assert messages(schema, {"port": 8080, "extra": {"a": 1}}) == []
    assert messages(schema, {"port": "http", "extra": {}}) == []
    assert messages(schema, {"port": "ftp", "extra": {"forbidden": True}}) == [
        'port: Invalid value: "": failed rule: '
        "type(self) == int ? self > 0 : self.startsWith('http')",
        'extra: Invalid value: "object": failed rule: !has(self.forbidden)',
    ]


def test_null_values_are_not_validated() -> None:
    schema = obj(v=with_rules({"type": "string", "nullable": True}, {"rule": "self == 'x'"}))
    assert messages(schema, {"v": None}) == []


# ---- transition rules --------------------------------------------------------------------------

IMMUTABLE = obj(
    spec=obj(
        name=with_rules(STR, {"rule": "self == oldSelf", "message": "name is immutable"}),
        replicas=with_rules(
            INT,
            {
                "rule": "self >= oldSelf",
                "messageExpression": "'replicas may not shrink from ' + string(oldSelf)",
            },
        ),
    )
)


def test_a_transition_rule_runs_only_on_update_with_an_old_value() -> None:
    new = {"spec": {"name": "b", "replicas": 1}}
    assert messages(IMMUTABLE, new) == []  # create: no oldSelf
    assert messages(IMMUTABLE, new, {"spec": {}}) == []  # the fields did not exist before
    assert messages(IMMUTABLE, new, {"spec": {"name": "a", "replicas": 3}}) == [
        'spec.name: Invalid value: "string": name is immutable',
        'spec.replicas: Invalid value: "integer": replicas may not shrink from 3',
    ]
    assert messages(IMMUTABLE, new, {"spec": {"name": "b", "replicas": 1}}) == []


def test_optional_old_self_runs_on_create_too() -> None:
    schema = obj(
        v=with_rules(
            INT,
            {
                "rule": "oldSelf.hasValue() ? self >= oldSelf.value() : self < 10",
                "optionalOldSelf": True,
                "message": "bad",
            },
        )
    )
    assert messages(schema, {"v": 11}) == ['v: Invalid value: "integer": bad']
    assert messages(schema, {"v": 5}) == []
    assert messages(schema, {"v": 11}, {"v": 12}) == ['v: Invalid value: "integer": bad']
    assert messages(schema, {"v": 12}, {"v": 11}) == []


def test_old_items_correlate_by_map_keys_only() -> None:
    item = with_rules(obj(name=STR, size=INT), {"rule": "self.size >= oldSelf.size"})
    schema = obj(
        ports={
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": item,
        }
    )
    old = {"ports": [{"name": "a", "size": 5}, {"name": "b", "size": 1}]}
    new = {"ports": [{"name": "b", "size": 2}, {"name": "a", "size": 4}, {"name": "c", "size": 0}]}
    assert messages(schema, new, old) == [
        'ports[1]: Invalid value: "object": failed rule: self.size >= oldSelf.size'
    ]


def test_old_self_under_an_uncorrelatable_list_is_refused() -> None:
    schema = obj(list={"type": "array", "items": with_rules(STR, {"rule": "self == oldSelf"})})
    assert compile_errors(schema) == [
        f"{ROOT}.properties[list].items.x-kubernetes-validations[0].rule: Invalid value: "
        '"self == oldSelf": oldSelf cannot be used on the uncorrelatable portion of the '
        f"schema within {ROOT}.properties[list]"
    ]


# ---- messageExpression, reason, fieldPath ------------------------------------------------------


def test_message_expression_falls_back_to_the_message_when_it_fails() -> None:
    schema = obj(
        v=with_rules(
            obj(a=INT),
            {"rule": "self.a > 1", "messageExpression": "'a is ' + string(self.a)"},
            {"rule": "self.a > 2", "message": "fallback", "messageExpression": "self.nokey"},
            {"rule": "self.a > 3", "messageExpression": "'  '"},
        )
    )
    assert messages(schema, {"v": {"a": 0}}) == [
        'v: Invalid value: "object": a is 0',
        'v: Invalid value: "object": fallback',
        'v: Invalid value: "object": failed rule: self.a > 3',
    ]


@pytest.mark.parametrize(
    ("reason", "want"),
    [
        (None, 'v: Invalid value: "object": m'),
        ("FieldValueInvalid", 'v: Invalid value: "object": m'),
        ("FieldValueForbidden", "v: Forbidden: m"),
        ("FieldValueRequired", "v: Required value: m"),
        ("FieldValueDuplicate", 'v: Duplicate value: "object"'),
    ],
)
def test_reason(reason: str | None, want: str) -> None:
    rule: dict[str, Any] = {"rule": "false", "message": "m"}
    if reason is not None:
        rule["reason"] = reason
    assert messages(obj(v=with_rules(obj(a=INT), rule)), {"v": {}}) == [want]


def test_field_path_moves_the_error() -> None:
    schema = obj(
        spec=with_rules(
            obj(
                a=obj(b=INT),
                labels={"type": "object", "additionalProperties": STR},
            ),
            {"rule": "false", "message": "m1", "fieldPath": ".a.b"},
            {"rule": "false", "message": "m2", "fieldPath": ".labels['x.y']"},
            {"rule": "false", "message": "m3", "fieldPath": "['a']"},
        )
    )
    assert messages(schema, {"spec": {}}) == [
        'spec.a.b: Invalid value: "object": m1',
        'spec.labels[x.y]: Invalid value: "object": m2',
        'spec.a: Invalid value: "object": m3',
    ]


# ---- compile errors ----------------------------------------------------------------------------


def rule_repr(rule: str, **extra: str) -> str:
    fields = {"Message": "", "MessageExpression": "", "FieldPath": "", **extra}
    return (
        f'apiextensions.ValidationRule{{Rule:"{rule}", Message:"{fields["Message"]}", '
        f'MessageExpression:"{fields["MessageExpression"]}", '
        "Reason:(*apiextensions.FieldValueErrorReason)(nil), "
        f'FieldPath:"{fields["FieldPath"]}", OptionalOldSelf:(*bool)(nil)}}'
    )


def test_compile_errors_in_kubes_shape() -> None:
    schema = obj(
        spec=with_rules(
            obj(a=INT, s=STR),
            {"rule": "self.a =="},
            {"rule": "self.a + 1"},
            {"rule": "self.size() + 'x' == 1"},
            {"rule": "nope.x"},
            {"rule": "  "},
        )
    )
    at = f"{ROOT}.properties[spec].x-kubernetes-validations"
    errs = compile_errors(schema)
    assert errs[0].startswith(
        f"{at}[0].rule: Invalid value: {rule_repr('self.a ==')}: compilation failed: "
        "ERROR: <input>:1:10: Syntax error: mismatched input '<EOF>'"
    )
    assert errs[1] == (
        f"{at}[1].rule: Invalid value: {rule_repr('self.a + 1')}: "
        "cel expression must evaluate to a bool"
    )
    size_rule = rule_repr("self.size() + 'x' == 1")
    assert errs[2].startswith(f"{at}[2].rule: Invalid value: {size_rule}: ")
    assert (
        "compilation failed: ERROR: <input>:1:13: found no matching overload for '_+_'" in errs[2]
    )
    assert "undeclared reference to 'nope.x'" in errs[3]
    # an empty rule is schema.py's error ("rule is not specified"), not reported twice
    assert len(errs) == 4


def test_rule_field_checks() -> None:
    schema = obj(
        spec=with_rules(
            obj(a=INT),
            # schema.py reports these (kube's schema errors); the rules are just not compiled
            {"rule": "bad syntax (", "reason": "Nope"},
            {"rule": "bad syntax (", "fieldPath": ".zz"},
            {"rule": "bad syntax (", "fieldPath": ".a[0]"},
            {"rule": "bad syntax (", "message": "two\nlines"},
            {"rule": "self.a > 0 &&\n bad syntax ("},
            {"rule": "bad syntax (", "messageExpression": " "},
            {"rule": "  "},
            # and these are the CEL errors
            {"rule": "true", "messageExpression": "1"},
            {"rule": "true", "messageExpression": "'a' +"},
            {"rule": "true", "optionalOldSelf": True},
            {"rule": "true", "optionalOldSelf": False},
            {"rule": "true", "message": "x" * 2049},
        )
    )
    at = f"{ROOT}.properties[spec].x-kubernetes-validations"
    errs = compile_errors(schema)
    assert errs[0] == (
        f"{at}[7].messageExpression: Invalid value: "
        f"{rule_repr('true', MessageExpression='1')}: must evaluate to a string"
    )
    assert errs[1].startswith(
        f"{at}[8].messageExpression: Invalid value: "
        f"{rule_repr('true', MessageExpression=chr(39) + 'a' + chr(39) + ' +')}: "
        "messageExpression compilation failed: ERROR: <input>:1:6: Syntax error"
    )
    assert errs[2:] == [
        f"{at}[9].optionalOldSelf: Invalid value: true: may not be set if oldSelf is not used "
        "in rule",
        f"{at}[10].optionalOldSelf: Invalid value: false: may not be set if oldSelf is not used "
        "in rule",
        f'{at}[11].message: Invalid value: "xxxxxxxxxx...": message must have a maximum length '
        "of 2048 characters",
    ]


# ---- free expressions --------------------------------------------------------------------------


def test_compile_expression_for_match_conditions() -> None:
    program, errs = compile_expression(
        "request.operation == 'CREATE' && object.metadata.name.startsWith('web')",
        ["object", "oldObject", "request"],
        "webhooks[0].matchConditions[0].expression",
    )
    assert errs == []
    assert program is not None
    activation = {
        "object": {"metadata": {"name": "web-1"}},
        "oldObject": None,
        "request": {"operation": "CREATE"},
    }
    assert program.evaluate(activation) is True
    activation["request"] = {"operation": "UPDATE"}
    assert program.evaluate(activation) is False
    # a variable left out is null
    request = {"operation": "UPDATE"}
    assert program.evaluate({"object": {"metadata": {"name": "web"}}, "request": request}) is False
    with pytest.raises(EvaluationError, match="no such key: metadata"):
        program.evaluate({"object": {}, "oldObject": None, "request": {"operation": "CREATE"}})


def test_compile_expression_values_and_errors() -> None:
    program, errs = compile_expression("[1, 2].map(x, x * 2)", [], "p")
    assert errs == [] and program is not None
    assert program.evaluate({}) == [2, 4]
    program, errs = compile_expression("object.x ==", ["object"], "spec.expression")
    assert program is None
    assert len(errs) == 1
    assert str(errs[0]).startswith(
        'spec.expression: Invalid value: "object.x ==": compilation failed: ERROR: <input>:1:12'
    )
    program, errs = compile_expression("nope", ["object"], "spec.expression")
    assert program is None and "undeclared reference to 'nope'" in str(errs[0])


# ---- cost --------------------------------------------------------------------------------------


def test_estimated_cost_refuses_unbounded_nested_loops() -> None:
    names = {"type": "array", "items": STR}
    quadratic = "self.all(x, self.exists(y, x == y))"
    errs = compile_errors(obj(names=with_rules(names, {"rule": quadratic})))
    at = f"{ROOT}.properties[names].x-kubernetes-validations[0].rule"
    assert errs[0] == (
        f"{at}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x "
        "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where "
        "arrays, maps, and strings are declared)"
    )
    # bounded, the same rule is accepted
    bounded = {**names, "maxItems": 50, "items": {**STR, "maxLength": 20}}
    assert compile_errors(obj(names=with_rules(bounded, {"rule": quadratic}))) == []


def test_a_rule_under_an_unbounded_list_is_multiplied_by_its_cardinality() -> None:
    item = with_rules({**STR, "maxLength": 1000}, {"rule": "self.matches('^[a-z]+$')"})
    at = f"{ROOT}.properties[l].items.x-kubernetes-validations[0].rule"
    errs = compile_errors(obj(l={"type": "array", "items": item}))
    assert errs[0].startswith(f"{at}: Forbidden: estimated rule cost exceeds budget by factor")
    assert errs[-1].startswith(
        f"{ROOT}: Forbidden: x-kubernetes-validations estimated rule cost total for entire "
        "OpenAPIv3 schema exceeds budget by factor of"
    )
    assert compile_errors(obj(l={"type": "array", "items": item, "maxItems": 10})) == []


def test_runtime_cost_limit_per_call() -> None:
    # from the schema (a string of up to 3 MiB) the rule is under the per-rule estimate limit;
    # at run time it is charged by the string actually sent
    schema = obj(text=with_rules(STR, {"rule": "self.matches('^[a-z]+$')"}))
    rules, errs = compile_rules(schema, ROOT)
    assert errs == []
    assert [str(e) for e in rules.validate({"text": "a" * 100_000}, None)] == []
    assert [str(e) for e in rules.validate({"text": "a" * 2_000_000}, None)] == [
        "text: Invalid value: \"string\": 'operation cancelled: actual cost limit exceeded': "
        "no further validation rules will be run due to call cost exceeds limit for rule: "
        "self.matches('^[a-z]+$')"
    ]


def test_estimated_cost_factor() -> None:
    names = {"type": "array", "maxItems": 2000, "items": {**STR, "maxLength": 10}}
    rule = {"rule": "self.all(x, self.exists(y, x == y))"}
    assert compile_errors(obj(names=with_rules(names, rule))) == [
        f"{ROOT}.properties[names].x-kubernetes-validations[0].rule: Forbidden: estimated rule "
        "cost exceeds budget by factor of 2.4x (try simplifying the rule, or adding maxItems, "
        "maxProperties, and maxLength where arrays, maps, and strings are declared)"
    ]
    names["maxItems"] = 1000
    assert compile_errors(obj(names=with_rules(names, rule))) == []


def test_runtime_budget_per_object() -> None:
    # each call is under the per-call limit, all of them together over the object's budget
    text = {**STR, "maxLength": 100_000}
    item = with_rules(
        text,
        {"rule": "self.matches('^[a-z]+$')"},
        {"rule": "!self.contains('zz')"},
        {"rule": "!self.startsWith('zz')"},
    )
    schema = obj(texts={"type": "array", "maxItems": 100, "items": item})
    rules, errs = compile_rules(schema, ROOT)
    assert errs == []
    assert [str(e) for e in rules.validate({"texts": ["abc"] * 100}, None)] == []
    got = [str(e) for e in rules.validate({"texts": ["a" * 100_000] * 100}, None)]
    assert got[-1].endswith(
        'Invalid value: "string": validation failed due to running out of cost budget, '
        "no further validation rules will be run"
    )
    assert len(got) == 1


def test_cel_cpps_iteration_guard_reads_as_the_per_call_limit() -> None:
    schema = obj(n=with_rules({"type": "array", "items": INT}, {"rule": "self.all(x, x >= 0)"}))
    rules, errs = compile_rules(schema, ROOT)
    assert errs == []
    assert [str(e) for e in rules.validate({"n": list(range(9999))}, None)] == []
    assert [str(e) for e in rules.validate({"n": list(range(10_000))}, None)] == [
        "n: Invalid value: \"array\": 'operation cancelled: actual cost limit exceeded': no "
        "further validation rules will be run due to call cost exceeds limit for rule: "
        "self.all(x, x >= 0)"
    ]


# ---- kube's library additions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "want"),
    [
        ("[1, 2, 2].isSorted() && !['b', 'a'].isSorted()", True),
        ("[1, 2, 3].sum()", 6),
        ("[1.5, 2.5].sum()", 4.0),
        ("[].sum()", 0),
        ("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3", True),
        ("'AbC'.lowerAscii() + 'AbC'.upperAscii()", "abcABC"),
        ("'a,b'.split(',')", ["a", "b"]),
        ("['a', 'b'].join('/')", "a/b"),
        ("'hello'.indexOf('l') + 'hello'.lastIndexOf('l')", 5),
        ("'abc123def45'.find('[0-9]+')", "123"),
        ("'abc123def45'.findAll('[0-9]+')", ["123", "45"]),
        ("'abc123def45'.findAll('[0-9]+', 1)", ["123"]),
        ("quantity('1Gi').isGreaterThan(quantity('500Mi'))", True),
        ("quantity('1Gi').compareTo(quantity('1024Mi'))", 0),
        ("quantity('1Gi').add(quantity('512Mi'))", "1536Mi"),
        ("quantity('100m').add(quantity('1'))", "1100m"),
        ("quantity('1').sub(2)", "-1"),
        ("quantity('2k').asInteger()", 2000),
        ("quantity('1.5').isInteger()", False),
        ("quantity('-3').sign()", -1),
        ("isQuantity('1x') || !isQuantity('1Gi')", False),
        ("url('https://example.com:8443/a/b?x=1&x=2').getScheme()", "https"),
        ("url('https://example.com:8443/a/b?x=1&x=2').getHost()", "example.com:8443"),
        ("url('https://example.com:8443/a/b?x=1&x=2').getHostname()", "example.com"),
        ("url('https://example.com:8443/a/b?x=1&x=2').getPort()", "8443"),
        ("url('https://example.com:8443/a/b?x=1&x=2').getEscapedPath()", "/a/b"),
        ("url('https://example.com:8443/a/b?x=1&x=2').getQuery()", {"x": ["1", "2"]}),
        ("isURL('/a/path') && !isURL('no scheme')", True),
        ("sets.contains([1, 2, 3], [1, 2]) && !sets.contains([1], [2])", True),
        ("sets.equivalent([1, 2], [2, 1, 1])", True),
        ("sets.intersects([1, 2], [2, 3]) && !sets.intersects([1], [2])", True),
        ("isIP('10.0.0.1') && isIP('::1') && !isIP('10.0.0') && !isIP('::ffff:1.2.3.4')", True),
        ("ip('10.0.0.1').family() + ip('::1').family()", 10),
        ("ip('127.0.0.1').isLoopback() && ip('0.0.0.0').isUnspecified()", True),
        ("cidr('10.0.0.0/8').containsIP('10.1.2.3')", True),
        ("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16')", True),
        ("cidr('10.0.0.0/8').prefixLength()", 8),
        ("isCIDR('10.0.0.0/8') && !isCIDR('10.0.0.0/33')", True),
        ("optional.of(1).hasValue() && optional.none().orValue(2) == 2", True),
        ("{'a': 1}.?b.orValue(7) + [1, 2][?5].orValue(9)", 16),
        ("[1, 2, 3].slice(1, 2)", [2]),
        ("[[1], [2, [3]]].flatten(2)", [1, 2, 3]),
        ("[1, 2, 1].distinct()", [1, 2]),
        ("[3, 1, 2].sort()", [1, 2, 3]),
        ("base64.encode(b'a')", "YQ=="),
        ("'abc'.reverse() + strings.quote('x')", 'cba"x"'),
        ("cel.bind(x, 2, x * x)", 4),
        ("math.greatest(1, 5, 3)", 5),
    ],
)
def test_library(expression: str, want: Any) -> None:
    program, errs = compile_expression(expression, [], "x")
    assert errs == [] and program is not None
    assert program.evaluate({}) == want


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("quantity('bad') == quantity('1')", "quantities must match the regular expression"),
        ("url('no scheme') == ''", 'parse "no scheme": invalid URI for request'),
        ("[].min() == 0", "min(list) argument must not be empty"),
        ("{'a': 1}['b'] == 1", "no such key: b"),
        ("[1][3] == 1", "index out of bounds: 3"),
        ("1 / 0 == 1", "division by zero"),
        ("9223372036854775807 + 1 > 0", "integer overflow"),
        ("dyn(1) + dyn('a') == 1", "no such overload"),
    ],
)
def test_runtime_errors_in_cel_gos_words(expression: str, error: str) -> None:
    program, errs = compile_expression(expression, [], "x")
    assert errs == [] and program is not None
    with pytest.raises(EvaluationError) as caught:
        program.evaluate({})
    assert error in str(caught.value)


def test_a_runtime_error_of_a_rule_names_the_rule() -> None:
    schema = obj(
        v=with_rules(
            {"x-kubernetes-int-or-string": True},
            {"rule": "self + 1 > 0", "message": "must be positive"},
            {"rule": "self / 0 > 0"},
        )
    )
    assert messages(schema, {"v": "x"}) == [
        "v: Invalid value: \"\": 'no such overload': call arguments did not match a supported "
        "operator, function or macro signature for rule: must be positive",
        "v: Invalid value: \"\": 'no such overload': call arguments did not match a "
        "supported operator, function or macro signature for rule: self / 0 > 0",
    ]
    assert messages(schema, {"v": 1}) == [
        'v: Invalid value: "": division by zero evaluating rule: self / 0 > 0'
    ]


def test_formatted_strings_are_timestamps_durations_and_bytes() -> None:
    def fmt(name: str, rule: str) -> dict[str, Any]:
        return with_rules({**STR, "format": name}, {"rule": rule})

    schema = obj(
        t=fmt("date-time", "self > timestamp('2020-01-01T00:00:00Z')"),
        d=fmt("duration", "self < duration('1h')"),
        day=fmt("date", "self.getFullYear() == 2024"),
        b=fmt("byte", "size(self) == 3"),
    )
    good = {"t": "2021-05-01T10:00:00Z", "d": "30m", "day": "2024-02-03", "b": "YWJj"}
    assert messages(schema, good) == []
    bad = {"t": "2019-05-01T10:00:00+02:00", "d": "1h30m", "day": "2023-02-03", "b": "YWI="}
    assert messages(schema, bad) == [
        "t: Invalid value: \"string\": failed rule: self > timestamp('2020-01-01T00:00:00Z')",
        "d: Invalid value: \"string\": failed rule: self < duration('1h')",
        'day: Invalid value: "string": failed rule: self.getFullYear() == 2024',
        'b: Invalid value: "string": failed rule: size(self) == 3',
    ]
    # a typed string is checked at compile time
    assert "found no matching overload" in compile_errors(obj(d=fmt("duration", "self > 1")))[0]


def test_undefined_fields_of_an_object_are_compile_errors() -> None:
    spec = obj(
        a=INT,
        labels={"type": "object", "additionalProperties": STR},
        items={"type": "array", "items": obj(b=INT)},
    )
    schema = with_rules(
        obj(spec=spec, free={"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
        {"rule": "self.spec.nope == 1"},
        {"rule": "self.spec.labels.anything == 'x' && self.free.whatever == 1"},
        {"rule": "self.metadata.name == 'x' && self.kind == 'X'"},
        {"rule": "self.metadata.labels.size() > 0"},
        {"rule": "has(self.spec.b)"},
        {"rule": "self.spec.items.all(s, s.zz == 1)"},
    )
    at = f"{ROOT}.x-kubernetes-validations"
    errs = compile_errors(schema)
    assert errs[0] == (
        f"{at}[0].rule: Invalid value: {rule_repr('self.spec.nope == 1')}: compilation failed: "
        "ERROR: <input>:1:10: undefined field 'nope'\n | self.spec.nope == 1\n | .........^"
    )
    # a resource's root shows only metadata.name and metadata.generateName, as kube's
    assert errs[1].startswith(f"{at}[3].rule: ")
    assert errs[1].endswith(
        "compilation failed: ERROR: <input>:1:14: undefined field 'labels'"
        "\n | self.metadata.labels.size() > 0\n | .............^"
    )
    assert "undefined field 'b'" in errs[2] and errs[2].startswith(f"{at}[4].rule")
    assert "undefined field 'zz'" in errs[3] and errs[3].startswith(f"{at}[5].rule")
    assert len(errs) == 4


def test_ratcheting_an_unchanged_value_passes_a_failing_rule() -> None:
    # kube's CRDValidationRatcheting: a rule without oldSelf does not refuse an update that
    # leaves its value as it was (a rule tightened after objects were stored)
    tight = with_rules(STR, {"rule": "self.size() < 3", "message": "too long"})
    schema = obj(
        a=tight,
        b=tight,
        tags={"type": "array", "items": tight},
        ports={
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": obj(name=tight),
        },
    )
    old = {"a": "long", "b": "long", "tags": ["long"], "ports": [{"name": "long"}]}
    assert messages(schema, old, old) == []
    new = {"a": "long", "b": "longer", "tags": ["long", "x"], "ports": [{"name": "long"}]}
    assert messages(schema, new, old) == [
        'b: Invalid value: "string": too long',
        'tags[0]: Invalid value: "string": too long',
    ]
    assert messages(schema, new) == [
        'a: Invalid value: "string": too long',
        'b: Invalid value: "string": too long',
        'tags[0]: Invalid value: "string": too long',
        'ports[0].name: Invalid value: "string": too long',
    ]


def test_nullable_items_and_all_of_rules() -> None:
    schema = obj(
        names=with_rules(
            {"type": "array", "items": {**STR, "nullable": True}},
            {"rule": "self.all(x, x == null || x.size() > 0)", "message": "empty name"},
        ),
        spec={
            **obj(a=INT),
            "allOf": [{"x-kubernetes-validations": [{"rule": "self.a > 0", "message": "a>0"}]}],
        },
    )
    assert messages(schema, {"names": ["x", None], "spec": {"a": 1}}) == []
    assert messages(schema, {"names": [""], "spec": {"a": 0}}) == [
        'names: Invalid value: "array": empty name',
        'spec: Invalid value: "object": a>0',
    ]


def test_optional_old_self_compile_errors_point_into_the_rule() -> None:
    rule = {"rule": "oldSelf.orValue(1) ==", "optionalOldSelf": True}
    errs = compile_errors(obj(v=with_rules(INT, rule)))
    assert len(errs) == 1
    assert "compilation failed: ERROR: <input>:1:22: Syntax error" in errs[0]
    assert "\n | oldSelf.orValue(1) ==\n | .....................^" in errs[0]
    assert "OptionalOldSelf:(*bool)(true)" in errs[0]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": "x", "x-kubernetes-validations": "nope"},
        {"type": "array", "items": [1], "x-kubernetes-validations": [None, 1, {"rule": 5}]},
        {"type": "object", "additionalProperties": True, "maxProperties": "x"},
        {"x-kubernetes-validations": [{"rule": "self", "fieldPath": 3, "reason": []}]},
        {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": "name",
            "items": with_rules(obj(name=STR), {"rule": "self == oldSelf"}),
        },
    ],
)
def test_malformed_schemas_do_not_raise(schema: dict[str, Any]) -> None:
    rules, _ = compile_rules(schema, ROOT)
    rules.validate([{"name": "a"}], [{"name": "b"}])
    rules.validate({"a": 1}, None)


def test_property_names_are_escaped_as_kube_does() -> None:
    schema = with_rules(
        obj(
            **{
                "foo-bar": INT,
                "namespace": STR,
                "a.b": INT,
                "x__y": INT,
                "labels": {"type": "object", "additionalProperties": STR},
            }
        ),
        {"rule": "self.foo__dash__bar > 0", "message": "dash"},
        {"rule": "self.__namespace__ == 'ns'", "message": "reserved"},
        {"rule": "self.a__dot__b == self.x__underscores__y", "message": "dot"},
        {"rule": "self.labels['app.kubernetes.io/name'] == 'web'", "message": "map keys stay"},
    )
    good = {
        "foo-bar": 1,
        "namespace": "ns",
        "a.b": 2,
        "x__y": 2,
        "labels": {"app.kubernetes.io/name": "web"},
    }
    assert messages(obj(v=schema), {"v": good}) == []
    bad = {**good, "foo-bar": 0, "namespace": "x", "a.b": 3}
    assert messages(obj(v=schema), {"v": bad}) == [
        'v: Invalid value: "object": dash',
        'v: Invalid value: "object": reserved',
        'v: Invalid value: "object": dot',
    ]
    assert (
        "undefined field 'foo'"
        in compile_errors(obj(v=with_rules(schema, {"rule": "self.foo == 1"})))[0]
    )


@pytest.mark.parametrize(
    ("name", "identifier", "in_cel"),
    [
        ("replicas", True, "replicas"),
        ("_x1", True, "_x1"),
        ("namespace", False, "__namespace__"),  # reserved: escaped as a property
        ("if", False, "__if__"),
        ("foo-bar", False, "foo__dash__bar"),
        ("a.b/c", False, "a__dot__b__slash__c"),
        ("a__b", True, "a__underscores__b"),
        ("1x", False, None),
        ("x y", False, None),
        ("x\n", False, None),  # as kube's Go regexp: the name must end where the match does
        ("", False, None),
    ],
)
def test_cel_identifiers_and_property_escaping(
    name: str, identifier: bool, in_cel: str | None
) -> None:
    assert is_cel_identifier(name) is identifier
    assert escape_property(name) == in_cel
