"""pods/eviction (REST and gRPC Pods/Evict) and pods/log against a real etcd and real kubelets.

One apiserver (REST on a free port) and two in-process kubelets with the process runtime
(n1 runs the pods whose logs are read, n2 is drained). Eviction cases that need no running
containers use pods bound to node "ghost", which has no kubelet: a graceful delete there stays
visible with its deletionTimestamp. The real kubectl drains n2 and reads logs from n1. Every
wait is on a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from kubelet.app import Kubelet
from kubelet.settings import Settings as KubeletSettings
from tests.integration.conftest import (
    Rest,
    make_settings,
    start_apiserver,
    stop_kubelet,
)
from tinykube.localetcd import EtcdServer
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import meta_pb2, pod_pb2, pod_pb2_grpc

pytestmark = pytest.mark.integration

PODS = "/api/v1/namespaces/default/pods"
KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


@dataclass
class Cluster(Rest):
    kubelets: dict[str, Kubelet]


async def eventually(check: Callable[[], Awaitable[Any]], what: str, limit: float = 30.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    last: Any = None
    while loop.time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}; last: {last!r}")


@pytest.fixture(scope="module")
async def cluster(
    etcd_server: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Cluster]:
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    kubelets: dict[str, Kubelet] = {}
    session = aiohttp.ClientSession()
    try:
        for name in ("n1", "n2"):
            kubelet = Kubelet(
                KubeletSettings(
                    node_name=name,
                    apiserver=running.address,
                    bind_address="127.0.0.1:0",
                    root_dir=tmp_path_factory.mktemp(name),
                    poll_interval=0.1,
                    # Crash-looping containers restart within the tests' patience.
                    backoff_initial=0.2,
                    backoff_max=1.0,
                )
            )
            await kubelet.start()
            kubelets[name] = kubelet
        c = Cluster(running, session, f"http://{running.server.rest_address}", kubelets)

        async def registered() -> bool:
            for name in kubelets:
                code, node, _ = await c.call("GET", f"/api/v1/nodes/{name}")
                if code != 200:
                    return False
                if not node.get("status", {}).get("daemonEndpoints", {}).get("kubeletEndpoint"):
                    return False
            return True

        await eventually(registered, "the kubelets to register their nodes")
        yield c
    finally:
        await session.close()
        for kubelet in kubelets.values():
            await stop_kubelet(kubelet)
        await running.server.stop()


def pod(name: str, node: str = "", *commands: tuple[str, str], **extra: Any) -> dict[str, Any]:
    containers = [
        {"name": c, "image": "busybox", "command": ["sh", "-c", script]} for c, script in commands
    ] or [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]
    spec: dict[str, Any] = {"containers": containers, **extra}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def eviction(name: str, version: str = "policy/v1", **options: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": version,
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": "default"},
    }
    if options:
        body["deleteOptions"] = options
    return body


SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


async def make_pod(c: Cluster, name: str, node: str = "", phase: str = "") -> dict[str, Any]:
    code, created, _ = await c.call("POST", PODS, pod(name, node))
    assert code == 201, created
    if phase:
        created["status"]["phase"] = phase
        code, created, _ = await c.call("PUT", f"{PODS}/{name}/status", created)
        assert code == 200, created
    return dict(created)


# ---- eviction ----------------------------------------------------------------------------


async def test_eviction_is_listed_in_discovery(cluster: Cluster) -> None:
    _, body, _ = await cluster.call("GET", "/api/v1")
    by_name = {r["name"]: r for r in body["resources"]}
    assert by_name["pods/eviction"] == {
        "name": "pods/eviction",
        "singularName": "",
        "namespaced": True,
        "group": "policy",
        "version": "v1",
        "kind": "Eviction",
        "verbs": ["create"],
    }
    assert by_name["pods/log"]["kind"] == "Pod" and by_name["pods/log"]["verbs"] == ["get"]


@pytest.mark.parametrize(
    ("phase", "node", "options", "left"),
    [
        # Pending and unscheduled: nothing runs, deleted at once.
        ("", "", {}, "gone"),
        # Running on a node: graceful, with the pod's own grace period...
        ("Running", "ghost", {}, 30),
        # ...or the one deleteOptions gives.
        ("Running", "ghost", {"gracePeriodSeconds": 5}, 5),
        ("Running", "ghost", {"gracePeriodSeconds": 0}, "gone"),
        # Terminal pods are deleted without consulting budgets.
        ("Succeeded", "ghost", {"gracePeriodSeconds": 0}, "gone"),
        ("Failed", "ghost", {}, 30),
    ],
)
async def test_eviction_deletes_through_delete(
    cluster: Cluster, phase: str, node: str, options: dict[str, Any], left: Any
) -> None:
    name = f"ev-{phase.lower() or 'pending'}-{options.get('gracePeriodSeconds', 'd')}"
    await make_pod(cluster, name, node, phase)
    code, body, resp = await cluster.call(
        "POST", f"{PODS}/{name}/eviction", eviction(name, **options)
    )
    assert (code, body) == (201, SUCCESS)
    assert resp.headers["Content-Type"] == "application/json"
    code, after, _ = await cluster.call("GET", f"{PODS}/{name}")
    if left == "gone":
        assert code == 404
    else:
        assert code == 200 and after["metadata"]["deletionGracePeriodSeconds"] == left
        assert "deletionTimestamp" in after["metadata"]
        # Evicting a pod already being deleted is accepted, and changes nothing.
        code, body, _ = await cluster.call("POST", f"{PODS}/{name}/eviction", eviction(name))
        assert (code, body) == (201, SUCCESS)
        _, again, _ = await cluster.call("GET", f"{PODS}/{name}")
        assert again["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]


async def test_eviction_v1beta1_and_dry_run(cluster: Cluster) -> None:
    await make_pod(cluster, "ev-dry", "ghost", "Running")
    _, before, _ = await cluster.call("GET", f"{PODS}/ev-dry")
    for path, body in (
        (f"{PODS}/ev-dry/eviction?dryRun=All", eviction("ev-dry")),
        (f"{PODS}/ev-dry/eviction", eviction("ev-dry", dryRun=["All"])),
        (
            f"{PODS}/ev-dry/eviction?dryRun=All",
            eviction("ev-dry", "policy/v1beta1", dryRun=["All"]),
        ),
    ):
        code, answer, _ = await cluster.call("POST", path, body)
        assert (code, answer) == (201, SUCCESS)
    _, after, _ = await cluster.call("GET", f"{PODS}/ev-dry")
    assert after == before
    code, answer, _ = await cluster.call(
        "POST", f"{PODS}/ev-dry/eviction", eviction("ev-dry", "policy/v1beta1")
    )
    assert (code, answer) == (201, SUCCESS)


async def test_eviction_errors(cluster: Cluster) -> None:
    created = await make_pod(cluster, "ev-err", "ghost", "Running")
    uid, rv = created["metadata"]["uid"], created["metadata"]["resourceVersion"]
    url = f"{PODS}/ev-err/eviction"
    bad_rv = str(int(rv) - 1)
    cases: list[tuple[str, str, Any, int, str, str]] = [
        (
            "POST",
            f"{PODS}/nope/eviction",
            eviction("nope"),
            404,
            "NotFound",
            'pods "nope" not found',
        ),
        (
            "POST",
            url,
            eviction("other"),
            400,
            "BadRequest",
            "name in URL does not match name in Eviction object",
        ),
        (
            "POST",
            url,
            eviction("ev-err", "v1"),
            400,
            "BadRequest",
            'Eviction in version "v1" cannot be handled as a Eviction: supported versions: '
            "policy/v1, policy/v1beta1",
        ),
        (
            "POST",
            url,
            {**eviction("ev-err"), "kind": "Pod"},
            400,
            "BadRequest",
            "the kind in the data (Pod) does not match the expected kind (Eviction)",
        ),
        (
            "POST",
            url,
            {**eviction("ev-err"), "metadata": {"name": "ev-err", "namespace": "kube-system"}},
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
        ),
        (
            "POST",
            url,
            eviction("ev-err", gracePeriodSeconds=-1),
            422,
            "Invalid",
            'DeleteOptions.meta.k8s.io "" is invalid: gracePeriodSeconds: Invalid value: -1: '
            "must be greater than or equal to 0",
        ),
        (
            "POST",
            url,
            eviction("ev-err", propagationPolicy="Sideways"),
            422,
            "Invalid",
            'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
            '"Sideways": supported values: "Foreground", "Background", "Orphan", "nil"',
        ),
        (
            "POST",
            url,
            eviction("ev-err", dryRun=["Some"]),
            400,
            "BadRequest",
            'dryRun: Unsupported value: "Some": supported values: "All"',
        ),
        (
            "POST",
            url,
            eviction("ev-err", preconditions={"uid": "not-it"}),
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods "ev-err": Precondition failed: UID in '
            f"precondition: not-it, UID in object meta: {uid}",
        ),
        (
            "POST",
            url,
            eviction("ev-err", preconditions={"resourceVersion": bad_rv}),
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods "ev-err": Precondition failed: '
            f"ResourceVersion in precondition: {bad_rv}, ResourceVersion in object meta: {rv}",
        ),
        (
            "GET",
            url,
            None,
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
        ("POST", url, "{not json", 400, "BadRequest", ""),
    ]
    for method, path, body, want_code, reason, message in cases:
        if isinstance(body, str):
            async with cluster.session.post(
                cluster.base + path, data=body, headers={"Content-Type": "application/json"}
            ) as r:
                code, answer = r.status, json.loads(await r.read())
        else:
            code, answer, _ = await cluster.call(method, path, body)
        assert (code, answer["reason"]) == (want_code, reason), (body, answer)
        if message:
            assert answer["message"] == message, body
    # None of that touched the pod; matching preconditions evict it.
    good = eviction("ev-err", preconditions={"uid": uid, "resourceVersion": rv})
    code, answer, _ = await cluster.call("POST", url, good)
    assert (code, answer) == (201, SUCCESS)


async def test_grpc_evict(cluster: Cluster) -> None:
    created = await make_pod(cluster, "ev-grpc", "ghost", "Running")
    async with grpc.aio.insecure_channel(
        cluster.running.address, options=list(CHANNEL_OPTIONS)
    ) as channel:
        stub = pod_pb2_grpc.PodsStub(channel)

        def request(name: str, **options: Any) -> pod_pb2.EvictRequest:
            ev = pod_pb2.Eviction()
            ev.metadata.name, ev.metadata.namespace = name, "default"
            ev.deleteOptions.CopyFrom(meta_pb2.DeleteOptions(**options))
            return pod_pb2.EvictRequest(eviction=ev)

        cases: list[tuple[pod_pb2.EvictRequest, grpc.StatusCode, str]] = [
            (request("nope"), grpc.StatusCode.NOT_FOUND, 'pods "nope" not found'),
            (request(""), grpc.StatusCode.INVALID_ARGUMENT, "metadata.name: Required value"),
            (
                request("ev-grpc", preconditions=meta_pb2.Preconditions(uid="x")),
                grpc.StatusCode.ABORTED,
                "Precondition failed: UID in precondition: x",
            ),
            (
                request("ev-grpc", dryRun=["Nope"]),
                grpc.StatusCode.INVALID_ARGUMENT,
                'deleteOptions.dryRun[0]: Unsupported value: "Nope"',
            ),
        ]
        for req, want, text in cases:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Evict(req, timeout=10)
            assert info.value.code() == want
            assert text in (info.value.details() or "")
        dry = await stub.Evict(request("ev-grpc", dryRun=["All"]), timeout=10)
        assert not dry.pod.metadata.HasField("deletionTimestamp")
        assert dry.pod.metadata.resourceVersion == created["metadata"]["resourceVersion"]
        done = await stub.Evict(request("ev-grpc", gracePeriodSeconds=7), timeout=10)
        assert done.pod.metadata.HasField("deletionTimestamp")
        assert done.pod.metadata.deletionGracePeriodSeconds == 7


# ---- logs --------------------------------------------------------------------------------

TWO = pod(
    "web",
    "n1",
    ("a", "echo a1; echo a2; echo a3; exec sleep 3600"),
    ("b", "echo b1; exec sleep 3600"),
)


async def running_pod(c: Cluster, body: dict[str, Any], phase: str = "Running") -> None:
    name = body["metadata"]["name"]
    code, created, _ = await c.call("POST", PODS, body)
    assert code == 201, created

    async def ready() -> bool:
        _, got, _ = await c.call("GET", f"{PODS}/{name}")
        return bool(got.get("status", {}).get("phase") == phase)

    await eventually(ready, f"pod {name} to be {phase}")


async def text_of(c: Cluster, query: str, name: str = "web") -> tuple[int, str, str]:
    async with c.session.get(f"{c.base}{PODS}/{name}/log{query}") as r:
        return r.status, (await r.read()).decode(), r.headers.get("Content-Type", "")


async def test_logs_and_their_options(cluster: Cluster) -> None:
    await running_pod(cluster, TWO)

    async def written() -> bool:
        code, text, _ = await text_of(cluster, "?container=a")
        return code == 200 and text == "a1\na2\na3\n"

    await eventually(written, "container a's output")
    cases: list[tuple[str, int, str]] = [
        ("?container=a&tailLines=1", 200, "a3\n"),
        ("?container=a&tailLines=0", 200, ""),
        ("?container=a&limitBytes=4", 200, "a1\na"),
        ("?container=a&tailLines=2&limitBytes=3", 200, "a2\n"),
        ("?container=b", 200, "b1\n"),
    ]
    for query, want_code, want in cases:
        code, text, ctype = await text_of(cluster, query)
        assert (code, text) == (want_code, want), query
        assert ctype.startswith("text/plain")
    errors: list[tuple[str, int, str, str]] = [
        (
            "",
            400,
            "BadRequest",
            "a container name must be specified for pod web, choose one of: [a b]",
        ),
        ("?container=x", 400, "BadRequest", "container x is not valid for pod web"),
        (
            "?container=a&tailLines=-1",
            422,
            "Invalid",
            'PodLogOptions "web" is invalid: tailLines: Invalid value: -1: must be greater than '
            "or equal to 0",
        ),
        (
            "?container=a&limitBytes=0",
            422,
            "Invalid",
            'PodLogOptions "web" is invalid: limitBytes: Invalid value: 0: must be greater than 0',
        ),
        (
            "?container=a&sinceSeconds=0",
            422,
            "Invalid",
            'PodLogOptions "web" is invalid: sinceSeconds: Invalid value: 0: must be greater '
            "than 0",
        ),
        (
            "?container=a&sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z",
            422,
            "Invalid",
            'PodLogOptions "web" is invalid: : Forbidden: at most one of `sinceTime` or '
            "`sinceSeconds` may be specified",
        ),
        (
            "?container=a&tailLines=ten",
            400,
            "BadRequest",
            'invalid value "ten" for query parameter tailLines: strconv.ParseInt: parsing "ten": '
            "invalid syntax",
        ),
        (
            "?container=a&follow=maybe",
            400,
            "BadRequest",
            'invalid value "maybe" for query parameter follow: strconv.ParseBool: parsing '
            '"maybe": invalid syntax',
        ),
        ("?container=a&sinceTime=yesterday", 400, "BadRequest", ""),
        (
            "?container=a&previous=true",
            400,
            "BadRequest",
            'previous terminated container "a" in pod "web" not found',
        ),
    ]
    for query, want_code, reason, message in errors:
        code, text, _ = await text_of(cluster, query)
        answer = json.loads(text)
        assert (code, answer["reason"]) == (want_code, reason), (query, answer)
        if message:
            assert answer["message"] == message, query
    code, text, _ = await text_of(cluster, "", "nope")
    assert (code, json.loads(text)["message"]) == (404, 'pods "nope" not found')


async def test_logs_of_pods_without_a_running_kubelet(cluster: Cluster) -> None:
    # Not scheduled: no log location; kube-apiserver answers 200 with nothing.
    code, _, _ = await cluster.call("POST", PODS, pod("unscheduled"))
    assert code == 201
    assert (await text_of(cluster, "", "unscheduled"))[:2] == (200, "")
    # A node whose kubelet does not answer: a backend failure, 500 with the reason.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "dead"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": dead_port}},
        },
    }
    code, made, _ = await cluster.call("POST", "/api/v1/nodes", node)
    assert code == 201, made
    made["status"] = node["status"]
    code, made, _ = await cluster.call("PUT", "/api/v1/nodes/dead/status", made)
    assert code == 200, made
    code, _, _ = await cluster.call("POST", PODS, pod("stranded", "dead"))
    assert code == 201
    code, text, _ = await text_of(cluster, "", "stranded")
    answer = json.loads(text)
    assert (code, answer["reason"]) == (500, "InternalError")
    assert f"127.0.0.1:{dead_port}" in answer["message"]


async def test_follow_streams_until_the_container_ends(cluster: Cluster) -> None:
    # The container prints, then waits for a file the test creates in its working directory.
    script = "echo one; while [ ! -e go ]; do sleep 0.05; done; echo two"
    body = pod("follow", "n1", ("c", script), restartPolicy="Never")
    await running_pod(cluster, body)
    _, got, _ = await cluster.call("GET", f"{PODS}/follow")
    log_path = cluster.kubelets["n1"].runtime.log_path(got["metadata"]["uid"], "c")
    assert log_path is not None
    async with cluster.session.get(f"{cluster.base}{PODS}/follow/log?follow=true") as r:
        assert r.status == 200 and r.headers["Content-Type"] == "text/plain"
        assert await asyncio.wait_for(r.content.readline(), 20) == b"one\n"
        # <pod dir>/logs/c/0.log: the pod's directory is the container's working directory.
        (log_path.parents[2] / "go").touch()
        assert await asyncio.wait_for(r.content.readline(), 20) == b"two\n"
        # The pod finishes, so the kubelet ends the stream, and so does the apiserver.
        assert await asyncio.wait_for(r.content.read(), 30) == b""


# Each instance prints its number (kept in a file in its working directory, the pod's
# directory) on stdout, then on stderr; instance 0 crashes, instance 1 stays up.
CRASHY = (
    'n=$(cat n 2>/dev/null || echo 0); echo "run $n"; sleep 0.1; echo "err $n" >&2; '
    'echo $((n + 1)) > n; [ "$n" -ge 1 ] && exec sleep 3600; exit 3'
)
STAMPED = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.\d{9}Z (.*)")


async def restarted_once(c: Cluster, name: str) -> None:
    """Wait for `name`'s second instance to be running, having written its two lines."""

    async def ready() -> bool:
        _, got, _ = await c.call("GET", f"{PODS}/{name}")
        statuses = got.get("status", {}).get("containerStatuses", [])
        if not statuses or statuses[0].get("restartCount") != 1:
            return False
        if "running" not in statuses[0].get("state", {}):
            return False
        return (await text_of(c, "", name))[1] == "run 1\nerr 1\n"

    await eventually(ready, f"pod {name} to restart once")


def stamps(text: str) -> list[tuple[datetime, str]]:
    """(time, text) of each line of a `timestamps=true` log; every line must carry one."""
    out = []
    for line in text.splitlines():
        m = STAMPED.fullmatch(line)
        assert m is not None, f"no RFC 3339 nano timestamp: {line!r}"
        out.append((datetime.fromisoformat(m.group(1) + "+00:00"), m.group(2)))
    return out


def rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_logs_of_the_previous_instance_with_timestamps_and_since(cluster: Cluster) -> None:
    await running_pod(cluster, pod("crashy", "n1", ("c", CRASHY)))
    await restarted_once(cluster, "crashy")
    _, stamped, _ = await text_of(cluster, "?timestamps=true", "crashy")
    lines = stamps(stamped)
    assert [t for _, t in lines] == ["run 1", "err 1"]
    first, last = lines[0][0], lines[-1][0]
    cases: list[tuple[str, str]] = [
        ("", "run 1\nerr 1\n"),  # the current instance only
        ("?previous=true", "run 0\nerr 0\n"),
        ("?previous=true&tailLines=1", "err 0\n"),
        ("?tailLines=1&limitBytes=3", "err"),
        (f"?sinceTime={rfc3339(first)}", "run 1\nerr 1\n"),
        (f"?sinceTime={rfc3339(last + timedelta(seconds=1))}", ""),
        ("?sinceSeconds=3600", "run 1\nerr 1\n"),
    ]
    for query, want in cases:
        code, text, _ = await text_of(cluster, query, "crashy")
        assert (code, text) == (200, want), query
    _, text, _ = await text_of(cluster, "?previous=true&timestamps=true", "crashy")
    previous = stamps(text)
    assert [t for _, t in previous] == ["run 0", "err 0"]
    assert previous[-1][0] <= first, "the previous instance's lines are older"

    async def aged() -> bool:
        return (await text_of(cluster, "?sinceSeconds=1", "crashy"))[1] == ""

    await eventually(aged, "the lines to be older than a second")


# ---- the real kubectl ----------------------------------------------------------------------


async def kubectl(c: Cluster, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [KUBECTL, "--server", c.base, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "HOME": str(home), "KUBECONFIG": str(home / "none")},
            check=False,
        )

    return await asyncio.to_thread(run)


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_logs(cluster: Cluster, tmp_path: Path) -> None:
    body = pod(
        "kl", "n1", ("a", "echo a1; echo a2; exec sleep 3600"), ("b", "echo b1; exec sleep 3600")
    )
    await running_pod(cluster, body)

    async def written() -> bool:
        return (await text_of(cluster, "?container=a", "kl"))[1] == "a1\na2\n"

    await eventually(written, "kl's output")
    done = await kubectl(cluster, tmp_path, "logs", "kl", "-c", "a")
    assert (done.returncode, done.stdout) == (0, "a1\na2\n"), done.stderr
    done = await kubectl(cluster, tmp_path, "logs", "kl", "-c", "a", "--tail=1")
    assert (done.returncode, done.stdout) == (0, "a2\n"), done.stderr
    # kubectl picks the first container itself, and says so.
    done = await kubectl(cluster, tmp_path, "logs", "kl")
    assert (done.returncode, done.stdout) == (0, "a1\na2\n"), done.stderr
    assert 'Defaulted container "a" out of: a, b' in done.stderr
    done = await kubectl(cluster, tmp_path, "logs", "kl", "-c", "x")
    assert done.returncode == 1
    # kubectl checks the name itself first (its own wording, as against Kubernetes).
    assert done.stderr.strip() == "error: container x is not valid for pod kl out of: a, b"
    finite = pod("kf", "n1", ("c", "echo x; echo y"), restartPolicy="Never")
    await running_pod(cluster, finite, phase="Succeeded")
    done = await kubectl(cluster, tmp_path, "logs", "-f", "kf")
    assert (done.returncode, done.stdout) == (0, "x\ny\n"), done.stderr


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_logs_previous_timestamps_since(cluster: Cluster, tmp_path: Path) -> None:
    await running_pod(cluster, pod("kcrash", "n1", ("c", CRASHY)))
    await restarted_once(cluster, "kcrash")
    done = await kubectl(cluster, tmp_path, "logs", "kcrash", "--previous")
    assert (done.returncode, done.stdout) == (0, "run 0\nerr 0\n"), done.stderr
    done = await kubectl(cluster, tmp_path, "logs", "kcrash", "-p", "--timestamps")
    assert [t for _, t in stamps(done.stdout)] == ["run 0", "err 0"], done.stderr
    done = await kubectl(cluster, tmp_path, "logs", "kcrash", "--timestamps", "--tail=1")
    ((when, line),) = stamps(done.stdout)
    assert line == "err 1"
    done = await kubectl(cluster, tmp_path, "logs", "kcrash", "--since=1h")
    assert (done.returncode, done.stdout) == (0, "run 1\nerr 1\n"), done.stderr
    later = rfc3339(when + timedelta(seconds=1))
    done = await kubectl(cluster, tmp_path, "logs", "kcrash", f"--since-time={later}")
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    await running_pod(cluster, pod("kstill", "n1"))
    done = await kubectl(cluster, tmp_path, "logs", "kstill", "--previous")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        'Error from server (BadRequest): previous terminated container "c" in pod "kstill" '
        "not found"
    )


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_drain(cluster: Cluster, tmp_path: Path) -> None:
    for name in ("d1", "d2"):
        await running_pod(cluster, pod(name, "n2"))
    done = await kubectl(
        cluster,
        tmp_path,
        "drain",
        "n2",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--force",
        "--timeout=60s",
    )
    assert done.returncode == 0, done.stderr
    for name in ("d1", "d2"):
        assert f"evicting pod default/{name}" in done.stderr + done.stdout
        assert f"pod/{name} evicted" in done.stdout
    assert "node/n2 cordoned" in done.stdout and "node/n2 drained" in done.stdout
    _, node, _ = await cluster.call("GET", "/api/v1/nodes/n2")
    assert node["spec"]["unschedulable"] is True
    for name in ("d1", "d2"):
        assert (await cluster.call("GET", f"{PODS}/{name}"))[0] == 404
