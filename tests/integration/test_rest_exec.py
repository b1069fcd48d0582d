"""pods/exec, pods/attach and pods/portforward on the REST API against a real etcd and an
in-process kubelet (process runtime): the WebSocket protocols as a client library speaks them
(aiohttp's client), and every refusal an HTTP Status before the upgrade, never a 500.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from kubelet.app import Kubelet
from kubelet.settings import Settings as KubeletSettings
from tests.integration.conftest import make_settings, start_apiserver, stop_kubelet
from tests.integration.test_rest_evict_logs import Cluster, eventually, pod
from tinykube import remotecommand as rc
from tinykube.localetcd import EtcdServer

pytestmark = pytest.mark.integration

PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture(scope="module")
async def cluster(
    etcd_server: EtcdServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Cluster]:
    running = await start_apiserver(make_settings(etcd_server.endpoint, rest_port=0))
    session = aiohttp.ClientSession()
    kubelet = Kubelet(
        KubeletSettings(
            node_name="n1",
            apiserver=running.address,
            bind_address="127.0.0.1:0",
            root_dir=tmp_path_factory.mktemp("n1"),
            poll_interval=0.1,
        )
    )
    try:
        await kubelet.start()
        c = Cluster(running, session, f"http://{running.server.rest_address}", {"n1": kubelet})

        async def registered() -> bool:
            code, node, _ = await c.call("GET", "/api/v1/nodes/n1")
            return code == 200 and bool(node["status"].get("daemonEndpoints"))

        await eventually(registered, "the kubelet to register")
        for name, node, commands in (
            ("box", "n1", ()),
            ("done", "n1", (("c", "true"),)),
            ("nowhere", "", ()),
        ):
            extra = {"restartPolicy": "Never"} if name == "done" else {}
            code, body, _ = await c.call("POST", PODS, pod(name, node, *commands, **extra))
            assert code == 201, body

        broken = pod("broken", "n1")
        broken["spec"]["containers"][0]["command"] = ["no-such-program-anywhere"]
        code, body, _ = await c.call("POST", PODS, broken)
        assert code == 201, body

        async def phases() -> bool:
            _, box, _ = await c.call("GET", f"{PODS}/box")
            _, done, _ = await c.call("GET", f"{PODS}/done")
            _, broken, _ = await c.call("GET", f"{PODS}/broken")
            statuses = broken["status"].get("containerStatuses") or [{}]
            return bool(
                box["status"].get("phase") == "Running"
                and done["status"].get("phase") == "Succeeded"
                and statuses[0].get("state", {}).get("waiting")
            )

        await eventually(phases, "box Running, done Succeeded, broken waiting")
        yield c
    finally:
        await session.close()
        await stop_kubelet(kubelet)
        await running.server.stop()


def exec_url(c: Cluster, name: str, *command: str, **params: str) -> str:
    query = "&".join([*(f"command={x}" for x in command), *(f"{k}={v}" for k, v in params.items())])
    return f"{c.base}{PODS}/{name}/exec?{query}"


async def run(ws: aiohttp.ClientWebSocketResponse) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    async for msg in ws:
        assert msg.type == aiohttp.WSMsgType.BINARY
        channel, data = rc.parse(msg.data)
        out[channel] = out.get(channel, b"") + data
    return out


async def test_exec_v5_with_stdin_and_close(cluster: Cluster) -> None:
    url = exec_url(cluster, "box", "sh", "-c", "cat; exit 7", stdin="true", stdout="true")
    async with cluster.session.ws_connect(url, protocols=(rc.V5, rc.V4)) as ws:
        assert ws.protocol == rc.V5
        await ws.send_bytes(rc.frame(rc.STDIN, b"piped\n"))
        await ws.send_bytes(rc.frame(rc.CLOSE, bytes([rc.STDIN])))
        out = await asyncio.wait_for(run(ws), 60)
    assert out[rc.STDOUT] == b"piped\n"
    status = json.loads(out[rc.ERROR])
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "7"}]


async def test_exec_v4_when_only_v4_is_offered(cluster: Cluster) -> None:
    url = exec_url(cluster, "box", "echo", "hi", stdout="true", stderr="True")
    async with cluster.session.ws_connect(url, protocols=(rc.V4,)) as ws:
        assert ws.protocol == rc.V4
        out = await asyncio.wait_for(run(ws), 60)
    assert out[rc.STDOUT] == b"hi\n"
    assert json.loads(out[rc.ERROR]) == {"metadata": {}, "status": "Success"}


async def _refusal(cluster: Cluster, url: str, **kw: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        async with cluster.session.ws_connect(url, **kw):
            pass
    # The handshake's body is the Status; read it again with a plain GET carrying the headers.
    headers = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Protocol": ", ".join(kw.get("protocols", (rc.V5,))),
    }
    async with cluster.session.get(url, headers=headers) as resp:
        body = await resp.json()
    assert resp.status == err.value.status
    return resp.status, body


@pytest.mark.parametrize(
    ("name", "params", "command", "code", "message"),
    [
        (
            "box",
            {"container": "nope", "stdout": "1"},
            ("true",),
            400,
            "container nope is not valid for pod box",
        ),
        ("box", {"stdout": "1"}, (), 400, "you must specify at least 1 command"),
        ("box", {}, ("true",), 400, "you must specify at least 1 of stdin, stdout, stderr"),
        (
            "box",
            {"stdout": "maybe"},
            ("true",),
            400,
            'invalid value "maybe" for query parameter stdout',
        ),
        ("nowhere", {"stdout": "1"}, ("true",), 400, "pod nowhere does not have a host assigned"),
        ("ghost", {"stdout": "1"}, ("true",), 404, 'pods "ghost" not found'),
        ("broken", {"stdout": "1"}, ("true",), 404, 'container not found ("c")'),
        (
            "done",
            {"stdout": "1"},
            ("true",),
            400,
            "cannot exec into a container in a completed pod; current phase is Succeeded",
        ),
    ],
)
async def test_exec_refusals(
    cluster: Cluster,
    name: str,
    params: dict[str, str],
    command: tuple[str, ...],
    code: int,
    message: str,
) -> None:
    url = exec_url(cluster, name, *command, **params)
    status, body = await _refusal(cluster, url, protocols=(rc.V5,))
    assert status == code
    assert body["kind"] == "Status" and body["code"] == code
    assert message in body["message"]


async def test_a_request_that_is_not_an_upgrade_names_what_is_served(cluster: Cluster) -> None:
    url = exec_url(cluster, "box", "true", stdout="1")
    async with cluster.session.post(url) as resp:
        body = await resp.json()
    assert resp.status == 400
    assert body["message"] == (
        "pods/exec is served over WebSockets (an Upgrade: websocket request with subprotocol "
        "v5.channel.k8s.io or v4.channel.k8s.io) or SPDY/3.1 (Upgrade: SPDY/3.1)"
    )


async def test_a_spdy_upgrade_needs_a_common_protocol(cluster: Cluster) -> None:
    """kube's httpstream.Handshake: no X-Stream-Protocol-Version is a 400, none in common a
    403 naming both lists."""
    url = exec_url(cluster, "box", "true", stdout="1")
    upgrade = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}
    async with cluster.session.post(url, headers=upgrade) as resp:
        body = await resp.json()
    assert resp.status == 400
    assert body["message"] == "unable to upgrade: X-Stream-Protocol-Version is required"
    headers = {**upgrade, "X-Stream-Protocol-Version": "v2.channel.k8s.io, v1.channel.k8s.io"}
    async with cluster.session.post(url, headers=headers) as resp:
        body = await resp.json()
    assert resp.status == 403
    assert body["message"] == (
        "unable to upgrade: unable to negotiate protocol: client supports [v2.channel.k8s.io "
        "v1.channel.k8s.io], server accepts [v4.channel.k8s.io]"
    )


async def test_an_unknown_subprotocol_is_refused(cluster: Cluster) -> None:
    url = exec_url(cluster, "box", "true", stdout="1")
    status, body = await _refusal(cluster, url, protocols=("base64.channel.k8s.io",))
    assert status == 400
    assert "offer one of: v5.channel.k8s.io, v4.channel.k8s.io" in body["message"]


async def test_port_forward_ports_are_checked(cluster: Cluster) -> None:
    for query, message in (
        ("", "at least 1 port is required"),
        ("ports=http", 'unable to parse "http" as a port'),
        ("ports=70000", "port 70000 must be > 0 and <= 65535"),
    ):
        url = f"{cluster.base}{PODS}/box/portforward?{query}"
        status, body = await _refusal(cluster, url, protocols=(rc.V4,))
        assert (status, message in body["message"]) == (400, True), body


async def test_attach_to_a_running_container_upgrades(cluster: Cluster) -> None:
    url = f"{cluster.base}{PODS}/box/attach?stdout=1&container=c"
    async with cluster.session.ws_connect(url, protocols=(rc.V5,)) as ws:
        assert ws.protocol == rc.V5
        # sleep writes nothing; the stream stays open until we leave
        await ws.close()
