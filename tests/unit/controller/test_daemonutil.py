"""The DaemonSet controller's pure parts: node eligibility, daemon tolerations, the pod a node
gets, the rolling update arithmetic and plan, revision hashing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.protobuf import json_format

from controller import daemonutil as du
from tinykube.meta import set_int_or_string
from tinykube.v1 import daemonset_pb2, node_pb2, pod_pb2

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def make_ds(
    *,
    node_selector: dict[str, str] | None = None,
    tolerations: list[pod_pb2.Toleration] | None = None,
    host_network: bool = False,
    node_name: str = "",
    max_unavailable: int | str | None = 1,
    max_surge: int | str | None = 0,
    strategy: str = "RollingUpdate",
) -> daemonset_pb2.DaemonSet:
    ds = daemonset_pb2.DaemonSet()
    ds.metadata.name = "agent"
    ds.metadata.namespace = "default"
    ds.metadata.uid = "ds-uid"
    ds.metadata.annotations[du.TEMPLATE_GENERATION_ANNOTATION] = "2"
    ds.spec.selector.matchLabels["app"] = "agent"
    tmpl = ds.spec.template
    tmpl.metadata.labels["app"] = "agent"
    tmpl.spec.containers.add(name="c", image="sleep")
    tmpl.spec.nodeSelector.update(node_selector or {})
    tmpl.spec.tolerations.extend(tolerations or [])
    tmpl.spec.hostNetwork = host_network
    tmpl.spec.nodeName = node_name
    ds.spec.updateStrategy.type = strategy
    if strategy == "RollingUpdate":
        ru = ds.spec.updateStrategy.rollingUpdate
        if max_unavailable is not None:
            set_int_or_string(ru.maxUnavailable, max_unavailable)
        if max_surge is not None:
            set_int_or_string(ru.maxSurge, max_surge)
    return ds


def make_node(
    name: str = "n1",
    labels: dict[str, str] | None = None,
    taints: list[tuple[str, str]] = (),  # type: ignore[assignment]
) -> node_pb2.Node:
    node = node_pb2.Node()
    node.metadata.name = name
    node.metadata.labels.update(labels or {})
    for key, effect in taints:
        node.spec.taints.add(key=key, effect=effect)
    return node


def required(ds: daemonset_pb2.DaemonSet, *terms: pod_pb2.NodeSelectorTerm) -> None:
    na = ds.spec.template.spec.affinity.nodeAffinity
    na.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.extend(terms)


def expr(key: str, op: str, *values: str) -> pod_pb2.NodeSelectorTerm:
    return pod_pb2.NodeSelectorTerm(
        matchExpressions=[pod_pb2.NodeSelectorRequirement(key=key, operator=op, values=values)]
    )


def field(op: str, *values: str) -> pod_pb2.NodeSelectorTerm:
    return pod_pb2.NodeSelectorTerm(
        matchFields=[
            pod_pb2.NodeSelectorRequirement(key="metadata.name", operator=op, values=values)
        ]
    )


def _with_affinity(*terms: pod_pb2.NodeSelectorTerm) -> daemonset_pb2.DaemonSet:
    ds = make_ds()
    required(ds, *terms)
    return ds


TOL_NOEXEC = pod_pb2.Toleration(key="dedicated", operator="Exists", effect="NoExecute")

ELIGIBILITY = [
    ("a plain node", make_ds(), make_node(), (True, True)),
    (
        "nodeSelector matches",
        make_ds(node_selector={"disk": "ssd"}),
        make_node(labels={"disk": "ssd"}),
        (True, True),
    ),
    (
        "nodeSelector differs",
        make_ds(node_selector={"disk": "ssd"}),
        make_node(labels={"disk": "hdd"}),
        (False, False),
    ),
    (
        "nodeSelector label missing",
        make_ds(node_selector={"disk": "ssd"}),
        make_node(),
        (False, False),
    ),
    (
        "affinity In matches",
        _with_affinity(expr("zone", "In", "a", "b")),
        make_node(labels={"zone": "b"}),
        (True, True),
    ),
    (
        "affinity In misses",
        _with_affinity(expr("zone", "In", "a")),
        make_node(labels={"zone": "b"}),
        (False, False),
    ),
    (
        "terms are ORed",
        _with_affinity(expr("zone", "In", "a"), expr("zone", "In", "b")),
        make_node(labels={"zone": "b"}),
        (True, True),
    ),
    (
        "NotIn matches a node without the label",
        _with_affinity(expr("zone", "NotIn", "a")),
        make_node(),
        (True, True),
    ),
    (
        "Gt on a non-number",
        _with_affinity(expr("cpus", "Gt", "4")),
        make_node(labels={"cpus": "x"}),
        (False, False),
    ),
    (
        "Gt holds",
        _with_affinity(expr("cpus", "Gt", "4")),
        make_node(labels={"cpus": "8"}),
        (True, True),
    ),
    ("matchFields name In", _with_affinity(field("In", "n1")), make_node("n1"), (True, True)),
    (
        "matchFields name NotIn",
        _with_affinity(field("NotIn", "n1")),
        make_node("n1"),
        (False, False),
    ),
    (
        "an empty term matches nothing",
        _with_affinity(pod_pb2.NodeSelectorTerm()),
        make_node(),
        (False, False),
    ),
    ("template nodeName elsewhere", make_ds(node_name="n2"), make_node("n1"), (False, False)),
    ("template nodeName here", make_ds(node_name="n1"), make_node("n1"), (True, True)),
    (
        "untolerated NoSchedule: no new pod, the old stays",
        make_ds(),
        make_node(taints=[("dedicated", "NoSchedule")]),
        (False, True),
    ),
    (
        "untolerated NoExecute: none at all",
        make_ds(),
        make_node(taints=[("dedicated", "NoExecute")]),
        (False, False),
    ),
    (
        "tolerated NoExecute",
        make_ds(tolerations=[TOL_NOEXEC]),
        make_node(taints=[("dedicated", "NoExecute")]),
        (True, True),
    ),
    (
        "PreferNoSchedule is ignored",
        make_ds(),
        make_node(taints=[("dedicated", "PreferNoSchedule")]),
        (True, True),
    ),
    (
        "cordoned: tolerated",
        make_ds(),
        make_node(taints=[("node.kubernetes.io/unschedulable", "NoSchedule")]),
        (True, True),
    ),
    (
        "not ready: tolerated",
        make_ds(),
        make_node(taints=[("node.kubernetes.io/not-ready", "NoExecute")]),
        (True, True),
    ),
    (
        "unreachable: tolerated",
        make_ds(),
        make_node(taints=[("node.kubernetes.io/unreachable", "NoExecute")]),
        (True, True),
    ),
    (
        "memory pressure: tolerated",
        make_ds(),
        make_node(taints=[("node.kubernetes.io/memory-pressure", "NoSchedule")]),
        (True, True),
    ),
    (
        "network unavailable without hostNetwork",
        make_ds(),
        make_node(taints=[("node.kubernetes.io/network-unavailable", "NoSchedule")]),
        (False, True),
    ),
    (
        "network unavailable with hostNetwork",
        make_ds(host_network=True),
        make_node(taints=[("node.kubernetes.io/network-unavailable", "NoSchedule")]),
        (True, True),
    ),
]


@pytest.mark.parametrize(
    ("ds", "node", "want"), [c[1:] for c in ELIGIBILITY], ids=[c[0] for c in ELIGIBILITY]
)
def test_node_should_run(
    ds: daemonset_pb2.DaemonSet, node: node_pb2.Node, want: tuple[bool, bool]
) -> None:
    got = du.node_should_run(node, ds)
    assert (got.should_run, got.should_continue_running) == want


DEFAULT_KEYS = [
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
]


@pytest.mark.parametrize(
    ("given", "host_network", "want"),
    [
        ([], False, DEFAULT_KEYS),
        ([], True, [*DEFAULT_KEYS, ("node.kubernetes.io/network-unavailable", "NoSchedule")]),
        # the user's own toleration stays first; the daemon ones follow
        ([pod_pb2.Toleration(key="gpu", operator="Exists")], False, [("gpu", ""), *DEFAULT_KEYS]),
        # a not-ready toleration with a limit is replaced in place by the unlimited one
        (
            [
                pod_pb2.Toleration(
                    key="node.kubernetes.io/not-ready",
                    operator="Exists",
                    effect="NoExecute",
                    tolerationSeconds=300,
                )
            ],
            False,
            DEFAULT_KEYS,
        ),
    ],
)
def test_daemon_tolerations(
    given: list[pod_pb2.Toleration], host_network: bool, want: list[tuple[str, str]]
) -> None:
    spec = pod_pb2.PodSpec(tolerations=given, hostNetwork=host_network)
    du.add_daemon_tolerations(spec)
    assert [(t.key, t.effect) for t in spec.tolerations] == want
    for t in spec.tolerations:
        if t.key.startswith("node.kubernetes.io/"):
            assert t.operator == "Exists"
            assert not t.HasField("tolerationSeconds")
    again = pod_pb2.PodSpec()
    again.CopyFrom(spec)
    du.add_daemon_tolerations(again)
    assert again == spec  # idempotent


def test_pod_for_node_pins_the_node_through_affinity_not_node_name() -> None:
    ds = _with_affinity(expr("zone", "In", "a"))
    pref = (
        ds.spec.template.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution
    )
    pref.add(weight=5, preference=expr("disk", "In", "ssd"))
    pod = du.pod_for_node(ds, "n7", "abc123")
    assert pod.spec.nodeName == ""
    node_affinity = pod.spec.affinity.nodeAffinity
    required_terms = node_affinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms
    assert len(required_terms) == 1
    assert not required_terms[0].matchExpressions
    assert [(r.key, r.operator, list(r.values)) for r in required_terms[0].matchFields] == [
        ("metadata.name", "In", ["n7"])
    ]
    assert len(pod.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution) == 1
    assert dict(pod.metadata.labels) == {
        "app": "agent",
        "controller-revision-hash": "abc123",
        "pod-template-generation": "2",
    }
    assert pod.metadata.generateName == "agent-"
    (ref,) = pod.metadata.ownerReferences
    assert (ref.apiVersion, ref.kind, ref.name, ref.uid, ref.controller) == (
        "apps/v1",
        "DaemonSet",
        "agent",
        "ds-uid",
        True,
    )
    assert du.target_node(pod) == "n7"
    # the DaemonSet's own template is untouched
    assert not ds.spec.template.spec.tolerations


@pytest.mark.parametrize(
    ("node_name", "terms", "want"),
    [
        ("n1", [], "n1"),
        ("", [field("In", "n2")], "n2"),
        ("", [field("In", "n2", "n3")], None),
        ("", [expr("zone", "In", "a")], None),
        ("", [], None),
    ],
)
def test_target_node(
    node_name: str, terms: list[pod_pb2.NodeSelectorTerm], want: str | None
) -> None:
    pod = pod_pb2.Pod()
    pod.spec.nodeName = node_name
    req = pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    req.nodeSelectorTerms.extend(terms)
    assert du.target_node(pod) == want


@pytest.mark.parametrize(
    ("max_unavailable", "max_surge", "desired", "want"),
    [
        (1, 0, 10, (0, 1)),
        (3, 0, 10, (0, 3)),
        ("10%", 0, 15, (0, 2)),  # 1.5 rounds up, as GetScaledValueFromIntOrPercent(roundUp)
        ("10%", 0, 5, (0, 1)),
        ("100%", 0, 7, (0, 7)),
        (0, 1, 10, (1, 0)),
        (0, "25%", 10, (3, 0)),  # 2.5 up
        (0, 0, 4, (0, 1)),  # neither: one unavailable, as kube's updatedDesiredNodeCounts
        (0, 0, 0, (0, 0)),
    ],
)
def test_surge_and_unavailable_arithmetic(
    max_unavailable: int | str, max_surge: int | str, desired: int, want: tuple[int, int]
) -> None:
    ds = make_ds(max_unavailable=max_unavailable, max_surge=max_surge)
    assert du.max_surge_and_unavailable(ds, desired) == want


def test_on_delete_neither_surges_nor_limits() -> None:
    ds = make_ds(strategy="OnDelete")
    assert du.surge_count(ds, 10) == 0
    assert du.unavailable_count(ds, 10) == 0
    assert not du.allows_surge(ds)


HASH = "new"


def pod(name: str, *, new: bool = False, available: bool = True) -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    p.metadata.name = name
    p.metadata.labels[du.HASH_LABEL] = HASH if new else "old"
    p.status.phase = "Running"
    if available:
        p.status.conditions.add(type="Ready", status="True")
    return p


def all_nodes(_: str) -> bool:
    return True


PLANS = [
    (
        "maxUnavailable 1: one old pod at a time",
        1,
        0,
        {"a": [pod("pa")], "b": [pod("pb")], "c": [pod("pc")]},
        (["pa"], []),
    ),
    (
        "maxUnavailable 2",
        2,
        0,
        {"a": [pod("pa")], "b": [pod("pb")], "c": [pod("pc")]},
        (["pa", "pb"], []),
    ),
    (
        "an unavailable new pod uses up the budget",
        1,
        0,
        {"a": [pod("pa", new=True, available=False)], "b": [pod("pb")], "c": [pod("pc")]},
        ([], []),
    ),
    (
        "a node without a pod counts as unavailable",
        1,
        0,
        {"a": [], "b": [pod("pb")]},
        ([], []),
    ),
    (
        "an unavailable old pod is replaced whatever the budget",
        1,
        0,
        {"a": [pod("pa", available=False)], "b": [pod("pb")], "c": [pod("pc", new=True)]},
        (["pa"], []),
    ),
    (
        "50% of 4",
        "50%",
        0,
        {n: [pod(f"p{n}")] for n in "abcd"},
        (["pa", "pb"], []),
    ),
    (
        "done: nothing to do",
        1,
        0,
        {n: [pod(f"p{n}", new=True)] for n in "abc"},
        ([], []),
    ),
    (
        "surge 1: a new pod beside one old one",
        0,
        1,
        {"a": [pod("pa")], "b": [pod("pb")], "c": [pod("pc")]},
        ([], ["a"]),
    ),
    (
        "surge: the new pod is available, the old one goes and the next node surges",
        0,
        1,
        {"a": [pod("pa"), pod("qa", new=True)], "b": [pod("pb")]},
        (["pa"], ["b"]),
    ),
    (
        "surge: waiting for the new pod",
        0,
        1,
        {"a": [pod("pa"), pod("qa", new=True, available=False)], "b": [pod("pb")]},
        ([], []),
    ),
    (
        "surge: an unavailable old pod gets its new pod at once",
        0,
        1,
        {"a": [pod("pa", available=False)], "b": [pod("pb", available=False)]},
        ([], ["a", "b"]),
    ),
]


@pytest.mark.parametrize(
    ("max_unavailable", "max_surge", "node_to_pods", "want"),
    [p[1:] for p in PLANS],
    ids=[p[0] for p in PLANS],
)
def test_rolling_update_plan(
    max_unavailable: int | str,
    max_surge: int | str,
    node_to_pods: dict[str, list[pod_pb2.Pod]],
    want: tuple[list[str], list[str]],
) -> None:
    ds = make_ds(max_unavailable=max_unavailable, max_surge=max_surge)
    plan = du.rolling_update_plan(ds, node_to_pods, HASH, all_nodes, NOW)
    assert (plan.delete, plan.create) == want


def test_surge_keeps_a_pod_on_a_node_leaving_until_another_is_available() -> None:
    ds = make_ds(max_unavailable=0, max_surge=1)
    # b no longer qualifies; a's pod is old and available.
    node_to_pods = {"a": [pod("pa")], "b": [pod("pb")]}
    plan = du.rolling_update_plan(ds, node_to_pods, HASH, lambda n: n == "a", NOW)
    assert plan.delete == ["pb"]  # 2 available, 1 desired: one may go
    assert plan.create == ["a"]
    node_to_pods = {"a": [pod("pa", available=False)], "b": [pod("pb")]}
    plan = du.rolling_update_plan(ds, node_to_pods, HASH, lambda n: n == "a", NOW)
    assert plan.delete == []  # b's is the only available pod: it stays


def test_hash_depends_on_the_template_and_the_collision_count() -> None:
    ds = make_ds()
    h = du.compute_hash(ds.spec.template, None)
    assert h == du.compute_hash(make_ds().spec.template, None)
    assert set(h) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert 1 <= len(h) <= 10
    assert du.compute_hash(ds.spec.template, 1) != h
    other = make_ds()
    other.spec.template.spec.containers[0].image = "other"
    assert du.compute_hash(other.spec.template, None) != h


def test_a_revision_matches_its_template_only() -> None:
    ds = make_ds()
    cr = du.new_revision(ds, "h", 3)
    assert cr.metadata.name == "agent-h"
    assert cr.revision == 3
    assert dict(cr.metadata.labels) == {"app": "agent", "controller-revision-hash": "h"}
    assert dict(cr.metadata.annotations) == dict(ds.metadata.annotations)
    data = json_format.MessageToDict(du.revision_data(ds))
    assert data["spec"]["template"]["$patch"] == "replace"
    assert data["spec"]["template"]["metadata"]["labels"] == {"app": "agent"}
    assert du.revision_matches(ds, cr)
    ds.spec.template.spec.containers[0].image = "other"
    assert not du.revision_matches(ds, cr)
