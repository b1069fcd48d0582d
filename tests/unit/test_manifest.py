"""Manifests: Kubernetes-shaped YAML/JSON to protobuf and back, strictly."""

from __future__ import annotations

import json

import pytest
import yaml
from google.protobuf import json_format, struct_pb2

from tinykube.manifest import (
    ManifestError,
    load_manifests,
    parse_object,
    to_dict,
    to_json,
    to_yaml,
    whole_numbers,
)
from tinykube.v1 import lease_pb2, node_pb2, pod_pb2, replicaset_pb2

MULTI = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: prod
  labels: {app: web}
  creationTimestamp: 2024-01-01T00:00:00Z
spec:
  containers:
  - name: c
    image: nginx
    command: [sleep, "30"]
    resources:
      requests: {cpu: 1, memory: 128Mi}
      limits: {cpu: 1.5}
  tolerations:
  - {key: dedicated, operator: Equal, value: gpu, effect: NoSchedule, tolerationSeconds: 30}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: x}]}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: l, namespace: kube-node-lease}
spec: {holderIdentity: node-1, leaseDurationSeconds: 40}
---
apiVersion: v1
kind: Node
metadata: {name: n1}
status:
  capacity: {cpu: 4, pods: 110}
---
"""


def test_multi_document_yaml_becomes_typed_objects() -> None:
    objs = load_manifests(MULTI)
    assert [o.info.kind for o in objs] == ["Pod", "ReplicaSet", "Lease", "Node"]
    assert [o.index for o in objs] == [1, 2, 3, 4]

    pod = objs[0].obj
    assert isinstance(pod, pod_pb2.Pod)
    assert (objs[0].name, objs[0].namespace) == ("web", "prod")
    assert pod.metadata.labels == {"app": "web"}
    assert pod.metadata.creationTimestamp.seconds == 1704067200
    container = pod.spec.containers[0]
    assert list(container.command) == ["sleep", "30"]
    # YAML numbers in quantity maps are quantities, as Kubernetes accepts them.
    assert dict(container.resources.requests) == {"cpu": "1", "memory": "128Mi"}
    assert dict(container.resources.limits) == {"cpu": "1.5"}
    assert pod.spec.tolerations[0].tolerationSeconds == 30

    rs = objs[1].obj
    assert isinstance(rs, replicaset_pb2.ReplicaSet)
    # A ReplicaSet is an apps/v1 object, as in Kubernetes.
    assert rs.apiVersion == "apps/v1"
    assert rs.spec.replicas == 3
    assert rs.spec.template.spec.containers[0].image == "x"

    lease = objs[2].obj
    assert isinstance(lease, lease_pb2.Lease)
    assert lease.spec.holderIdentity == "node-1"

    node = objs[3].obj
    assert isinstance(node, node_pb2.Node)
    assert dict(node.status.capacity) == {"cpu": "4", "pods": "110"}


def test_json_input_and_kind_list() -> None:
    text = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}},
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b"}},
            ],
        }
    )
    assert [o.name for o in load_manifests(text)] == ["a", "b"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containrs: []}",
            'error in document 2 of f.yaml: unknown field "spec.containrs"',
        ),
        (
            "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c, imag: x}]}",
            'unknown field "spec.containers[0].imag"',
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x, lables: {}}",
            'unknown field "metadata.lables"',
        ),
        ("apiVersion: v1\nkind: Pod\nspec: {priority: high}", "spec.priority: "),
        ("apiVersion: v1\nkind: Pod\nspec: {containers: {}}", "spec.containers: expected a list"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {labels: {a: 1}}", "metadata.labels: "),
        ("kind: Pod", "Object 'apiVersion' is missing"),
        ("apiVersion: v1", "Object 'Kind' is missing"),
        ("apiVersion: apps/v1\nkind: StatefulSet", 'no matches for kind "StatefulSet"'),
        ("apiVersion: apps/v1\nkind: Pod", 'no matches for kind "Pod" in version "apps/v1"'),
        ("- a\n- b", "expected an object, got list"),
    ],
)
def test_bad_documents_name_document_and_field(doc: str, message: str) -> None:
    text = "apiVersion: v1\nkind: Node\nmetadata: {name: ok}\n---\n" + doc
    with pytest.raises(ManifestError) as info:
        load_manifests(text, "f.yaml")
    assert message in str(info.value)
    assert "document 2" in str(info.value)


def test_yaml_syntax_error_is_a_manifest_error() -> None:
    with pytest.raises(ManifestError, match=r"error parsing f\.yaml"):
        load_manifests("a: [", "f.yaml")


def test_empty_documents_are_skipped() -> None:
    assert load_manifests("---\n---\n") == []


def test_output_omits_empty_fields_and_prints_int64_as_numbers() -> None:
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name = "web"
    pod.metadata.generation = 2
    pod.metadata.labels["b"] = "2"
    pod.metadata.labels["a"] = "1"
    pod.spec.terminationGracePeriodSeconds = 30
    data = to_dict(pod, zero_fields=False)
    assert data == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "generation": 2, "labels": {"a": "1", "b": "2"}},
        "spec": {"terminationGracePeriodSeconds": 30},
    }
    assert list(data["metadata"]["labels"]) == ["a", "b"]
    # Printed, the fields Kubernetes always writes are there, with their zero values.
    assert to_dict(pod)["spec"] == {"terminationGracePeriodSeconds": 30, "containers": []}
    assert to_dict(pod)["status"] == {}


def test_output_carries_the_fields_kubernetes_always_prints() -> None:
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name = "web"
    container = pod.spec.containers.add(name="app", image="busybox")
    container.env.add(name="CPU").valueFrom.resourceFieldRef.resource = "limits.cpu"
    condition = pod.status.conditions.add(type="Ready", status="False")
    condition.lastTransitionTime.FromSeconds(1_700_000_000)
    status = pod.status.containerStatuses.add(name="app", image="busybox")
    status.state.waiting.reason = "ContainerCreating"
    status.started = False
    data = to_dict(pod)
    assert data["spec"]["containers"][0]["resources"] == {}
    assert data["spec"]["containers"][0]["env"][0]["valueFrom"]["resourceFieldRef"] == {
        "resource": "limits.cpu",
        "divisor": "0",
    }
    assert data["status"]["conditions"] == [
        {
            "type": "Ready",
            "status": "False",
            "lastTransitionTime": "2023-11-14T22:13:20Z",
            "lastProbeTime": None,
        }
    ]
    assert data["status"]["containerStatuses"] == [
        {
            "name": "app",
            "state": {"waiting": {"reason": "ContainerCreating"}},
            "image": "busybox",
            "started": False,
            "lastState": {},
            "ready": False,
            "restartCount": 0,
            "imageID": "",
        }
    ]
    # Each object gets its own copy of a zero container: editing one leaves the next alone.
    data["status"]["containerStatuses"][0]["lastState"]["x"] = 1
    assert to_dict(pod)["status"]["containerStatuses"][0]["lastState"] == {}
    # The zeros read back as the object they came from.
    assert parse_object(data | {"status": to_dict(pod)["status"]}).obj == pod


def test_round_trip_through_yaml_and_json() -> None:
    objs = [o.obj for o in load_manifests(MULTI)]
    single = yaml.safe_load(to_yaml(objs[0]))
    assert parse_object(single).obj == objs[0]
    listed = yaml.safe_load(to_yaml(objs, resource_version="42"))
    assert listed["kind"] == "List"
    assert listed["metadata"] == {"resourceVersion": "42"}
    assert [parse_object(d).obj for d in listed["items"]] == objs
    as_json = json.loads(to_json(objs))
    assert [parse_object(d).obj for d in as_json["items"]] == objs


@pytest.mark.parametrize(
    ("seconds", "nanos", "expected"),
    [
        (1796119200, 0, "2026-12-01T10:00:00.000000Z"),
        (1796119200, 123_000_000, "2026-12-01T10:00:00.123000Z"),
        (1796119200, 123_456_789, "2026-12-01T10:00:00.123456Z"),
    ],
)
def test_lease_times_are_micro_times_and_others_whole_seconds(
    seconds: int, nanos: int, expected: str
) -> None:
    lease = lease_pb2.Lease(apiVersion="coordination.k8s.io/v1", kind="Lease")
    lease.spec.renewTime.seconds = seconds
    lease.spec.renewTime.nanos = nanos
    lease.spec.acquireTime.seconds = seconds
    lease.metadata.creationTimestamp.seconds = seconds
    data = to_dict(lease)
    assert data["spec"]["renewTime"] == expected
    assert data["spec"]["acquireTime"] == "2026-12-01T10:00:00.000000Z"
    assert data["metadata"]["creationTimestamp"] == "2026-12-01T10:00:00Z"


CONTAINER = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, %s}]}"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: r}\nspec: {replicas: two}",
            'spec.replicas: invalid type: got string "two", expected integer',
        ),
        (
            "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: r}\nspec: {replicas: 1.5}",
            "spec.replicas: invalid type: got number 1.5, expected integer",
        ),
        (
            "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: r}\n"
            "spec: {replicas: 99999999999}",
            "spec.replicas: value 99999999999 is out of range for int32",
        ),
        (
            CONTAINER % "image: 1",
            "spec.containers[0].image: invalid type: got integer 1, expected string",
        ),
        (
            CONTAINER % "image: b, command: [sh, 2]",
            "spec.containers[0].command[1]: invalid type: got integer 2, expected string",
        ),
        (
            CONTAINER % "image: b, ports: [{containerPort: true}]",
            "spec.containers[0].ports[0].containerPort: invalid type: got boolean true, "
            "expected integer",
        ),
        (
            CONTAINER % "image: b, ports: [{containerPort: {a: 1}}]",
            'spec.containers[0].ports[0].containerPort: invalid type: got object {"a": 1}, '
            "expected integer",
        ),
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {unschedulable: 1}",
            "spec.unschedulable: invalid type: got integer 1, expected boolean",
        ),
    ],
)
def test_wrong_scalar_types_name_the_field_in_json_terms(doc: str, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifests(doc, "f.yaml")
    assert str(info.value) == f"error in document 1 of f.yaml: {message}"


@pytest.mark.parametrize(
    ("doc", "value"),
    [
        ("apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: r}\nspec: {replicas: 2}", 2),
        ('apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: r}\nspec: {replicas: "2"}', 2),
        ("apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: r}\nspec: {replicas: 2.0}", 2),
    ],
)
def test_integers_in_their_json_forms_are_accepted(doc: str, value: int) -> None:
    assert load_manifests(doc)[0].obj.spec.replicas == value  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "a: [\n",
            "error parsing f.yaml: line 2, column 1: expected the node content, but "
            "found '<stream end>' (while parsing a flow node)",
        ),
        (
            "a: b\n c: d\n",
            "error parsing f.yaml: line 2, column 3: mapping values are not allowed here",
        ),
        ("a: " + "9" * 5000 + "\n", "error parsing f.yaml: line 1, column 4: integer too long"),
    ],
)
def test_yaml_errors_name_the_file_and_position_not_pyyaml_internals(
    text: str, message: str
) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifests(text, "f.yaml")
    assert str(info.value) == message
    assert "<unicode string>" not in str(info.value)


def test_a_number_as_a_resource_field_divisor_is_a_quantity() -> None:
    (loaded,) = load_manifests(
        """
apiVersion: v1
kind: Pod
metadata: {name: env}
spec:
  containers:
  - name: c
    image: busybox
    env:
    - name: CPU
      valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1}}
    - name: MEM
      valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}
"""
    )
    pod = loaded.obj
    assert isinstance(pod, pod_pb2.Pod)
    cpu, mem = pod.spec.containers[0].env
    assert (cpu.valueFrom.resourceFieldRef.divisor, mem.valueFrom.resourceFieldRef.divisor) == (
        "1",
        "1Mi",
    )


SERVICE = (
    "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"
    "spec: {ports: [{port: 80, targetPort: %s}]}"
)
INT32 = "json: cannot unmarshal number %s into Go value of type int32"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (".nan", INT32 % "NaN"),
        (".inf", INT32 % "Infinity"),
        ("-.inf", INT32 % "-Infinity"),
        ("1.5", INT32 % "1.5"),
        ("2147483648", INT32 % "2147483648"),
        ("9" * 400, INT32 % ("9" * 37 + "...")),
        ("true", "invalid type: got boolean true, expected an integer or a string (IntOrString)"),
        ("[8080]", "invalid type: got array [8080], expected an integer or a string (IntOrString)"),
    ],
)
def test_int_or_string_takes_a_string_or_an_int32_as_kubes_unmarshaller(
    value: str, message: str
) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifests(SERVICE % value, "f.yaml")
    assert str(info.value) == f"error in document 1 of f.yaml: spec.ports[0].targetPort: {message}"


@pytest.mark.parametrize(
    ("value", "expected"), [("8080", 8080.0), ("8080.0", 8080.0), ("http", "http")]
)
def test_int_or_string_accepts_ints_whole_numbers_and_names(value: str, expected: object) -> None:
    svc = load_manifests(SERVICE % value)[0].obj
    port = svc.spec.ports[0].targetPort  # type: ignore[attr-defined]
    assert (port.string_value or port.number_value) == expected


def test_hold_big_ints_wraps_only_what_a_double_cannot_hold() -> None:
    from tinykube.manifest import BIG_INT_KEY, hold_big_ints

    data = {"a": [2**53, 2**53 + 1, -(2**63), 2**63 - 1, 2**63, True, 1.5], "b": {"c": -(2**60)}}
    held = hold_big_ints(data)
    assert held == {
        "a": [
            2**53,
            {BIG_INT_KEY: str(2**53 + 1)},
            {BIG_INT_KEY: str(-(2**63))},
            {BIG_INT_KEY: str(2**63 - 1)},
            2**63,  # past int64: kube too has only a float64 for it
            True,
            1.5,
        ],
        "b": {"c": {BIG_INT_KEY: str(-(2**60))}},
    }
    assert whole_numbers(held) == data


def test_whole_numbers_turns_whole_doubles_back_into_integers_and_nothing_else() -> None:
    nan, inf = float("nan"), float("inf")
    got = whole_numbers(
        {
            "port": 80.0,
            "ratio": 0.5,
            "flag": True,  # a bool is an int in Python, never a float: kept as it is
            "off": False,
            "count": 3,
            "name": "80",
            "none": None,
            "negzero": -0.0,
            "big": 1e300,
            "nested": [[1.0, 2.5], {"deep": [{"x": 7.0}]}],
            "nan": nan,
            "inf": inf,
            "-inf": -inf,
        }
    )
    assert got["port"] == 80 and type(got["port"]) is int
    assert got["ratio"] == 0.5
    assert got["flag"] is True and got["off"] is False
    assert got["count"] == 3 and got["name"] == "80" and got["none"] is None
    assert got["negzero"] == 0 and type(got["negzero"]) is int
    assert got["big"] == int(1e300) and type(got["big"]) is int
    assert got["nested"] == [[1, 2.5], {"deep": [{"x": 7}]}]
    assert type(got["nested"][0][0]) is int and type(got["nested"][1]["deep"][0]["x"]) is int
    assert got["nan"] != got["nan"] and got["inf"] == inf and got["-inf"] == -inf
    assert json.dumps(whole_numbers([1.0, [2.0], {"a": 3.0}])) == '[1, [2], {"a": 3}]'
    # What the callers give it: a Struct read back as JSON, numbers all doubles.
    struct = struct_pb2.Struct()
    struct.update({"replicas": 3, "limits": {"cpu": 0.25}, "ports": [8080, 9090]})
    assert whole_numbers(json_format.MessageToDict(struct)) == {
        "replicas": 3,
        "limits": {"cpu": 0.25},
        "ports": [8080, 9090],
    }
    # Tuples and other values are not JSON from a Struct: passed through untouched.
    assert whole_numbers((1.0,)) == (1.0,)
