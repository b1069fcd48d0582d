"""Create-time pod mutations (apiserver/podmutation.py) and the update rules for gated pods,
each row naming the Kubernetes v1.36 behaviour it checks (pkg/registry/core/pod/strategy.go,
ValidatePodUpdate)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf import json_format

from apiserver.podmutation import SCHEDULING_GATED, SCHEDULING_GATED_MESSAGE
from apiserver.registry import strategy_for
from tinykube.kinds import POD
from tinykube.v1 import meta_pb2, pod_pb2

NOW = datetime(2026, 1, 1, tzinfo=UTC)
STRATEGY = strategy_for(POD)


def created(spec: dict[str, object], labels: dict[str, str] | None = None) -> pod_pb2.Pod:
    body = {
        "metadata": {
            "name": "web",
            "namespace": "default",
            "labels": {"app": "web", "rev": "7"} if labels is None else labels,
        },
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }
    pod = json_format.ParseDict(body, pod_pb2.Pod())
    STRATEGY.prepare_for_create(pod, NOW)
    return pod


def expressions(selector: meta_pb2.LabelSelector) -> list[tuple[str, str, list[str]]]:
    return [(e.key, e.operator, list(e.values)) for e in selector.matchExpressions]


def term(**fields: object) -> dict[str, object]:
    return {"topologyKey": "zone", **fields}


# ---- folding matchLabelKeys / mismatchLabelKeys ------------------------------------------------


def test_affinity_terms_fold_match_and_mismatch_label_keys_from_the_pods_labels() -> None:
    pod = created(
        {
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        term(labelSelector={"matchLabels": {"tier": "db"}}, matchLabelKeys=["rev"])
                    ],
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 5,
                            "podAffinityTerm": term(labelSelector={}, mismatchLabelKeys=["app"]),
                        }
                    ],
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        term(labelSelector={}, matchLabelKeys=["app"], mismatchLabelKeys=["rev"])
                    ]
                },
            }
        }
    )
    aff = pod.spec.affinity
    required = aff.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]
    assert expressions(required.labelSelector) == [("rev", "In", ["7"])]
    assert dict(required.labelSelector.matchLabels) == {"tier": "db"}
    assert list(required.matchLabelKeys) == ["rev"]  # the keys stay, as in Kubernetes
    preferred = aff.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm
    assert expressions(preferred.labelSelector) == [("app", "NotIn", ["web"])]
    anti = aff.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]
    assert expressions(anti.labelSelector) == [("app", "In", ["web"]), ("rev", "NotIn", ["7"])]
    assert strategy_for(POD).validate_create(pod) == []


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # applyLabelKeysToLabelSelector skips a key the pod does not carry.
        ({"labelSelector": {}, "matchLabelKeys": ["missing"]}, []),
        # A term without labelSelector selects nothing; kube leaves it (validation refuses it).
        ({"matchLabelKeys": ["app"]}, None),
        ({"labelSelector": {}, "matchLabelKeys": []}, []),
    ],
)
def test_affinity_folding_leaves_what_kube_leaves(
    fields: dict[str, object], expected: list[tuple[str, str, list[str]]] | None
) -> None:
    pod = created(
        {
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [term(**fields)]
                }
            }
        }
    )
    got = pod.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]
    if expected is None:
        assert not got.HasField("labelSelector")
    else:
        assert expressions(got.labelSelector) == expected


def test_spread_constraints_fold_match_label_keys_as_v136_selector_merge() -> None:
    pod = created(
        {
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                    "matchLabelKeys": ["rev", "missing"],
                },
                {
                    "maxSkew": 1,
                    "topologyKey": "host",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "matchLabelKeys": ["rev"],
                },
            ]
        }
    )
    first, second = pod.spec.topologySpreadConstraints
    assert expressions(first.labelSelector) == [("rev", "In", ["7"])]
    assert list(first.matchLabelKeys) == ["rev", "missing"]
    assert not second.HasField("labelSelector")


def test_replica_set_templates_are_not_folded() -> None:
    from tinykube.kinds import REPLICA_SET
    from tinykube.v1 import replicaset_pb2

    rs = json_format.ParseDict(
        {
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [{"name": "c", "image": "x"}],
                        "affinity": {
                            "podAntiAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": [
                                    term(labelSelector={}, matchLabelKeys=["app"])
                                ]
                            }
                        },
                    },
                },
            },
        },
        replicaset_pb2.ReplicaSet(),
    )
    strategy_for(REPLICA_SET).prepare_for_create(rs, NOW)
    anti = rs.spec.template.spec.affinity.podAntiAffinity
    t = anti.requiredDuringSchedulingIgnoredDuringExecution
    assert expressions(t[0].labelSelector) == []  # folded when each pod is created
    assert strategy_for(REPLICA_SET).validate_create(rs) == []


# ---- scheduling-gated condition, preemptionPolicy ---------------------------------------------


def test_gated_pod_is_created_with_the_scheduling_gated_condition() -> None:
    pod = created({"schedulingGates": [{"name": "example.com/wait"}]})
    [cond] = pod.status.conditions
    assert (cond.type, cond.status, cond.reason, cond.message) == (
        "PodScheduled",
        "False",
        SCHEDULING_GATED,
        SCHEDULING_GATED_MESSAGE,
    )
    assert SCHEDULING_GATED_MESSAGE == "Scheduling is blocked due to non-empty scheduling gates"
    assert cond.lastTransitionTime.ToDatetime(tzinfo=UTC) == NOW
    assert list(created({}).status.conditions) == []


def test_client_conditions_are_dropped_before_the_gated_one_is_added() -> None:
    body = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x"}], "schedulingGates": [{"name": "g"}]},
        "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]},
    }
    pod = json_format.ParseDict(body, pod_pb2.Pod())
    STRATEGY.prepare_for_create(pod, NOW)
    assert [(c.status, c.reason) for c in pod.status.conditions] == [("False", SCHEDULING_GATED)]


@pytest.mark.parametrize(("given", "stored"), [("", "PreemptLowerPriority"), ("Never", "Never")])
def test_preemption_policy_defaults_to_preempt_lower_priority(given: str, stored: str) -> None:
    pod = created({"preemptionPolicy": given} if given else {})
    assert pod.spec.preemptionPolicy == stored


# ---- updates -----------------------------------------------------------------------------------

Edit = Callable[[pod_pb2.Pod], None]
GATED: dict[str, object] = {
    "schedulingGates": [{"name": "a"}, {"name": "b"}],
    "nodeSelector": {"disk": "ssd"},
}
NSA = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def required_terms(pod: pod_pb2.Pod) -> Any:
    required = pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    return required.nodeSelectorTerms


def with_required_term(pod: pod_pb2.Pod) -> pod_pb2.Pod:
    required_terms(pod).add().matchExpressions.add(key="zone", operator="In", values=["a"])
    return pod


def remove_gate(pod: pod_pb2.Pod) -> None:
    del pod.spec.schedulingGates[0]


def add_gate(pod: pod_pb2.Pod) -> None:
    pod.spec.schedulingGates.add(name="c")


def add_node_selector(pod: pod_pb2.Pod) -> None:
    pod.spec.nodeSelector["zone"] = "a"


def change_node_selector(pod: pod_pb2.Pod) -> None:
    pod.spec.nodeSelector["disk"] = "hdd"


def narrow_affinity(pod: pod_pb2.Pod) -> None:
    required_terms(pod)[0].matchExpressions.add(key="rack", operator="Exists")


def add_affinity_term(pod: pod_pb2.Pod) -> None:
    required_terms(pod).add().matchExpressions.add(key="rack", operator="Exists")


def mutate_affinity(pod: pod_pb2.Pod) -> None:
    required_terms(pod)[0].matchExpressions[0].values[:] = ["b"]


def prefer_node(pod: pod_pb2.Pod) -> None:
    pref = pod.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution.add(
        weight=1
    )
    pref.preference.matchExpressions.add(key="zone", operator="Exists")


def add_toleration(pod: pod_pb2.Pod) -> None:
    pod.spec.tolerations.add(key="k", operator="Exists", effect="NoSchedule")


def change_toleration(pod: pod_pb2.Pod) -> None:
    pod.spec.tolerations[0].value = "other"


def toleration_seconds(pod: pod_pb2.Pod) -> None:
    pod.spec.tolerations[0].tolerationSeconds = 60


def anti_affinity(pod: pod_pb2.Pod) -> None:
    t = pod.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution.add()
    t.topologyKey = "zone"
    t.labelSelector.matchLabels["app"] = "web"


def set_priority(pod: pod_pb2.Pod) -> None:
    pod.spec.priority = 5


FORBIDDEN_SPEC = "spec: Forbidden: pod updates may not change fields other than "


@pytest.mark.parametrize(
    ("start", "edit", "expected"),
    [
        # validateOnlyDeletedSchedulingGates
        (GATED, remove_gate, None),
        (
            GATED,
            add_gate,
            "spec.schedulingGates[2].name: Forbidden: only deletion is allowed, but found new "
            "scheduling gate 'c'",
        ),
        (
            {},
            add_gate,
            "spec.schedulingGates[0].name: Forbidden: only deletion is allowed, but found new "
            "scheduling gate 'c'",
        ),
        # Gated pods: additions to nodeSelector only.
        (GATED, add_node_selector, None),
        (
            GATED,
            change_node_selector,
            'spec.nodeSelector: Invalid value: {"disk":"hdd"}: only additions to '
            "spec.nodeSelector are allowed (no mutations or deletions)",
        ),
        ({"nodeSelector": {"disk": "ssd"}}, add_node_selector, FORBIDDEN_SPEC),
        # Gated pods: required node affinity may narrow within its terms.
        ("gated+affinity", narrow_affinity, None),
        (
            "gated+affinity",
            add_affinity_term,
            f"{NSA}: Invalid value: [",
        ),
        (
            "gated+affinity",
            mutate_affinity,
            f"{NSA}[0]: Invalid value: "
            '{"matchExpressions":[{"key":"zone","operator":"In","values":["b"]}]}: only '
            "additions are allowed (no mutations or deletions)",
        ),
        (GATED, add_affinity_term, None),  # no required affinity yet: anything goes
        (GATED, prefer_node, None),
        ({}, prefer_node, FORBIDDEN_SPEC),
        # Pod (anti-)affinity stays immutable even while gated (matchLabelKeys folding).
        (GATED, anti_affinity, FORBIDDEN_SPEC),
        (GATED, set_priority, FORBIDDEN_SPEC),
        # validateOnlyAddedTolerations, for every pod.
        ("tolerations", add_toleration, None),
        ("tolerations", toleration_seconds, None),
        (
            "tolerations",
            change_toleration,
            "spec.tolerations: Forbidden: existing toleration can not be modified except its "
            "tolerationSeconds",
        ),
    ],
)
def test_pod_update_rules(start: object, edit: Edit, expected: str | None) -> None:
    if start == "gated+affinity":
        old = with_required_term(created(GATED))
    elif start == "tolerations":
        old = created(
            {
                "tolerations": [
                    {"key": "k", "value": "v", "effect": "NoExecute", "tolerationSeconds": 5}
                ]
            }
        )
    else:
        old = created(start)  # type: ignore[arg-type]
    new = pod_pb2.Pod()
    new.CopyFrom(old)
    edit(new)
    STRATEGY.prepare_for_update(new, old)
    errors = [str(e) for e in STRATEGY.validate_update(new, old)]
    if expected is None:
        assert errors == []
    else:
        assert any(e.startswith(expected) for e in errors), errors


def test_removing_the_last_gate_leaves_the_condition_to_the_scheduler() -> None:
    old = created({"schedulingGates": [{"name": "a"}]})
    new = pod_pb2.Pod()
    new.CopyFrom(old)
    del new.spec.schedulingGates[:]
    STRATEGY.prepare_for_update(new, old)
    assert strategy_for(POD).check_update(new, old) == []
    # Update keeps the status: the condition stays until Bind or an Unschedulable verdict.
    assert [c.reason for c in new.status.conditions] == [SCHEDULING_GATED]
    assert new.metadata.generation == old.metadata.generation + 1
