"""The serviceaccount controller: `default` in every active namespace, created again when it is
deleted, never in a namespace that is gone or terminating (kube's ServiceAccountsController)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from controller.serviceaccount import ServiceAccountsController
from tests.unit.controller.fakes import FakeClient, FakeQueue, FakeStore
from tinykube.clock import FakeClock
from tinykube.errors import AlreadyExistsError, ForbiddenError, UnavailableError
from tinykube.v1 import namespace_pb2, serviceaccount_pb2


@dataclass
class Setup:
    client: FakeClient
    queue: FakeQueue
    controller: ServiceAccountsController


def setup(*namespaces: tuple[str, str]) -> Setup:
    client = FakeClient(FakeClock())
    for name, phase in namespaces:
        ns = namespace_pb2.Namespace()
        ns.metadata.name = name
        ns.status.phase = phase
        client.namespaces.objects[name] = ns
    queue = FakeQueue()
    controller = ServiceAccountsController(
        client.service_accounts,
        FakeStore(client.namespaces),
        FakeStore(client.service_accounts),
        queue,
    )
    return Setup(client, queue, controller)


def account(namespace: str, name: str = "default") -> serviceaccount_pb2.ServiceAccount:
    sa = serviceaccount_pb2.ServiceAccount()
    sa.metadata.name, sa.metadata.namespace = name, namespace
    return sa


async def test_an_active_namespace_gets_its_default_account() -> None:
    s = setup(("team", "Active"))
    await s.controller.sync("team")
    assert list(s.client.service_accounts.objects) == ["team/default"]
    created = s.client.service_accounts.objects["team/default"]
    assert (created.metadata.namespace, created.metadata.name) == ("team", "default")


async def test_an_existing_default_is_left_alone() -> None:
    s = setup(("team", "Active"))
    s.client.service_accounts.objects["team/default"] = account("team")
    s.client.service_accounts.objects["team/robot"] = account("team", "robot")
    await s.controller.sync("team")
    assert s.client.service_accounts.calls == []


@pytest.mark.parametrize(
    "namespaces", [(), (("team", "Terminating"),)], ids=["gone", "terminating"]
)
async def test_nothing_is_created_in_a_namespace_that_is_gone_or_terminating(
    namespaces: tuple[tuple[str, str], ...],
) -> None:
    s = setup(*namespaces)
    await s.controller.sync("team")
    assert s.client.service_accounts.objects == {}


async def test_a_deleted_account_queues_its_namespace_and_is_created_again() -> None:
    s = setup(("team", "Active"))
    await s.controller.sync("team")
    deleted = s.client.service_accounts.objects.pop("team/default")
    s.controller.on_account_delete(deleted)
    assert s.queue.added == ["team"]
    await s.controller.sync("team")
    assert "team/default" in s.client.service_accounts.objects


def test_added_and_updated_namespaces_are_queued() -> None:
    s = setup()
    ns = namespace_pb2.Namespace()
    ns.metadata.name = "team"
    s.controller.on_namespace_add(ns)
    s.controller.on_namespace_update(ns, ns)
    assert s.queue.added == ["team", "team"]


@pytest.mark.parametrize(
    "refusal",
    [
        AlreadyExistsError('serviceaccounts "default" already exists'),
        ForbiddenError(
            'serviceaccounts "default" is forbidden: unable to create new content in namespace '
            "team because it is being terminated"
        ),
    ],
    ids=["already exists (a lagging store)", "namespace began terminating"],
)
async def test_refusals_that_mean_nothing_to_do_are_not_errors(refusal: Exception) -> None:
    s = setup(("team", "Active"))
    s.client.service_accounts.fail_creates = refusal
    await s.controller.sync("team")


async def test_other_failures_are_raised_for_the_queue_to_retry() -> None:
    s = setup(("team", "Active"))
    s.client.service_accounts.fail_creates = UnavailableError("apiserver down")
    with pytest.raises(UnavailableError):
        await s.controller.sync("team")
    s.client.service_accounts.fail_creates = ForbiddenError("serviceaccounts is forbidden: no")
    with pytest.raises(ForbiddenError):
        await s.controller.sync("team")
