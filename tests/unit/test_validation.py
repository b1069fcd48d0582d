"""Apiserver validation and defaulting: messages in Kubernetes' wording, naming every field."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf.message import Message

from apiserver.registry import strategy_for
from tinykube.errors import FieldError, InvalidError
from tinykube.kinds import EVENT, LEASE, NODE, POD, REPLICA_SET, SERVICE, KindInfo
from tinykube.meta import generate_name
from tinykube.v1 import lease_pb2, meta_pb2, node_pb2, pod_pb2, replicaset_pb2, service_pb2

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def make_pod(**changes: object) -> pod_pb2.Pod:
    pod = pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name="web", namespace="default", labels={"app": "web"}),
        spec=pod_pb2.PodSpec(
            containers=[
                pod_pb2.Container(
                    name="c",
                    image="busybox",
                    resources=pod_pb2.ResourceRequirements(
                        requests={"cpu": "100m", "memory": "64Mi"},
                        limits={"cpu": "1", "memory": "128Mi"},
                    ),
                )
            ]
        ),
    )
    strategy_for(POD).prepare_for_create(pod, NOW)
    return pod


def messages(errors: list[FieldError]) -> list[str]:
    return [str(e) for e in errors]


def test_valid_pod_has_no_errors_and_gets_defaults() -> None:
    pod = make_pod()
    assert strategy_for(POD).validate_create(pod) == []
    assert pod.apiVersion == "v1" and pod.kind == "Pod"
    assert pod.metadata.uid and pod.metadata.generation == 1
    assert pod.metadata.creationTimestamp.ToDatetime(tzinfo=UTC) == NOW
    assert pod.spec.schedulerName == "tinykube"
    assert pod.spec.restartPolicy == "Always"
    assert pod.spec.dnsPolicy == "ClusterFirst"
    assert pod.spec.terminationGracePeriodSeconds == 30
    assert pod.status.phase == "Pending"


def test_defaults_ports_tolerations_and_client_status_is_dropped() -> None:
    pod = pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name="web", namespace="default"),
        spec=pod_pb2.PodSpec(
            containers=[
                pod_pb2.Container(
                    name="c", image="nginx", ports=[pod_pb2.ContainerPort(containerPort=80)]
                )
            ],
            tolerations=[pod_pb2.Toleration(key="k", value="v", effect="NoSchedule")],
        ),
        status=pod_pb2.PodStatus(phase="Running"),
    )
    strategy_for(POD).prepare_for_create(pod, NOW)
    assert pod.spec.containers[0].ports[0].protocol == "TCP"
    assert pod.spec.tolerations[0].operator == "Equal"
    assert pod.status.phase == "Pending"
    assert strategy_for(POD).validate_create(pod) == []


def _set(path: str, value: object) -> Callable[[pod_pb2.Pod], None]:
    def apply(pod: pod_pb2.Pod) -> None:
        target: object = pod
        parts = path.split(".")
        for part in parts[:-1]:
            target = getattr(target, part)
        setattr(target, parts[-1], value)

    return apply


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            _set("metadata.name", "Web_1"),
            'metadata.name: Invalid value: "Web_1": a lowercase RFC 1123 subdomain must consist '
            "of lower case alphanumeric characters, '-' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ),
        (
            _set("metadata.namespace", "My.NS"),
            'metadata.namespace: Invalid value: "My.NS": a lowercase RFC 1123 label must',
        ),
        (
            lambda p: p.spec.containers[0].resources.requests.__setitem__("cpu", "1x"),
            'spec.containers[0].resources.requests[cpu]: Invalid value: "1x": quantities must '
            "match the regular expression",
        ),
        (
            lambda p: p.spec.containers[0].resources.requests.__setitem__("memory", "-1Mi"),
            'spec.containers[0].resources.requests[memory]: Invalid value: "-1Mi": must be '
            "greater than or equal to 0",
        ),
        (
            lambda p: p.spec.containers[0].resources.requests.__setitem__("cpu", "2"),
            'spec.containers[0].resources.requests: Invalid value: "2": must be less than or '
            "equal to cpu limit of 1",
        ),
        (
            _set("spec.restartPolicy", "Sometimes"),
            'spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", '
            '"OnFailure", "Never"',
        ),
        (
            _set("spec.dnsPolicy", "Google"),
            'spec.dnsPolicy: Unsupported value: "Google": supported values: "ClusterFirst", '
            '"ClusterFirstWithHostNet", "Default", "None"',
        ),
        (
            _set("status.phase", "Sleeping"),
            'status.phase: Unsupported value: "Sleeping": supported values: "Pending", '
            '"Running", "Succeeded", "Failed", "Unknown"',
        ),
        (
            lambda p: p.status.conditions.add(type="Ready", status="Maybe"),
            'status.conditions[0].status: Unsupported value: "Maybe": supported values: "True", '
            '"False", "Unknown"',
        ),
        (
            lambda p: p.spec.tolerations.add(key="k", operator="Like"),
            'spec.tolerations[0].operator: Unsupported value: "Like": supported values: '
            '"Equal", "Exists"',
        ),
        (
            lambda p: p.spec.tolerations.add(key="k", operator="Equal", effect="Never"),
            'spec.tolerations[0].effect: Unsupported value: "Never": supported values: '
            '"NoSchedule", "PreferNoSchedule", "NoExecute"',
        ),
        (
            lambda p: p.spec.containers[0].ports.add(containerPort=80, protocol="HTTP"),
            'spec.containers[0].ports[0].protocol: Unsupported value: "HTTP": supported values: '
            '"TCP", "UDP", "SCTP"',
        ),
        (
            lambda p: p.spec.containers.add(name="c", image="x"),
            'spec.containers[1].name: Duplicate value: "c"',
        ),
        (lambda p: p.spec.ClearField("containers"), "spec.containers: Required value"),
        (
            lambda p: p.metadata.labels.__setitem__("bad key", "v"),
            'metadata.labels: Invalid value: "bad key": name part must consist of',
        ),
        (
            lambda p: p.metadata.labels.__setitem__("app", "-web"),
            'metadata.labels: Invalid value: "-web": a valid label must be an empty string',
        ),
        (
            lambda p: (
                p.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.add().matchExpressions.add(
                    key="zone", operator="Near"
                )
            ),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
            'nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: "Near"',
        ),
        (
            lambda p: p.spec.containers[0].ClearField("image"),
            "spec.containers[0].image: Required value",
        ),
    ],
)
def test_pod_validation_messages(mutate: Callable[[pod_pb2.Pod], None], expected: str) -> None:
    pod = make_pod()
    mutate(pod)
    errors = messages(strategy_for(POD).validate_create(pod))
    assert any(e.startswith(expected) for e in errors), errors


def test_every_bad_field_is_named_in_one_error() -> None:
    pod = make_pod()
    pod.metadata.name = "Web_1"
    pod.spec.restartPolicy = "Sometimes"
    pod.spec.containers[0].resources.requests["cpu"] = "1x"
    err = InvalidError.for_object("Pod", pod.metadata.name, strategy_for(POD).validate_create(pod))
    assert err.message.startswith('Pod "Web_1" is invalid: metadata.name: Invalid value: "Web_1"')
    assert "spec.containers[0].resources.requests[cpu]" in err.message
    assert "spec.restartPolicy" in err.message
    assert len(err.causes) == 3


def test_node_validation() -> None:
    node = node_pb2.Node(
        metadata=meta_pb2.ObjectMeta(name="n1", namespace="oops"),
        spec=node_pb2.NodeSpec(taints=[node_pb2.Taint(key="k", effect="Sometimes")]),
        status=node_pb2.NodeStatus(capacity={"cpu": "four"}),
    )
    errors = messages(strategy_for(NODE).validate_create(node))
    assert "metadata.namespace: Forbidden: not allowed on this type" in errors
    assert any(
        e.startswith('spec.taints[0].effect: Unsupported value: "Sometimes"') for e in errors
    )
    assert any(e.startswith('status.capacity[cpu]: Invalid value: "four"') for e in errors)


MAX = 2**63 - 1


@pytest.mark.parametrize(
    ("resource", "text", "expected"),
    [
        ("cpu", "1e64", f'Invalid value: "1e64": must be less than or equal to {MAX}m'),
        ("cpu", "1e30", f'Invalid value: "1e30": must be less than or equal to {MAX}m'),
        ("cpu", "9223372036854776", f"must be less than or equal to {MAX}m"),  # * 1000 > int64
        ("cpu", "9223372036854775", None),
        ("cpu", "9223372036854775807m", None),
        ("memory", "99999999999999999999", f"must be less than or equal to {MAX}"),
        ("memory", "8Ei", f'Invalid value: "8Ei": must be less than or equal to {MAX}'),
        ("memory", "7Ei", None),
        ("memory", str(MAX), None),
        ("pods", "1e30", f'Invalid value: "1e30": must be less than or equal to {MAX}'),
        # Python's int-string digit limit was an INTERNAL error; the value is not echoed whole.
        (
            "cpu",
            "9" * 5000,
            'Invalid value: "99999999999999999999... (5000 characters)": must '
            "have at most 64 digits",
        ),
        ("memory", "0." + "0" * 5000 + "1", "must have at most 64 digits"),
    ],
)
def test_quantities_must_fit_int64_in_their_unit(
    resource: str, text: str, expected: str | None
) -> None:
    pod = make_pod()
    pod.spec.containers[0].resources.ClearField("limits")
    pod.spec.containers[0].resources.requests[resource] = text
    pod.spec.containers[0].resources.limits[resource] = text
    node = node_pb2.Node(
        metadata=meta_pb2.ObjectMeta(name="n1"),
        status=node_pb2.NodeStatus(capacity={resource: text}, allocatable={resource: text}),
    )
    got = messages(strategy_for(POD).validate_create(pod)) + messages(
        strategy_for(NODE).validate_create(node)
    )
    if expected is None:
        assert got == []
        return
    paths = [
        f"spec.containers[0].resources.limits[{resource}]",
        f"spec.containers[0].resources.requests[{resource}]",
        f"status.capacity[{resource}]",
        f"status.allocatable[{resource}]",
    ]
    assert len(got) == 4, got
    for path in paths:
        assert any(e.startswith(f"{path}: ") and expected in e for e in got), (path, got)


def make_rs(replicas: int = 2, selector: dict[str, str] | None = None) -> replicaset_pb2.ReplicaSet:
    rs = replicaset_pb2.ReplicaSet(
        metadata=meta_pb2.ObjectMeta(name="web", namespace="default"),
        spec=replicaset_pb2.ReplicaSetSpec(
            replicas=replicas,
            selector=meta_pb2.LabelSelector(matchLabels=selector or {"app": "web"}),
            template=replicaset_pb2.PodTemplateSpec(
                metadata=meta_pb2.ObjectMeta(labels={"app": "web"}),
                spec=pod_pb2.PodSpec(containers=[pod_pb2.Container(name="c", image="x")]),
            ),
        ),
    )
    strategy_for(REPLICA_SET).prepare_for_create(rs, NOW)
    return rs


def test_replica_set_validation() -> None:
    assert strategy_for(REPLICA_SET).validate_create(make_rs()) == []
    errors = messages(
        strategy_for(REPLICA_SET).validate_create(make_rs(replicas=-1, selector={"app": "db"}))
    )
    assert "spec.replicas: Invalid value: -1: must be greater than or equal to 0" in errors
    assert (
        'spec.template.metadata.labels: Invalid value: "app=web": `selector` does not match '
        "template `labels`" in errors
    )
    rs = make_rs()
    rs.spec.ClearField("selector")
    assert "spec.selector: Required value" in messages(
        strategy_for(REPLICA_SET).validate_create(rs)
    )


def test_replica_set_replicas_default_to_one() -> None:
    rs = replicaset_pb2.ReplicaSet(metadata=meta_pb2.ObjectMeta(name="a", namespace="default"))
    strategy_for(REPLICA_SET).prepare_for_create(rs, NOW)
    assert rs.spec.replicas == 1


def test_lease_and_event() -> None:
    lease = lease_pb2.Lease(
        metadata=meta_pb2.ObjectMeta(name="n1", namespace="kube-node-lease"),
        spec=lease_pb2.LeaseSpec(leaseDurationSeconds=0),
    )
    assert any(
        "spec.leaseDurationSeconds" in m
        for m in messages(strategy_for(LEASE).validate_create(lease))
    )
    from tinykube.v1 import event_pb2

    ev = event_pb2.Event(metadata=meta_pb2.ObjectMeta(name="e1", namespace="default"), type="Bad")
    assert any(
        m.startswith('type: Unsupported value: "Bad"')
        for m in messages(strategy_for(EVENT).validate_create(ev))
    )


def test_update_keeps_status_and_bumps_generation_on_spec_change() -> None:
    strategy = strategy_for(POD)
    old = make_pod()
    old.status.phase = "Running"
    new = pod_pb2.Pod()
    new.CopyFrom(old)
    new.status.phase = "Failed"  # ignored by Update
    new.metadata.labels["extra"] = "1"
    new.metadata.uid = "forged"  # server-owned
    strategy.prepare_for_update(new, old)
    assert new.status.phase == "Running"
    assert new.metadata.uid == old.metadata.uid
    assert new.metadata.generation == 1  # metadata-only change
    new.spec.tolerations.add(key="k", operator="Exists")
    strategy.prepare_for_update(new, old)
    assert new.metadata.generation == 2


def test_status_update_keeps_spec_and_metadata() -> None:
    strategy = strategy_for(POD)
    old = make_pod()
    new = pod_pb2.Pod()
    new.CopyFrom(old)
    new.status.phase = "Running"
    new.metadata.labels["sneaky"] = "1"
    new.spec.containers[0].image = "other"
    merged = strategy.prepare_for_status_update(new, old)
    assert isinstance(merged, pod_pb2.Pod)
    assert merged.status.phase == "Running"
    assert "sneaky" not in merged.metadata.labels
    assert merged.spec.containers[0].image == "busybox"


def test_immutable_fields_on_update() -> None:
    old = make_pod()
    new = pod_pb2.Pod()
    new.CopyFrom(old)
    new.spec.containers[0].image = "other"  # images may change
    assert messages(strategy_for(POD).check_update(new, old)) == []
    new.spec.nodeName = "n1"  # only through Bind: kube's Forbidden spec, the diff naming it
    (error,) = messages(strategy_for(POD).check_update(new, old))
    assert error.startswith("spec: Forbidden: pod updates may not change")
    assert '- \tNodeName: "",\n+ \tNodeName: "n1",' in error
    rs_old = make_rs()
    rs_new = make_rs(selector={"app": "db"})
    assert 'spec.selector: Invalid value: "": field is immutable' in messages(
        strategy_for(REPLICA_SET).check_update(rs_new, rs_old)
    )


def test_generate_name() -> None:
    name = generate_name("web-")
    assert name.startswith("web-") and len(name) == 9
    assert len({generate_name("web-") for _ in range(20)}) > 1
    assert set(name[4:]) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert len(generate_name("x" * 100)) == 63


def make_service(type_: str) -> service_pb2.Service:
    svc = service_pb2.Service(
        metadata=meta_pb2.ObjectMeta(name="web", namespace="default"),
        spec=service_pb2.ServiceSpec(type=type_, selector={"app": "web"}),
    )
    svc.spec.ports.add(port=80)
    strategy_for(SERVICE).prepare_for_create(svc, NOW)
    return svc


@pytest.mark.parametrize(("type_", "external"), [("ClusterIP", ""), ("NodePort", "Cluster")])
def test_service_defaults_are_kubernetes(type_: str, external: str) -> None:
    spec = make_service(type_).spec
    assert spec.sessionAffinity == "None"
    assert list(spec.ipFamilies) == ["IPv4"] and spec.ipFamilyPolicy == "SingleStack"
    assert spec.internalTrafficPolicy == "Cluster"
    assert spec.externalTrafficPolicy == external
    assert strategy_for(SERVICE).validate_create(make_service(type_)) == []


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        (
            "sessionAffinity",
            "Sticky",
            'spec.sessionAffinity: Unsupported value: "Sticky": supported values: "ClientIP", '
            '"None"',
        ),
        (
            "internalTrafficPolicy",
            "Nearby",
            'spec.internalTrafficPolicy: Unsupported value: "Nearby": supported values: '
            '"Cluster", "Local"',
        ),
        (
            "externalTrafficPolicy",
            "Nearby",
            'spec.externalTrafficPolicy: Unsupported value: "Nearby": supported values: '
            '"Cluster", "Local"',
        ),
        (
            "ipFamilyPolicy",
            "RequireDualStack",
            'spec.ipFamilyPolicy: Unsupported value: "RequireDualStack": supported values: '
            '"SingleStack"',
        ),
    ],
)
def test_service_policy_validation(field: str, value: str, expected: str) -> None:
    svc = make_service("NodePort")
    setattr(svc.spec, field, value)
    assert messages(strategy_for(SERVICE).validate_create(svc)) == [expected]


def _annotations(total: int, value_char: str = "x") -> dict[str, str]:
    """One annotation `a` whose key and value add up to `total` bytes."""
    per_char = len(value_char.encode())
    return {"a": value_char * ((total - 1) // per_char)}


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        # Annotations: 256 KiB in total, keys plus values, counted in bytes.
        (lambda m: m.annotations.update(_annotations(262144)), []),
        (
            lambda m: m.annotations.update(_annotations(262145)),
            ["metadata.annotations: Too long: must have at most 262144 bytes"],
        ),
        (
            # 131,072 two-byte characters: under the limit in characters, over it in bytes.
            lambda m: m.annotations.update({"a": "é" * 131072}),
            ["metadata.annotations: Too long: must have at most 262144 bytes"],
        ),
        (
            lambda m: m.annotations.update({"a": "x" * 200_000, "b": "y" * 62_142}),
            [],
        ),
        (
            lambda m: m.annotations.update({"a": "x" * 200_000, "b": "y" * 62_143}),
            ["metadata.annotations: Too long: must have at most 262144 bytes"],
        ),
        # Annotation keys are qualified names, checked lowercased.
        (lambda m: m.annotations.update({"Example.COM/Note": "v"}), []),
        (
            lambda m: m.annotations.update({"a b": "v"}),
            [
                'metadata.annotations: Invalid value: "a b": name part must consist of '
                "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
                "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ],
        ),
        # Label keys: [prefix/]name, prefix a DNS subdomain of at most 253, name at most 63.
        (lambda m: m.labels.update({"example.com/" + "n" * 63: "v"}), []),
        (
            lambda m: m.labels.update({"n" * 64: "v"}),
            [
                f'metadata.labels: Invalid value: "{"n" * 64}": name part must be no more than '
                "63 characters"
            ],
        ),
        (
            lambda m: m.labels.update({"a" * 254 + "/n": "v"}),
            [
                f'metadata.labels: Invalid value: "{"a" * 254}/n": prefix part must be no more '
                "than 253 characters"
            ],
        ),
        (
            lambda m: m.labels.update({"Example.com/n": "v"}),
            [
                'metadata.labels: Invalid value: "Example.com/n": prefix part a lowercase RFC '
                "1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                "and must start and end with an alphanumeric character (e.g. 'example.com', "
                "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]"
                "([-a-z0-9]*[a-z0-9])?)*')"
            ],
        ),
        # Label values: at most 63, empty allowed; the map is named, not the key.
        (lambda m: m.labels.update({"k": "v" * 63, "e": ""}), []),
        (
            lambda m: m.labels.update({"k": "v" * 64}),
            [f'metadata.labels: Invalid value: "{"v" * 64}": must be no more than 63 characters'],
        ),
        # A trailing newline is not a valid end character (Python's $ would accept it).
        (
            lambda m: m.labels.update({"k": "web\n"}),
            [
                'metadata.labels: Invalid value: "web\\n": a valid label must be an empty '
                "string or consist of alphanumeric characters, '-', '_' or '.', and must start "
                "and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?"
                "[A-Za-z0-9])?')"
            ],
        ),
        (lambda m: m.labels.update({"k\n": "v"}), ['metadata.labels: Invalid value: "k\\n"']),
        (lambda m: setattr(m, "name", "web\n"), ['metadata.name: Invalid value: "web\\n"']),
        (
            lambda m: setattr(m, "namespace", "default\n"),
            ['metadata.namespace: Invalid value: "default\\n"'],
        ),
    ],
)
def test_metadata_limits(
    mutate: Callable[[meta_pb2.ObjectMeta], None], expected: list[str]
) -> None:
    pod = make_pod()
    mutate(pod.metadata)
    got = [m for m in messages(strategy_for(POD).validate_create(pod)) if m.startswith("metadata.")]
    assert len(got) == len(expected), got
    for message, want in zip(got, expected, strict=True):
        assert message.startswith(want), (message, want)


# ---- pod affinity, topology spread, scheduling gates, preemptionPolicy -----------------------
# Each row: a pod manifest's spec fields (JSON, as kubectl sends them) and a message Kubernetes
# v1.36 gives for it, word for word (pkg/apis/core/validation).

ANTI = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
PREF = "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
TSC = "spec.topologySpreadConstraints[0]"
LABEL_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def placement_pod(spec: dict[str, object], labels: dict[str, str] | None = None) -> pod_pb2.Pod:
    from google.protobuf import json_format

    body = {
        "metadata": {"name": "web", "namespace": "default", "labels": labels or {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }
    pod = json_format.ParseDict(body, pod_pb2.Pod())
    strategy_for(POD).prepare_for_create(pod, NOW)
    return pod


def anti(**term: object) -> dict[str, object]:
    return {
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    }


def spread(**constraint: object) -> dict[str, object]:
    base: dict[str, object] = {
        "maxSkew": 1,
        "topologyKey": "zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    merged = {**base, **constraint}
    return {"topologySpreadConstraints": [{k: v for k, v in merged.items() if v is not None}]}


SELECTOR = {"matchLabels": {"app": "web"}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # validatePodAffinityTerm: topologyKey is required, and a label key.
        (anti(labelSelector=SELECTOR), f"{ANTI}.topologyKey: Required value: can not be empty"),
        (
            anti(labelSelector=SELECTOR),
            f'{ANTI}.topologyKey: Invalid value: "": name part must be non-empty',
        ),
        (
            anti(labelSelector=SELECTOR, topologyKey="a b"),
            f'{ANTI}.topologyKey: Invalid value: "a b": {LABEL_NAME_MSG}',
        ),
        # ValidatePodAffinityTermSelector: metav1 label selector rules, values indexed.
        (
            anti(
                topologyKey="zone",
                labelSelector={"matchExpressions": [{"key": "app", "operator": "Near"}]},
            ),
            f'{ANTI}.labelSelector.matchExpressions[0].operator: Invalid value: "Near": not a '
            "valid selector operator",
        ),
        (
            anti(
                topologyKey="zone",
                labelSelector={"matchExpressions": [{"key": "app", "operator": "In"}]},
            ),
            f"{ANTI}.labelSelector.matchExpressions[0].values: Required value: must be "
            "specified when `operator` is 'In' or 'NotIn'",
        ),
        (
            anti(
                topologyKey="zone",
                labelSelector={
                    "matchExpressions": [{"key": "app", "operator": "Exists", "values": ["a"]}]
                },
            ),
            f"{ANTI}.labelSelector.matchExpressions[0].values: Forbidden: may not be specified "
            "when `operator` is 'Exists' or 'DoesNotExist'",
        ),
        (
            anti(
                topologyKey="zone",
                labelSelector={
                    "matchExpressions": [{"key": "app", "operator": "In", "values": ["ok", "-x"]}]
                },
            ),
            f'{ANTI}.labelSelector.matchExpressions[0].values[1]: Invalid value: "-x": a valid '
            "label must be an empty string",
        ),
        (
            anti(topologyKey="zone", namespaceSelector={"matchLabels": {"bad key": "v"}}),
            f'{ANTI}.namespaceSelector.matchLabels: Invalid value: "bad key": {LABEL_NAME_MSG}',
        ),
        # kube names the list `namespace` in this message.
        (
            anti(topologyKey="zone", namespaces=["Team_A"]),
            f'{ANTI}.namespace: Invalid value: "Team_A": a lowercase RFC 1123 label must',
        ),
        # validateMatchLabelKeysAndMismatchLabelKeys.
        (
            anti(topologyKey="zone", matchLabelKeys=["app"]),
            f"{ANTI}.matchLabelKeys: Forbidden: must not be specified when labelSelector is not "
            "set",
        ),
        (
            anti(topologyKey="zone", mismatchLabelKeys=["app"]),
            f"{ANTI}.mismatchLabelKeys: Forbidden: must not be specified when labelSelector is "
            "not set",
        ),
        (
            anti(topologyKey="zone", labelSelector={}, matchLabelKeys=["a/b/c"]),
            f'{ANTI}.matchLabelKeys[0]: Invalid value: "a/b/c": a qualified name must',
        ),
        (
            anti(
                topologyKey="zone",
                labelSelector={},
                matchLabelKeys=["app"],
                mismatchLabelKeys=["app"],
            ),
            f'{ANTI}.matchLabelKeys[0]: Invalid value: "app": exists in both matchLabelKeys and '
            "mismatchLabelKeys",
        ),
        # A key in matchLabelKeys and in the user's selector: once folded, the selector names
        # it twice, and kube reports it at <term>[index] (no field name).
        (
            anti(topologyKey="zone", labelSelector=SELECTOR, matchLabelKeys=["app"]),
            f'{ANTI}[0]: Invalid value: "app": exists in both matchLabelKeys and labelSelector',
        ),
        # validateWeightedPodAffinityTerms.
        (
            {
                "affinity": {
                    "podAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 101, "podAffinityTerm": {"topologyKey": "zone"}}
                        ]
                    }
                }
            },
            f"{PREF}.weight: Invalid value: 101: must be in the range 1-100",
        ),
        (
            {
                "affinity": {
                    "podAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]
                    }
                }
            },
            f"{PREF}.podAffinityTerm.topologyKey: Required value: can not be empty",
        ),
        # validateTopologySpreadConstraints.
        (spread(maxSkew=0), f"{TSC}.maxSkew: Invalid value: 0: must be greater than zero"),
        (spread(topologyKey=""), f"{TSC}.topologyKey: Required value: can not be empty"),
        (
            spread(whenUnsatisfiable="Sometimes"),
            f'{TSC}.whenUnsatisfiable: Unsupported value: "Sometimes": supported values: '
            '"DoNotSchedule", "ScheduleAnyway"',
        ),
        (
            spread(whenUnsatisfiable=""),
            f'{TSC}.whenUnsatisfiable: Unsupported value: "": supported values: '
            '"DoNotSchedule", "ScheduleAnyway"',
        ),
        (
            {
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                ]
            },
            f'{TSC}.{{topologyKey, whenUnsatisfiable}}: Duplicate value: "{{zone, DoNotSchedule}}"',
        ),
        (spread(minDomains=0), f"{TSC}.minDomains: Invalid value: 0: must be greater than zero"),
        (
            spread(minDomains=3, whenUnsatisfiable="ScheduleAnyway"),
            f"{TSC}.minDomains: Invalid value: 3: can only use minDomains if "
            "whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway",
        ),
        (
            spread(nodeAffinityPolicy="Always"),
            f'{TSC}.nodeAffinityPolicy: Unsupported value: "Always": supported values: "Honor", '
            '"Ignore"',
        ),
        (
            spread(nodeTaintsPolicy="honor"),
            f'{TSC}.nodeTaintsPolicy: Unsupported value: "honor": supported values: "Honor", '
            '"Ignore"',
        ),
        (
            spread(labelSelector=None, matchLabelKeys=["app"]),
            f"{TSC}.matchLabelKeys: Forbidden: must not be specified when labelSelector is not set",
        ),
        (
            spread(matchLabelKeys=["app"]),
            f'{TSC}[0]: Invalid value: "app": exists in both matchLabelKeys and labelSelector',
        ),
        (
            spread(labelSelector={"matchExpressions": [{"key": "app", "operator": "Near"}]}),
            f'{TSC}.labelSelector.matchExpressions[0].operator: Invalid value: "Near": not a '
            "valid selector operator",
        ),
        # validateSchedulingGates: qualified names, no duplicates; the path is the entry.
        (
            {"schedulingGates": [{"name": "example.com/wait"}, {"name": "example.com/wait"}]},
            'spec.schedulingGates[1]: Duplicate value: "example.com/wait"',
        ),
        (
            {"schedulingGates": [{"name": "wait for it"}]},
            f'spec.schedulingGates[0]: Invalid value: "wait for it": {LABEL_NAME_MSG}',
        ),
        # ValidatePodCreate.
        (
            {"schedulingGates": [{"name": "wait"}], "nodeName": "n1"},
            "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared",
        ),
        # ValidatePreemptionPolicy.
        (
            {"preemptionPolicy": "Sometimes"},
            'spec.preemptionPolicy: Unsupported value: "Sometimes": supported values: '
            '"PreemptLowerPriority", "Never"',
        ),
    ],
)
def test_pod_placement_validation_messages(spec: dict[str, object], expected: str) -> None:
    errors = messages(strategy_for(POD).validate_create(placement_pod(spec)))
    assert any(e.startswith(expected) for e in errors), errors


@pytest.mark.parametrize(
    "spec",
    [
        anti(topologyKey="kubernetes.io/hostname", labelSelector=SELECTOR),
        # matchLabelKeys not in the selector: folded once, valid.
        anti(topologyKey="zone", labelSelector={}, matchLabelKeys=["app"]),
        anti(topologyKey="zone", labelSelector=SELECTOR, mismatchLabelKeys=["app"]),
        # A key the pod does not carry folds into nothing.
        anti(topologyKey="zone", labelSelector=SELECTOR, matchLabelKeys=["rev"]),
        spread(),
        spread(matchLabelKeys=["rev"], minDomains=2, nodeAffinityPolicy="Ignore"),
        spread(whenUnsatisfiable="ScheduleAnyway", nodeTaintsPolicy="Honor"),
        {"schedulingGates": [{"name": "example.com/wait"}, {"name": "other"}]},
        {"preemptionPolicy": "Never"},
    ],
)
def test_valid_pod_placement_fields(spec: dict[str, object]) -> None:
    assert (
        messages(
            strategy_for(POD).validate_create(
                placement_pod(spec, labels={"app": "web", "rev": "7"})
            )
        )
        == []
    )


def _lease(seconds: int, nanos: int = 0) -> lease_pb2.Lease:
    lease = lease_pb2.Lease(metadata=meta_pb2.ObjectMeta(name="n1", namespace="kube-node-lease"))
    lease.spec.leaseDurationSeconds = 40
    lease.spec.renewTime.seconds, lease.spec.renewTime.nanos = seconds, nanos
    return lease


def _pod_condition_at(seconds: int) -> pod_pb2.Pod:
    pod = make_pod()
    pod.status.conditions.add(type="Ready", status="True").lastTransitionTime.seconds = seconds
    return pod


def _node_heartbeat_at(seconds: int) -> node_pb2.Node:
    node = node_pb2.Node(metadata=meta_pb2.ObjectMeta(name="n1"))
    node.status.conditions.add(type="Ready", status="True").lastHeartbeatTime.seconds = seconds
    return node


def _managed_at(seconds: int) -> pod_pb2.Pod:
    pod = make_pod()
    pod.metadata.managedFields.add(manager="m", operation="Update").time.seconds = seconds
    return pod


TIME_RANGE = "must be a time from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z"
FINITE = "must be a finite number: JSON has no NaN or Infinity"


@pytest.mark.parametrize(
    ("info", "obj", "status_only", "expected"),
    [
        # gRPC clients can send any seconds and nanos; JSON (the REST API) prints only years
        # 1 to 9999, and one such stored Lease made every REST list and watch of leases a 500.
        (LEASE, _lease(253402300799, 999_999_999), False, []),
        (LEASE, _lease(-62135596800), False, []),
        (
            LEASE,
            _lease(2**62),
            False,
            [f'spec.renewTime: Invalid value: "{{seconds: {2**62}, nanos: 0}}": {TIME_RANGE}'],
        ),
        (
            LEASE,
            _lease(-62135596801),
            False,
            [f'spec.renewTime: Invalid value: "{{seconds: -62135596801, nanos: 0}}": {TIME_RANGE}'],
        ),
        (
            LEASE,
            _lease(1, -1),
            False,
            [f'spec.renewTime: Invalid value: "{{seconds: 1, nanos: -1}}": {TIME_RANGE}'],
        ),
        (
            LEASE,
            _lease(1, 10**9),
            False,
            [f'spec.renewTime: Invalid value: "{{seconds: 1, nanos: 1000000000}}": {TIME_RANGE}'],
        ),
        (
            POD,
            _pod_condition_at(2**40),
            True,
            [
                "status.conditions[0].lastTransitionTime: Invalid value: "
                f'"{{seconds: {2**40}, nanos: 0}}": {TIME_RANGE}'
            ],
        ),
        (
            NODE,
            _node_heartbeat_at(-(2**40)),
            True,
            [
                "status.conditions[0].lastHeartbeatTime: Invalid value: "
                f'"{{seconds: {-(2**40)}, nanos: 0}}": {TIME_RANGE}'
            ],
        ),
        (
            POD,
            _managed_at(2**40),
            False,
            [
                "metadata.managedFields[0].time: Invalid value: "
                f'"{{seconds: {2**40}, nanos: 0}}": {TIME_RANGE}'
            ],
        ),
    ],
)
def test_times_must_be_printable_as_rfc3339(
    info: KindInfo, obj: Message, status_only: bool, expected: list[str]
) -> None:
    errors = (
        strategy_for(info).validate_status_update(obj, obj)
        if status_only
        else strategy_for(info).validate_create(obj)
    )
    assert messages(errors) == expected


def _managed_fields(fields: dict[str, Any]) -> pod_pb2.Pod:
    pod = make_pod()
    entry = pod.metadata.managedFields.add(manager="m", operation="Update")
    entry.fieldsV1.update(fields)
    return pod


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # JSON has no NaN or Infinity: a gRPC client's fieldsV1 holding one made every REST
        # list and watch of its kind a 500 (found on a Role).
        ({"f:spec": {"f:replicas": {}}, "n": 1.5}, []),
        (
            {"n": math.nan},
            [f'metadata.managedFields[0].fieldsV1[n]: Invalid value: "NaN or Infinity": {FINITE}'],
        ),
        (
            {"f:spec": {"deep": [1, math.inf]}},
            [
                "metadata.managedFields[0].fieldsV1[f:spec][deep][1]: Invalid value: "
                f'"NaN or Infinity": {FINITE}'
            ],
        ),
    ],
)
def test_numbers_must_be_printable_as_json(fields: dict[str, object], expected: list[str]) -> None:
    assert messages(strategy_for(POD).validate_create(_managed_fields(fields))) == expected
