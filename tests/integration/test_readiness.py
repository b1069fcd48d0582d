"""Readiness waits for the bootstrap RBAC policy, as kube-apiserver's /readyz waits for its
post-start hook rbac/bootstrap-roles: until one reconcile has completed, gRPC health is
NOT_SERVING and /readyz and /healthz fail the check `poststarthook/rbac/bootstrap-roles`,
while /livez passes. The reconcile is held back for real: a validating webhook nobody answers
(failurePolicy Fail) refuses the ClusterRole the second apiserver has to create again.

And a stopping apiserver stays NOT_SERVING through its graceful drain."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import aiohttp
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from apiserver.__main__ import FATAL_EXIT_CODE, run
from apiserver.settings import Settings
from tests.integration.conftest import (
    RunningAPIServer,
    make_pod,
    make_settings,
    start_apiserver,
)
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import pod_pb2, pod_pb2_grpc

pytestmark = pytest.mark.integration

HOOKS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
ROLE = "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:basic-user"
CHECK = "poststarthook/rbac/bootstrap-roles"
# Nothing listens on port 1: every call fails at once with "connection refused".
DEAD_HOOK: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "refuse-cluster-roles"},
    "webhooks": [
        {
            "name": "refuse.example.com",
            "clientConfig": {"url": "https://127.0.0.1:1/refuse"},
            "rules": [
                {
                    "operations": ["CREATE", "UPDATE"],
                    "apiGroups": ["rbac.authorization.k8s.io"],
                    "apiVersions": ["v1"],
                    "resources": ["clusterroles"],
                }
            ],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }
    ],
}


async def call(session: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> tuple[int, str]:
    async with session.request(method, url, **kw) as resp:
        return resp.status, await resp.text()


async def serving(running: RunningAPIServer) -> bool:
    async with grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS)) as ch:
        reply = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest())
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def logged_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The apiserver's ERROR lines captured."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "apiserver.app" and r.levelno >= logging.ERROR
    ]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def refuse_a_bootstrap_role(settings: Settings, session: aiohttp.ClientSession) -> None:
    """Leave the store with system:basic-user deleted and a webhook that refuses it: the next
    apiserver must create the role again, and cannot."""
    first = await start_apiserver(settings)
    try:
        base = f"http://{first.server.rest_address}"
        assert await serving(first)
        status, text = await call(session, "GET", base + "/readyz?verbose")
        assert status == 200 and f"[+]{CHECK} ok\n" in text, text
        status, text = await call(session, "POST", base + HOOKS, json=DEAD_HOOK)
        assert status == 201, text
        status, text = await call(session, "DELETE", base + ROLE)
        assert status == 200, text
    finally:
        await first.server.stop()


async def test_not_ready_until_the_bootstrap_policy_is_reconciled(
    etcd_server: EtcdServer, session: aiohttp.ClientSession
) -> None:
    settings = make_settings(etcd_server.endpoint, rest_port=0)
    await refuse_a_bootstrap_role(settings, session)
    second = await start_apiserver(settings)
    try:
        base = f"http://{second.server.rest_address}"
        assert not await serving(second)
        status, text = await call(session, "GET", base + "/readyz")
        assert status == 500
        assert f"[-]{CHECK} failed: reason withheld\n" in text, text
        assert "[+]etcd ok\n" in text and text.endswith("readyz check failed\n"), text
        status, text = await call(session, "GET", base + "/readyz/" + CHECK)
        assert (status, text) == (500, f"internal server error: {CHECK} check failed")
        status, text = await call(session, "GET", base + "/healthz?verbose")
        assert status == 500 and f"[-]{CHECK} failed" in text, text
        # Liveness is not readiness: nothing here calls for a restart.
        status, text = await call(session, "GET", base + "/livez")
        assert (status, text) == (200, "ok")

        # Once the webhook is gone, the policy loop's next try gets through.
        status, text = await call(session, "DELETE", base + HOOKS + "/refuse-cluster-roles")
        assert status == 200, text
        async with asyncio.timeout(30):
            while not await serving(second):  # noqa: ASYNC110 - polled, as a component waits
                await asyncio.sleep(0.05)
        status, text = await call(session, "GET", base + "/readyz?verbose")
        assert status == 200 and f"[+]{CHECK} ok\n" in text, text
        assert text.endswith("readyz check passed\n")
        status, text = await call(session, "GET", base + "/readyz/" + CHECK)
        assert (status, text) == (200, "ok")
        status, text = await call(session, "GET", base + ROLE)
        assert status == 200, text
    finally:
        await second.server.stop()


async def test_an_object_that_keeps_failing_is_given_up_after_the_hooks_time(
    etcd_server: EtcdServer, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """kube-apiserver's hook logs an object it cannot write and counts the pass as done; tinykube
    tries it for the hook's 30 s (shortened here), then logs it once more and becomes ready
    without it, where it stayed not ready forever."""
    settings = make_settings(etcd_server.endpoint, rest_port=0)
    await refuse_a_bootstrap_role(settings, session)
    with caplog.at_level(logging.ERROR, logger="apiserver.app"):
        running = await start_apiserver(replace(settings, bootstrap_policy_timeout_seconds=1.0))
        try:
            base = f"http://{running.server.rest_address}"
            async with asyncio.timeout(30):
                while not await serving(running):  # noqa: ASYNC110 - polled, as a component waits
                    await asyncio.sleep(0.05)
            status, text = await call(session, "GET", base + "/readyz?verbose")
            assert status == 200 and f"[+]{CHECK} ok\n" in text, text
            status, text = await call(session, "GET", base + ROLE)
            assert status == 404, text  # still refused by the webhook: not there
            assert not running.server.fatal.is_set()
        finally:
            await running.server.stop()
    errors = logged_errors(caplog)
    assert len(errors) == 1, errors
    prefix = (
        'PostStartHook "rbac/bootstrap-roles": unable to reconcile '
        "clusterrole.rbac.authorization.k8s.io/system:basic-user: "
    )
    assert errors[0].startswith(prefix), errors
    assert "refuse.example.com" in errors[0], errors  # the webhook's own error
    assert errors[0].endswith("going on without it after 1s"), errors


async def test_an_apiserver_whose_etcd_does_not_answer_exits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """kube-apiserver's hook fails when etcd has not answered for its 30 s (shortened here),
    and the process exits (klog.Fatalf, 255)."""
    etcd = EtcdServer()
    etcd.start()
    try:
        settings = make_settings(etcd.endpoint, rest_port=0)
        running = await start_apiserver(settings)  # the first run writes the policy
        await running.server.stop()
        etcd.stop()
        with caplog.at_level(logging.ERROR, logger="apiserver.app"):
            code = await asyncio.wait_for(
                run(replace(settings, bootstrap_policy_timeout_seconds=1.0)), 60
            )
    finally:
        etcd.cleanup()
    assert code == FATAL_EXIT_CODE == 255
    errors = logged_errors(caplog)
    assert len(errors) == 1, errors
    prefix = (
        'PostStartHook "rbac/bootstrap-roles" failed: unable to initialize roles: unable to '
        "initialize clusterroles: "
    )
    assert errors[0].startswith(prefix), errors


async def test_a_stopping_apiserver_never_reports_serving_again(etcd_server: EtcdServer) -> None:
    running = await start_apiserver(make_settings(etcd_server.endpoint, shutdown_grace_seconds=2.5))
    async with grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS)) as ch:
        health = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest())
        assert (await health.read()).status == health_pb2.HealthCheckResponse.SERVING
        # A write stream left open holds the graceful stop for its whole grace, as a busy
        # apiserver's calls in flight do, while the health loop ticks (every second).
        writes = pod_pb2_grpc.PodsStub(ch).CreateStream()
        await writes.write(pod_pb2.CreatePodRequest(pod=make_pod("held")))
        await writes.read()
        stopping = asyncio.create_task(running.server.stop())
        seen = []
        with contextlib.suppress(grpc.aio.AioRpcError):
            while (reply := await health.read()) is not grpc.aio.EOF:
                seen.append(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
        await stopping
        writes.cancel()
    assert seen == ["NOT_SERVING"]


async def test_readyz_fails_its_shutdown_check_while_the_apiserver_drains(
    etcd_server: EtcdServer, session: aiohttp.ClientSession
) -> None:
    """kube's readyz check `shutdown`: once the graceful stop begins /readyz fails it, so a
    load balancer stops sending new requests while the ones in flight finish; /healthz has
    no such check and /livez stays ok."""
    running = await start_apiserver(
        make_settings(etcd_server.endpoint, shutdown_grace_seconds=2.5, rest_port=0)
    )
    base = f"http://{running.server.rest_address}"
    status, text = await call(session, "GET", base + "/readyz?verbose")
    assert status == 200 and "[+]shutdown ok\n" in text, text
    async with grpc.aio.insecure_channel(running.address, options=list(CHANNEL_OPTIONS)) as ch:
        # A write stream left open holds the graceful stop for its grace.
        writes = pod_pb2_grpc.PodsStub(ch).CreateStream()
        await writes.write(pod_pb2.CreatePodRequest(pod=make_pod("held")))
        await writes.read()
        stopping = asyncio.create_task(running.server.stop())
        try:
            async with asyncio.timeout(2):
                while True:
                    status, text = await call(session, "GET", base + "/readyz?verbose")
                    if status == 500:
                        break
                    await asyncio.sleep(0.02)
            assert "[-]shutdown failed: reason withheld\n" in text, text
            assert text.endswith("readyz check failed\n"), text
            assert await call(session, "GET", base + "/readyz/shutdown") == (
                500,
                "internal server error: shutdown check failed",
            )
            status, text = await call(session, "GET", base + "/healthz?verbose")
            assert status == 200 and "shutdown" not in text, text
            assert await call(session, "GET", base + "/livez") == (200, "ok")
        finally:
            writes.cancel()
            await stopping
