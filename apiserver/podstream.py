"""pods/exec, pods/attach and pods/portforward: a client's WebSocket relayed to the kubelet.

As kube-apiserver's ExecREST/AttachREST/PortForwardREST, the apiserver checks the request (the
pod, the container, the options), finds the pod's kubelet and hands the stream over; here the
kubelet's side is its `Exec`/`Attach`/`PortForward` bidirectional gRPC calls (kubelet.proto),
reached like pods/log's (apiserver/podlogs.py: the node's address and kubelet port, the
apiserver's kubelet-client certificate, the kubelet's serving certificate checked for the node's
name). The WebSocket upgrade happens only once the kubelet has accepted the stream, so its
refusals (`container not found ("x")`) are plain HTTP errors, which kubectl prints after
"unable to upgrade connection: ".

Protocols (tinykube/remotecommand.py): exec and attach speak `v5.channel.k8s.io` or
`v4.channel.k8s.io`, port-forward kubectl's SPDY/3.1 tunnel (apiserver/portforward.py) or
`v4.channel.k8s.io` (the Python client's); the client's first offered one that the server
speaks is chosen. Each WebSocket message goes to the kubelet as one frame and back, unchanged.
A plain SPDY/3.1 upgrade (kubectl's fallback, client-go's SPDY executor) is served too
(apiserver/spdyupgrade.py); any other request is a 400 naming both. Closing either side ends
the other: a client that goes away cancels the kubelet call, which ends the exec'd process.

Concurrency: one coroutine per stream and one helper task relaying the client's messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import grpc
from aiohttp import WSMsgType, web

from apiserver.kubeletstream import Call, messages, next_frame
from apiserver.podlogs import KubeletUnreachableError, kubelet_address
from apiserver.portforward import TUNNEL_PROTOCOL, SpdyTunnel, WsPipe
from apiserver.spdyupgrade import (
    PORT_FORWARD_PROTOCOLS,
    REMOTECOMMAND_PROTOCOLS,
    RemoteCommand,
    is_spdy_upgrade,
    negotiate,
    upgrade,
)
from tinykube import remotecommand as rc
from tinykube.errors import BadRequestError, NotFoundError, from_rpc_error, from_status
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.tls import PLAINTEXT, Credentials
from tinykube.v1 import kubelet_pb2, kubelet_pb2_grpc, node_pb2, pod_pb2

log = logging.getLogger(__name__)

GetPod = Callable[[str, str], Awaitable[pod_pb2.Pod]]
GetNode = Callable[[str], Awaitable[node_pb2.Node]]

# How long the kubelet may take to accept a stream.
ACCEPT_TIMEOUT = 30.0
MAX_MESSAGE = 4 * 1024 * 1024
_UNREACHABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN}
)


@dataclass(frozen=True)
class StreamOptions:
    """PodExecOptions, PodAttachOptions or PodPortForwardOptions from the query string."""

    container: str = ""
    command: Sequence[str] = ()
    stdin: bool = False
    stdout: bool = False
    stderr: bool = False
    tty: bool = False
    ports: Sequence[int] = field(default_factory=tuple)


def pick_container(pod: pod_pb2.Pod, container: str) -> pod_pb2.Container:
    """The container by kube-apiserver's rules (one container may go unnamed)."""
    name = pod.metadata.name
    if not container:
        names = [c.name for c in pod.spec.containers]
        if len(names) == 1:
            return pod.spec.containers[0]
        raise BadRequestError(
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
        )
    for c in pod.spec.containers:
        if c.name == container:
            return c
    for ec in pod.spec.ephemeralContainers:
        if ec.name == container:
            # exec and attach reach an ephemeral container as any other (kube's
            # podutil.AllContainers); the kubelet knows it by its name.
            return pod_pb2.Container(name=ec.name, stdin=ec.stdin, tty=ec.tty)
    raise BadRequestError(f"container {container} is not valid for pod {name}")


def check_running(pod: pod_pb2.Pod, container: str) -> None:
    """What the kubelet would answer for a container that is not running, as the pod's status
    tells it (so that kubectl's SPDY retry after a refused WebSocket hears the same)."""
    if pod.status.phase in ("Succeeded", "Failed"):
        raise BadRequestError(
            f"cannot exec into a container in a completed pod; current phase is {pod.status.phase}"
        )
    statuses = (*pod.status.containerStatuses, *pod.status.ephemeralContainerStatuses)
    status = next((s for s in statuses if s.name == container), None)
    if status is None or not status.state.HasField("running"):
        raise NotFoundError(f'container not found ("{container}")')


def check_options(kind: str, options: StreamOptions) -> None:
    """kube's checks of exec and attach options (400s in its words)."""
    if kind == "exec" and not options.command:
        raise BadRequestError("you must specify at least 1 command")
    if kind in ("exec", "attach") and not (options.stdin or options.stdout or options.stderr):
        raise BadRequestError("you must specify at least 1 of stdin, stdout, stderr")


class PodStreams:
    """Checks a streaming request, opens the kubelet's call and relays the WebSocket."""

    def __init__(
        self, get_pod: GetPod, get_node: GetNode, credentials: Credentials = PLAINTEXT
    ) -> None:
        self.get_pod = get_pod
        self.get_node = get_node
        self.credentials = credentials

    async def serve(
        self,
        request: web.Request,
        kind: str,
        namespace: str,
        name: str,
        options: StreamOptions,
    ) -> web.StreamResponse:
        pod = await self.get_pod(namespace, name)
        check_options(kind, options)
        container = None if kind == "portforward" else pick_container(pod, options.container)
        if not pod.spec.nodeName:
            raise BadRequestError(f"pod {name} does not have a host assigned")
        if container is not None:
            check_running(pod, container.name)
        protocols = (
            (TUNNEL_PROTOCOL, *rc.PORT_FORWARD_PROTOCOLS)
            if kind == "portforward"
            else rc.EXEC_PROTOCOLS
        )
        ws = web.WebSocketResponse(
            protocols=protocols, autoping=True, compress=False, max_msg_size=MAX_MESSAGE
        )
        ready = ws.can_prepare(request)
        if not ready.ok:
            if is_spdy_upgrade(request):
                return await self._serve_spdy(request, kind, pod, container, options)
            raise BadRequestError(
                f"pods/{kind} is served over WebSockets (an Upgrade: websocket request with "
                f"subprotocol {' or '.join(protocols)}) or SPDY/3.1 (Upgrade: SPDY/3.1)"
            )
        if ready.protocol is None:
            raise BadRequestError(
                f"none of the WebSocket subprotocols offered is served for pods/{kind}; "
                f"offer one of: {', '.join(protocols)}"
            )
        if kind == "portforward" and ready.protocol != TUNNEL_PROTOCOL and not options.ports:
            # The SPDY tunnel names its ports per stream; the channel protocol up front.
            raise BadRequestError("at least 1 port is required (query parameter ports)")
        node = await self.get_node(pod.spec.nodeName)
        address = kubelet_address(node)
        start = _start(pod, container, options, ready.protocol)
        async with self._channel(node, address) as channel:
            stub = kubelet_pb2_grpc.KubeletStub(channel)
            if ready.protocol == TUNNEL_PROTOCOL:
                return await self._tunnel(request, ws, stub, start, node.metadata.name, address)
            method = {"exec": stub.Exec, "attach": stub.Attach, "portforward": stub.PortForward}
            call = method[kind]()
            try:
                await self._accept(call, start, node.metadata.name, address)
                await ws.prepare(request)
                await self._relay(ws, call)
            finally:
                call.cancel()
        return ws

    def _channel(self, node: node_pb2.Node, address: str) -> Any:
        creds = self.credentials
        if not creds.insecure:
            creds = replace(creds, server_name=node.metadata.name)
        return creds.channel(address, CHANNEL_OPTIONS)

    def _port_calls(
        self,
        stub: kubelet_pb2_grpc.KubeletStub,
        start: kubelet_pb2.StreamStart,
        node: str,
        address: str,
    ) -> Callable[[int], Awaitable[Call]]:
        """Opens one accepted kubelet PortForward call for one forwarded connection."""

        async def open_call(port: int) -> Call:
            one = kubelet_pb2.StreamStart()
            one.CopyFrom(start)
            one.protocol = rc.V4
            del one.ports[:]
            one.ports.append(port)
            call = cast(Call, stub.PortForward())  # type: ignore[call-arg]
            try:
                await self._accept(call, one, node, address)
            except BaseException:
                call.cancel()
                raise
            return call

        return open_call

    async def _tunnel(
        self,
        request: web.Request,
        ws: web.WebSocketResponse,
        stub: kubelet_pb2_grpc.KubeletStub,
        start: kubelet_pb2.StreamStart,
        node: str,
        address: str,
    ) -> web.WebSocketResponse:
        """kubectl's SPDY tunnel: one kubelet call per forwarded connection."""
        await ws.prepare(request)
        try:
            await SpdyTunnel(WsPipe(ws), self._port_calls(stub, start, node, address)).run()
        finally:
            with contextlib.suppress(Exception):
                await ws.close()
        return ws

    async def _serve_spdy(
        self,
        request: web.Request,
        kind: str,
        pod: pod_pb2.Pod,
        container: pod_pb2.Container | None,
        options: StreamOptions,
    ) -> web.StreamResponse:
        """A plain SPDY/3.1 upgrade (apiserver/spdyupgrade.py): port-forward's streams as in
        the WebSocket tunnel; exec and attach as remotecommand v4, the kubelet's call accepted
        before the 101 answer so its refusals are HTTP errors too."""
        supported = PORT_FORWARD_PROTOCOLS if kind == "portforward" else REMOTECOMMAND_PROTOCOLS
        protocol = negotiate(request, supported)
        node = await self.get_node(pod.spec.nodeName)
        address = kubelet_address(node)
        # The kubelet hears v5's close signal for stdin's end (its FIN here).
        start = _start(pod, container, options, rc.V5)
        async with self._channel(node, address) as channel:
            stub = kubelet_pb2_grpc.KubeletStub(channel)
            if kind == "portforward":
                resp, conn = await upgrade(request, protocol)
                try:
                    await SpdyTunnel(
                        conn, self._port_calls(stub, start, node.metadata.name, address)
                    ).run()
                finally:
                    conn.close()
                return resp
            call = stub.Exec() if kind == "exec" else stub.Attach()
            try:
                await self._accept(call, start, node.metadata.name, address)
                resp, conn = await upgrade(request, protocol)
                await RemoteCommand(
                    conn,
                    stdin=options.stdin,
                    stdout=options.stdout,
                    stderr=options.stderr,
                    tty=options.tty,
                ).run(call)
            finally:
                call.cancel()
            return resp

    async def _accept(
        self,
        call: Call,
        start: kubelet_pb2.StreamStart,
        node: str,
        address: str,
    ) -> None:
        try:
            await call.write(kubelet_pb2.StreamFrame(start=start))
            first = await asyncio.wait_for(next_frame(call), ACCEPT_TIMEOUT)
        except (grpc.RpcError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError):
                raise KubeletUnreachableError(
                    f"error talking to the kubelet of node {node} at {address}: no answer"
                ) from exc
            raise self._error(exc, node, address) from exc
        if first is None:
            code = await call.code()
            details = await call.details()
            if code in _UNREACHABLE:
                raise KubeletUnreachableError(
                    f"error talking to the kubelet of node {node} at {address}: {details}"
                )
            raise from_status(code, details or code.name)

    @staticmethod
    def _error(exc: grpc.RpcError, node: str, address: str) -> Exception:
        code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
        if code in _UNREACHABLE:
            details = exc.details() if hasattr(exc, "details") else str(exc)
            return KubeletUnreachableError(
                f"error talking to the kubelet of node {node} at {address}: {details}"
            )
        return from_rpc_error(exc)

    async def _relay(
        self,
        ws: web.WebSocketResponse,
        call: Call,
    ) -> None:
        async def upstream() -> None:
            """The client's messages to the kubelet; its close ends our side of the call."""
            try:
                async for msg in ws:
                    if msg.type == WSMsgType.BINARY:
                        data = msg.data
                    elif msg.type == WSMsgType.TEXT:
                        data = msg.data.encode()
                    else:
                        continue
                    await call.write(kubelet_pb2.StreamFrame(data=data))
            except (grpc.RpcError, asyncio.InvalidStateError, ConnectionError):
                # A failed write: the kubelet has ended the call, whose last frames are still
                # to be read (apiserver/kubeletstream.py).
                return
            # The client is gone: the kubelet call ends (and with it the process).
            call.cancel()

        up = asyncio.ensure_future(upstream())
        try:
            async with contextlib.aclosing(messages(call)) as frames:
                async for data in frames:
                    if ws.closed:
                        break
                    try:
                        await ws.send_bytes(data)
                    except ConnectionError:
                        break
        finally:
            up.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await up
            with contextlib.suppress(Exception):
                await ws.close()


def _start(
    pod: pod_pb2.Pod,
    container: pod_pb2.Container | None,
    options: StreamOptions,
    protocol: str,
) -> kubelet_pb2.StreamStart:
    return kubelet_pb2.StreamStart(
        namespace=pod.metadata.namespace,
        name=pod.metadata.name,
        container=container.name if container is not None else "",
        command=list(options.command),
        stdin=options.stdin,
        stdout=options.stdout,
        stderr=options.stderr and not options.tty,
        tty=options.tty,
        protocol=protocol,
        ports=list(options.ports),
    )
