"""Namespaces and PriorityClasses: defaults, validation in Kubernetes' words, and the
NamespaceLifecycle and Priority admission plugins over in-memory caches (no sockets)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from apiserver.admission import Admission, system_priority_classes
from apiserver.registry import fields_of, strategy_for
from apiserver.storage import KV, ListResult
from apiserver.watchcache import CachedObject, Codec
from tinykube.clock import FakeClock
from tinykube.errors import ForbiddenError, NotFoundError
from tinykube.kinds import NAMESPACE, POD, PRIORITY_CLASS, REPLICA_SET, SERVICE_ACCOUNT, KindInfo
from tinykube.meta import timestamp
from tinykube.v1 import (
    meta_pb2,
    namespace_pb2,
    pod_pb2,
    priorityclass_pb2,
    replicaset_pb2,
    serviceaccount_pb2,
)

NOW = datetime(2026, 12, 1, tzinfo=UTC)
PREFIX = "/registry"


def make_namespace(name: str = "team", **labels: str) -> namespace_pb2.Namespace:
    ns = namespace_pb2.Namespace(metadata=meta_pb2.ObjectMeta(name=name, labels=labels))
    strategy_for(NAMESPACE).prepare_for_create(ns, NOW)
    return ns


def make_class(
    name: str = "high", value: int = 1000, *, default: bool = False, policy: str | None = None
) -> priorityclass_pb2.PriorityClass:
    pc = priorityclass_pb2.PriorityClass(value=value, globalDefault=default)
    pc.metadata.name = name
    if policy is not None:
        pc.preemptionPolicy = policy
    strategy_for(PRIORITY_CLASS).prepare_for_create(pc, NOW)
    return pc


def messages(info: KindInfo, obj: Any) -> list[str]:
    return [str(e) for e in strategy_for(info).validate_create(obj)]


# ---- namespaces -----------------------------------------------------------------------------


def test_a_new_namespace_is_active_with_the_kubernetes_finalizer_and_its_name_label() -> None:
    ns = make_namespace(team="a")
    assert ns.status.phase == "Active"
    assert list(ns.spec.finalizers) == ["kubernetes"]
    assert dict(ns.metadata.labels) == {"team": "a", "kubernetes.io/metadata.name": "team"}
    assert strategy_for(NAMESPACE).validate_create(ns) == []


def test_the_name_label_cannot_be_changed_and_update_keeps_finalizers_and_status() -> None:
    old = make_namespace()
    new = namespace_pb2.Namespace()
    new.CopyFrom(old)
    new.metadata.labels["kubernetes.io/metadata.name"] = "other"
    del new.spec.finalizers[:]
    new.status.phase = "Terminating"
    strategy_for(NAMESPACE).prepare_for_update(new, old)
    assert new.metadata.labels["kubernetes.io/metadata.name"] == "team"
    assert list(new.spec.finalizers) == ["kubernetes"]
    assert new.status.phase == "Active"


def test_finalize_replaces_only_spec_finalizers() -> None:
    old = make_namespace()
    sent = namespace_pb2.Namespace()
    sent.CopyFrom(old)
    del sent.spec.finalizers[:]
    sent.metadata.labels["x"] = "y"
    merged: Any = strategy_for(NAMESPACE).prepare_for_finalize(sent, old)
    assert list(merged.spec.finalizers) == []
    assert "x" not in merged.metadata.labels


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda ns: setattr(ns.metadata, "name", "a.b"),
            'metadata.name: Invalid value: "a.b": a lowercase RFC 1123 label must consist of',
        ),
        (
            lambda ns: ns.spec.finalizers.append("mine"),
            'spec.finalizers: Invalid value: "mine": name is neither a standard finalizer name '
            "nor is it fully qualified",
        ),
        (
            lambda ns: ns.spec.finalizers.append("example.com/Bad_"),
            'spec.finalizers: Invalid value: "example.com/Bad_": name part must consist of',
        ),
    ],
    ids=["name is a DNS label", "bare finalizer names are standard ones", "qualified names"],
)
def test_namespace_validation(
    mutate: Callable[[namespace_pb2.Namespace], None], expected: str
) -> None:
    ns = make_namespace()
    mutate(ns)
    found = messages(NAMESPACE, ns)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_a_domain_qualified_finalizer_is_fine() -> None:
    ns = make_namespace()
    ns.spec.finalizers.append("example.com/cleanup")
    assert strategy_for(NAMESPACE).validate_create(ns) == []


@pytest.mark.parametrize(
    ("deleting", "phase", "expected"),
    [
        (False, "Active", []),
        (True, "Terminating", []),
        (
            False,
            "Terminating",
            ["status.Phase: Invalid value: \"Terminating\": may only be 'Active' if "
             "`deletionTimestamp` is empty"],
        ),
        (
            True,
            "Active",
            ["status.Phase: Invalid value: \"Active\": may only be 'Terminating' if "
             "`deletionTimestamp` is not empty"],
        ),
    ],
)  # fmt: skip
def test_namespace_phase_follows_deletion(deleting: bool, phase: str, expected: list[str]) -> None:
    ns = make_namespace()
    if deleting:
        ns.metadata.deletionTimestamp.CopyFrom(timestamp(NOW))
    ns.status.phase = phase
    assert [str(e) for e in strategy_for(NAMESPACE).validate_status_update(ns, ns)] == expected


def test_namespaces_select_on_status_phase() -> None:
    ns = make_namespace()
    assert fields_of(NAMESPACE.kind)(ns)["status.phase"] == "Active"


# ---- priority classes -----------------------------------------------------------------------


def test_a_class_defaults_to_preempting_lower_priority() -> None:
    pc = make_class()
    assert pc.preemptionPolicy == "PreemptLowerPriority"
    assert pc.apiVersion == "scheduling.k8s.io/v1"
    assert strategy_for(PRIORITY_CLASS).validate_create(pc) == []


@pytest.mark.parametrize(
    ("pc", "expected"),
    [
        (make_class(value=1000000000), []),
        (make_class(value=-2147483648), []),
        (
            make_class(value=1000000001),
            ["value: Forbidden: maximum allowed value of a user defined priority is 1000000000"],
        ),
        (make_class("system-node-critical", 2000001000), []),
        (
            make_class("system-node-critical", 5),
            ["metadata.name: Forbidden: priority class names with 'system-' prefix are reserved "
             "for system use only. error: value of system-node-critical PriorityClass must be "
             "2000001000"],
        ),
        (
            make_class("system-cluster-critical", 2000000000, default=True),
            ["metadata.name: Forbidden: priority class names with 'system-' prefix are reserved "
             "for system use only. error: globalDefault of system-cluster-critical PriorityClass "
             "must be false"],
        ),
        (
            make_class("system-mine", 10),
            ["metadata.name: Forbidden: priority class names with 'system-' prefix are reserved "
             "for system use only. error: system-mine is not a known system priority class"],
        ),
        (
            make_class(policy="Sometimes"),
            ['preemptionPolicy: Unsupported value: "Sometimes": supported values: '
             '"PreemptLowerPriority", "Never"'],
        ),
        (make_class(policy=""), ["preemptionPolicy: Required value"]),
    ],
    ids=["the highest user value", "negative values", "above the user range",
         "a built-in class", "a built-in name with another value", "a built-in as default",
         "an unknown system- name", "an unknown policy", "an empty policy"],
)  # fmt: skip
def test_priority_class_validation(
    pc: priorityclass_pb2.PriorityClass, expected: list[str]
) -> None:
    assert messages(PRIORITY_CLASS, pc) == expected


def test_the_built_in_classes_are_valid() -> None:
    for pc in system_priority_classes():
        strategy_for(PRIORITY_CLASS).prepare_for_create(pc, NOW)
        assert strategy_for(PRIORITY_CLASS).validate_create(pc) == []
    assert {pc.metadata.name: pc.value for pc in system_priority_classes()} == {
        "system-node-critical": 2000001000,
        "system-cluster-critical": 2000000000,
    }


def test_value_and_preemption_policy_are_immutable() -> None:
    old = make_class()
    new = make_class(value=5, policy="Never")
    new.description = "changed"
    assert [str(e) for e in strategy_for(PRIORITY_CLASS).check_update(new, old)] == [
        "value: Forbidden: may not be changed in an update.",
        'preemptionPolicy: Invalid value: "Never": field is immutable',
    ]
    described = make_class()
    described.description = "only this changed"
    assert strategy_for(PRIORITY_CLASS).check_update(described, old) == []


# ---- pods' priority fields ------------------------------------------------------------------


def raw_pod(name: str = "web", namespace: str = "default", **spec: Any) -> pod_pb2.Pod:
    """A pod as a client sends it: what admission sees (it runs before the strategy)."""
    return pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace),
        spec=pod_pb2.PodSpec(containers=[pod_pb2.Container(name="c", image="busybox")], **spec),
    )


def make_pod(name: str = "web", namespace: str = "default", **spec: Any) -> pod_pb2.Pod:
    """A pod as stored: defaults applied."""
    pod = raw_pod(name, namespace, **spec)
    strategy_for(POD).prepare_for_create(pod, NOW)
    return pod


def test_pod_preemption_policy_and_class_name_are_validated() -> None:
    assert messages(POD, make_pod(preemptionPolicy="Whenever")) == [
        'spec.preemptionPolicy: Unsupported value: "Whenever": supported values: '
        '"PreemptLowerPriority", "Never"'
    ]
    found = messages(POD, make_pod(priorityClassName="Not_A_Name"))
    assert len(found) == 1 and found[0].startswith('spec.priorityClassName: Invalid value: "Not')


def test_a_pod_update_keeps_its_admitted_priority_and_may_not_change_it() -> None:
    old = make_pod(priorityClassName="high", priority=1000, preemptionPolicy="Never")
    # As a manifest without the admitted fields (an update is not defaulted as a create is).
    new = pod_pb2.Pod(
        metadata=meta_pb2.ObjectMeta(name="web", namespace="default"),
        spec=pod_pb2.PodSpec(
            containers=[pod_pb2.Container(name="c", image="busybox")], priorityClassName="high"
        ),
    )
    strategy_for(POD).prepare_for_update(new, old)
    assert (new.spec.priority, new.spec.preemptionPolicy) == (1000, "Never")
    assert strategy_for(POD).check_update(new, old) == []
    new.spec.priority = 5
    assert [e.field for e in strategy_for(POD).check_update(new, old)] == ["spec"]


# ---- admission ------------------------------------------------------------------------------


def object_key(info: KindInfo, obj: Any) -> bytes:
    meta = obj.metadata
    name = f"{meta.namespace}/{meta.name}" if info.namespaced else meta.name
    return f"{PREFIX}/{info.plural}/{name}".encode()


def make_account(namespace: str, name: str = "default") -> serviceaccount_pb2.ServiceAccount:
    return serviceaccount_pb2.ServiceAccount(
        metadata=meta_pb2.ObjectMeta(name=name, namespace=namespace)
    )


# The namespaces these tests create pods in, each with its default ServiceAccount (the
# controller manager's), so that the ServiceAccount plugin admits their pods from the cache.
ACCOUNT_NAMESPACES = ("default", "team", "fresh", "gone", "nowhere")


@dataclass
class FakeCache:
    """A kind's watch cache: its current objects by key."""

    info: KindInfo
    state: dict[bytes, CachedObject] = field(default_factory=dict)
    revision: int = 1
    fresh: bool = True  # False: the cache cannot show it holds everything etcd has

    async def wait_fresh(self) -> bool:
        return self.fresh

    @property
    def state_revision(self) -> int:
        return self.revision

    def put(self, obj: Any) -> None:
        codec = Codec(self.info.message, self.info.namespaced, fields_of(self.info.kind))
        key = object_key(self.info, obj)
        self.revision += 1
        self.state[key] = codec.decode(key, obj.SerializeToString(), self.revision)


@dataclass
class FakeStorage:
    """etcd, for the fallback reads: only what `put` wrote, and a count of reads."""

    values: dict[bytes, bytes] = field(default_factory=dict)
    reads: list[bytes] = field(default_factory=list)

    def put(self, info: KindInfo, obj: Any) -> None:
        self.values[object_key(info, obj)] = obj.SerializeToString()

    async def get(self, key: bytes) -> KV | None:
        self.reads.append(key)
        value = self.values.get(key)
        return None if value is None else KV(key, value, 1, 1)

    async def list_prefix(self, prefix: bytes) -> ListResult:
        self.reads.append(prefix)
        kvs = [KV(k, v, 1, 1) for k, v in sorted(self.values.items()) if k.startswith(prefix)]
        return ListResult(kvs, 1, False)


@dataclass
class World:
    namespaces: FakeCache
    classes: FakeCache
    accounts: FakeCache
    storage: FakeStorage
    clock: FakeClock
    admission: Admission


def world(*objects: Any) -> World:
    namespaces, classes = FakeCache(NAMESPACE), FakeCache(PRIORITY_CLASS)
    storage = FakeStorage()
    clock = FakeClock(NOW)
    for obj in (make_namespace("default"), *objects):
        (namespaces if isinstance(obj, namespace_pb2.Namespace) else classes).put(obj)
    accounts = FakeCache(SERVICE_ACCOUNT)
    for namespace in ACCOUNT_NAMESPACES:
        accounts.put(make_account(namespace))
    admission = Admission(
        {NAMESPACE.kind: namespaces, PRIORITY_CLASS.kind: classes, SERVICE_ACCOUNT.kind: accounts},
        storage,
        prefix=PREFIX,
        clock=clock,
    )
    return World(namespaces, classes, accounts, storage, clock, admission)


def terminating(name: str) -> namespace_pb2.Namespace:
    ns = make_namespace(name)
    ns.metadata.deletionTimestamp.CopyFrom(timestamp(NOW))
    ns.status.phase = "Terminating"
    return ns


async def test_create_in_an_existing_namespace_reads_only_the_cache() -> None:
    w = world()
    await w.admission.admit(POD, raw_pod())
    assert w.storage.reads == []


async def test_create_in_a_missing_namespace_is_not_found_naming_the_namespace() -> None:
    w = world()
    with pytest.raises(NotFoundError) as caught:
        await w.admission.admit(POD, raw_pod(namespace="nowhere"))
    assert caught.value.message == 'namespaces "nowhere" not found'
    assert caught.value.subject == ("", "namespaces", "nowhere")
    assert w.storage.reads == [b"/registry/namespaces/nowhere"]  # the cache may lag: etcd


async def test_a_namespace_the_cache_has_not_seen_yet_is_found_in_etcd() -> None:
    w = world()
    w.storage.put(NAMESPACE, make_namespace("fresh"))
    await w.admission.admit(POD, raw_pod(namespace="fresh"))


@pytest.mark.parametrize(
    ("info", "obj", "head"),
    [
        (POD, raw_pod(namespace="gone"), 'pods "web"'),
        (POD, pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(generateName="web-", namespace="gone")),
         'pods "web-"'),
        (REPLICA_SET,
         replicaset_pb2.ReplicaSet(metadata=meta_pb2.ObjectMeta(name="rs", namespace="gone")),
         'replicasets "rs"'),
    ],
    ids=["named", "generateName", "another kind"],
)  # fmt: skip
async def test_create_in_a_terminating_namespace_is_forbidden(
    info: KindInfo, obj: Any, head: str
) -> None:
    w = world(terminating("gone"))
    with pytest.raises(ForbiddenError) as caught:
        await w.admission.admit(info, obj)
    assert caught.value.message == (
        f"{head} is forbidden: unable to create new content in namespace gone because it is "
        "being terminated"
    )
    assert caught.value.causes == [
        ("NamespaceTerminating", "namespace gone is being terminated", "metadata.namespace")
    ]


async def test_a_namespace_this_apiserver_is_deleting_is_looked_up_live_for_a_while() -> None:
    w = world(make_namespace("team"))  # the cache still shows it Active
    w.storage.put(NAMESPACE, terminating("team"))
    w.admission.namespace_deleting("team")
    with pytest.raises(ForbiddenError):
        await w.admission.admit(POD, raw_pod(namespace="team"))
    w.clock.advance(31)
    w.storage.reads.clear()
    await w.admission.admit(POD, raw_pod(namespace="team"))
    assert w.storage.reads == []


def test_system_namespaces_may_not_be_deleted() -> None:
    w = world()
    for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
        with pytest.raises(ForbiddenError) as caught:
            w.admission.check_delete(NAMESPACE, name)
        assert caught.value.message == (
            f'namespaces "{name}" is forbidden: this namespace may not be deleted'
        )
    w.admission.check_delete(NAMESPACE, "team")
    w.admission.check_delete(POD, "default")  # a pod named default is nothing special


async def test_cluster_scoped_kinds_skip_the_namespace_check() -> None:
    w = world()
    await w.admission.admit(PRIORITY_CLASS, make_class())
    assert w.storage.reads == []


@pytest.mark.parametrize(
    ("classes", "spec", "expected"),
    [
        ((), {}, ("", 0, "PreemptLowerPriority")),
        ((make_class("high", 1000),), {"priorityClassName": "high"},
         ("high", 1000, "PreemptLowerPriority")),
        ((make_class("calm", 10, policy="Never"),), {"priorityClassName": "calm"},
         ("calm", 10, "Never")),
        ((make_class("base", -5, default=True),), {}, ("base", -5, "PreemptLowerPriority")),
        # Two defaults after a race: the lowest value wins, as in Kubernetes.
        ((make_class("a", 7, default=True), make_class("b", 3, default=True)), {},
         ("b", 3, "PreemptLowerPriority")),
        ((make_class("high", 1000),), {"priorityClassName": "high", "priority": 1000},
         ("high", 1000, "PreemptLowerPriority")),
        ((make_class("calm", 10, policy="Never"),),
         {"priorityClassName": "calm", "preemptionPolicy": "Never"}, ("calm", 10, "Never")),
        ((), {"priorityClassName": "system-node-critical"},
         ("system-node-critical", 2000001000, "PreemptLowerPriority")),
    ],
    ids=["no class, no default", "the class's value", "the class's policy", "the global default",
         "the lowest of two defaults", "the same priority given", "the same policy given",
         "a built-in class"],
)  # fmt: skip
async def test_priority_admission_fills_in_the_pod(
    classes: tuple[priorityclass_pb2.PriorityClass, ...],
    spec: dict[str, Any],
    expected: tuple[str, int, str],
) -> None:
    w = world(*classes, *(
        make_class(pc.metadata.name, pc.value) for pc in system_priority_classes()
    ))  # fmt: skip
    pod = raw_pod(**spec)
    await w.admission.admit(POD, pod)
    assert (pod.spec.priorityClassName, pod.spec.priority, pod.spec.preemptionPolicy) == expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"priorityClassName": "missing"},
         'pods "web" is forbidden: no PriorityClass with name missing was found'),
        ({"priorityClassName": "high", "priority": 7},
         'pods "web" is forbidden: the integer value of priority (7) must not be provided in '
         "pod spec; priority admission controller computed 1000 from the given PriorityClass "
         "name"),
        ({"priority": 7},
         'pods "web" is forbidden: the integer value of priority (7) must not be provided in '
         "pod spec; priority admission controller computed 0 from the given PriorityClass name"),
        ({"priorityClassName": "high", "preemptionPolicy": "Never"},
         'pods "web" is forbidden: the string value of PreemptionPolicy (Never) must not be '
         "provided in pod spec; priority admission controller computed PreemptLowerPriority "
         "from the given PriorityClass name"),
    ],
    ids=["an unknown class", "another priority", "a priority without a class",
         "another preemption policy"],
)  # fmt: skip
async def test_priority_admission_refuses(spec: dict[str, Any], expected: str) -> None:
    w = world(make_class("high", 1000))
    with pytest.raises(ForbiddenError) as caught:
        await w.admission.admit(POD, raw_pod(**spec))
    assert caught.value.message == expected


async def test_a_class_created_moments_ago_is_found_in_etcd() -> None:
    w = world()
    w.storage.put(PRIORITY_CLASS, make_class("fresh", 42))
    pod = raw_pod(priorityClassName="fresh")
    await w.admission.admit(POD, pod)
    assert pod.spec.priority == 42


async def test_only_one_global_default() -> None:
    w = world(make_class("base", 1, default=True))
    with pytest.raises(ForbiddenError) as caught:
        await w.admission.validate(PRIORITY_CLASS, make_class("other", 2, default=True), None)
    assert caught.value.message == (
        'priorityclasses "other" is forbidden: PriorityClass base is already marked as default. '
        "Only one default can exist"
    )
    # Updating the default itself is fine; making another one the default is not.
    base = make_class("base", 1, default=True)
    await w.admission.validate(PRIORITY_CLASS, base, base)
    other = make_class("other", 2, default=True)
    with pytest.raises(ForbiddenError):
        await w.admission.validate(PRIORITY_CLASS, other, make_class("other", 2))
    await w.admission.validate(PRIORITY_CLASS, make_class("plain", 3), None)


async def test_the_default_is_recomputed_when_the_classes_change() -> None:
    w = world()
    first = raw_pod()
    await w.admission.admit(POD, first)
    assert first.spec.priority == 0
    w.classes.put(make_class("base", 9, default=True))
    second = raw_pod()
    await w.admission.admit(POD, second)
    assert (second.spec.priorityClassName, second.spec.priority) == ("base", 9)


async def test_a_default_class_only_etcd_has_yet_is_found_there() -> None:
    w = world()
    w.storage.put(PRIORITY_CLASS, make_class("base", 1, default=True))  # not in the cache yet
    w.classes.fresh = False
    with pytest.raises(ForbiddenError) as caught:
        await w.admission.validate(PRIORITY_CLASS, make_class("other", 2, default=True), None)
    assert "PriorityClass base is already marked as default" in caught.value.message
    assert w.storage.reads == [b"/registry/priorityclasses/"]
    w.classes.fresh = True  # a fresh cache is trusted: it has no default, so this one may be
    await w.admission.validate(PRIORITY_CLASS, make_class("other", 2, default=True), None)
