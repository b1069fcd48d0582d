"""ServiceAccounts in the apiserver: validation, the strategy, pod defaulting (the deprecated
serviceAccount alias) and the ServiceAccount admission plugin, with kube's messages."""

from __future__ import annotations

import asyncio

import pytest

from apiserver.registry import strategy_for
from tests.unit.test_namespaces_priority import (
    NOW,
    World,
    make_account,
    make_namespace,
    make_pod,
    messages,
    raw_pod,
    world,
)
from tinykube.errors import ForbiddenError
from tinykube.kinds import POD, SERVICE_ACCOUNT
from tinykube.v1 import meta_pb2, pod_pb2, serviceaccount_pb2

# ---- validation and strategy ---------------------------------------------------------------


def stored_account(
    name: str = "robot", namespace: str = "team"
) -> serviceaccount_pb2.ServiceAccount:
    sa = make_account(namespace, name)
    strategy_for(SERVICE_ACCOUNT).prepare_for_create(sa, NOW)
    return sa


def test_a_service_account_name_is_a_dns_subdomain() -> None:
    assert messages(SERVICE_ACCOUNT, stored_account("ci.bots")) == []
    assert messages(SERVICE_ACCOUNT, stored_account("Robot_1")) == [
        'metadata.name: Invalid value: "Robot_1": a lowercase RFC 1123 subdomain must consist '
        "of lower case alphanumeric characters, '-' or '.', and must start and end with an "
        "alphanumeric character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    ]


def test_the_strategy_keeps_only_secret_names_and_sets_no_generation() -> None:
    sa = make_account("team", "robot")
    sa.secrets.add(name="token", namespace="elsewhere", kind="Secret", uid="u")
    sa.automountServiceAccountToken = False
    strategy_for(SERVICE_ACCOUNT).prepare_for_create(sa, NOW)
    assert [ref for ref in sa.secrets] == [meta_pb2.ObjectReference(name="token")]
    assert sa.metadata.generation == 0
    assert sa.apiVersion == "v1" and sa.kind == "ServiceAccount"
    assert sa.HasField("automountServiceAccountToken") and not sa.automountServiceAccountToken


def test_a_pod_service_account_name_is_a_dns_subdomain_naming_the_field() -> None:
    pod = make_pod(serviceAccountName="No_Such")
    assert messages(POD, pod) == [
        'spec.serviceAccountName: Invalid value: "No_Such": a lowercase RFC 1123 subdomain '
        "must consist of lower case alphanumeric characters, '-' or '.', and must start and end "
        "with an alphanumeric character (e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    ]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"serviceAccount": "robot"}, ("robot", "robot")),
        ({"serviceAccountName": "robot"}, ("robot", "robot")),
        ({"serviceAccountName": "robot", "serviceAccount": "old"}, ("robot", "robot")),
        ({}, ("", "")),
    ],
    ids=["only the alias", "only the name", "the name wins", "neither"],
)
def test_the_deprecated_alias_and_the_name_mirror_each_other(
    given: dict[str, str], expected: tuple[str, str]
) -> None:
    pod = make_pod(**given)
    assert (pod.spec.serviceAccountName, pod.spec.serviceAccount) == expected


def test_service_account_name_is_immutable_on_pod_update() -> None:
    old = make_pod(serviceAccountName="default")
    new = pod_pb2.Pod()
    new.CopyFrom(old)
    new.spec.serviceAccountName = "robot"
    strategy_for(POD).prepare_for_update(new, old)
    assert (new.spec.serviceAccountName, new.spec.serviceAccount) == ("robot", "robot")
    errs = [str(e) for e in strategy_for(POD).validate_update(new, old)]
    assert len(errs) == 1 and errs[0].startswith(
        "spec: Forbidden: pod updates may not change fields other than"
    )


# ---- the ServiceAccount admission plugin ----------------------------------------------------


def team_world() -> World:
    """Namespaces default, team and fresh, each with its default account in the cache."""
    return world(make_namespace("team"), make_namespace("fresh"))


async def test_a_pod_naming_no_account_runs_as_default_read_from_the_cache() -> None:
    w = team_world()
    pod = raw_pod(namespace="team")
    await w.admission.admit(POD, pod)
    assert (pod.spec.serviceAccountName, pod.spec.serviceAccount) == ("default", "default")
    assert w.storage.reads == []


async def test_a_pod_naming_an_existing_account_keeps_it() -> None:
    w = team_world()
    w.accounts.put(make_account("team", "robot"))
    pod = raw_pod(namespace="team", serviceAccount="robot")  # the alias is converted first
    await w.admission.admit(POD, pod)
    assert pod.spec.serviceAccountName == "robot"
    assert w.storage.reads == []


async def test_a_missing_account_is_forbidden_after_one_etcd_read() -> None:
    w = team_world()
    with pytest.raises(ForbiddenError) as caught:
        await w.admission.admit(POD, raw_pod(namespace="team", serviceAccountName="robot"))
    assert caught.value.message == (
        'pods "web" is forbidden: error looking up service account team/robot: '
        'serviceaccount "robot" not found'
    )
    assert w.storage.reads == [b"/registry/serviceaccounts/team/robot"]


async def test_an_account_only_etcd_has_yet_is_found_there() -> None:
    w = team_world()
    w.storage.put(SERVICE_ACCOUNT, make_account("team", "robot"))
    await w.admission.admit(POD, raw_pod(namespace="team", serviceAccountName="robot"))


async def missing_default(w: World, pod: pod_pb2.Pod) -> asyncio.Task[None]:
    w.accounts.state.clear()
    task = asyncio.create_task(w.admission.admit(POD, pod))
    for _ in range(5):
        await asyncio.sleep(0)
    return task


async def test_default_is_looked_for_ten_times_then_refused() -> None:
    """kube's plugin retries "default" (its controller is about to make it) 10 times, 100 to
    200 ms apart, before the Forbidden that clients retry on."""
    w = team_world()
    task = await missing_default(w, raw_pod(namespace="fresh"))
    for _ in range(9):
        assert not task.done()
        await w.clock.step(0.2)
    with pytest.raises(ForbiddenError) as caught:
        await task
    assert caught.value.message == (
        'pods "web" is forbidden: error looking up service account fresh/default: '
        'serviceaccount "default" not found'
    )
    assert w.storage.reads == [b"/registry/serviceaccounts/fresh/default"] * 10


async def test_default_made_while_admission_waits_admits_the_pod() -> None:
    w = team_world()
    pod = raw_pod(namespace="fresh")
    task = await missing_default(w, pod)
    w.accounts.put(make_account("fresh"))  # the controller's create reaches the cache
    await w.clock.step(0.2)
    await task
    assert pod.spec.serviceAccountName == "default"


async def test_mirror_pods_may_not_name_accounts_or_read_secrets() -> None:
    w = team_world()
    mirror = raw_pod(namespace="team", serviceAccountName="default")
    mirror.metadata.annotations["kubernetes.io/config.mirror"] = "hash"
    with pytest.raises(ForbiddenError) as caught:
        await w.admission.admit(POD, mirror)
    assert caught.value.message.endswith("a mirror pod may not reference service accounts")
    mirror.spec.serviceAccountName = mirror.spec.serviceAccount = ""
    env = mirror.spec.containers[0].env.add(name="PASSWORD")
    env.valueFrom.secretKeyRef.name = "db"
    with pytest.raises(ForbiddenError) as caught:
        await w.admission.admit(POD, mirror)
    assert caught.value.message.endswith("a mirror pod may not reference secrets")
    del mirror.spec.containers[0].env[:]
    await w.admission.admit(POD, mirror)
    assert mirror.spec.serviceAccountName == ""  # a mirror pod is not given "default"


async def test_other_kinds_and_updates_are_not_checked() -> None:
    w = team_world()
    w.accounts.state.clear()
    await w.admission.admit(SERVICE_ACCOUNT, stored_account())
    await w.admission.validate(POD, make_pod(namespace="team"), make_pod(namespace="team"))
    assert w.storage.reads == []
