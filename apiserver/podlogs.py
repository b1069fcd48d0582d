"""pods/log: a container's log, streamed from the kubelet of the pod's node.

`PodLogOptions` holds Kubernetes' options (container, follow, previous, timestamps, tailLines,
limitBytes, sinceSeconds, sinceTime); `check_options` validates them as kube-apiserver does
(InvalidError naming the field). `PodLogs.stream(namespace, name, options)` resolves the pod and
its container exactly as kube-apiserver's LogLocation does (BadRequestError when a container
must be named or is not the pod's; NotFoundError for a missing pod or node), finds the kubelet
from the node's InternalIP and `status.daemonEndpoints.kubeletEndpoint.Port`, and returns an
async iterator of the kubelet's `tinykube.v1.Kubelet/Logs` chunks. A pod not yet on a node has
no log location: kube-apiserver answers that with an empty stream, and so does this.

The kubelet's own refusals (a container waiting to start, no previous instance) arrive as
gRPC statuses and are raised as the matching TinykubeError; an unreachable kubelet is
`KubeletUnreachableError`. limitBytes is also enforced here, so a cut never depends on the
kubelet. Concurrency: one coroutine per request on the apiserver's event loop; closing the
iterator (the HTTP client went away) cancels the kubelet call.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime

import grpc

from apiserver.validation import invalid
from tinykube.errors import (
    BadRequestError,
    FieldError,
    InvalidError,
    TinykubeError,
    from_rpc_error,
)
from tinykube.meta import set_timestamp
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.tls import PLAINTEXT, Credentials
from tinykube.v1 import kubelet_pb2, kubelet_pb2_grpc, node_pb2, pod_pb2

# How long a non-follow log request may take end to end (a follow has no deadline).
LOGS_TIMEOUT = 60.0
# gRPC codes that mean the kubelet could not be reached, not that it refused the request.
_UNREACHABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN}
)


GetPod = Callable[[str, str], Awaitable[pod_pb2.Pod]]  # (namespace, name); NotFoundError
GetNode = Callable[[str], Awaitable[node_pb2.Node]]


class KubeletUnreachableError(TinykubeError):
    """The pod's kubelet did not answer (a backend failure: REST 500, as kube-apiserver)."""

    code = grpc.StatusCode.UNAVAILABLE


@dataclass(frozen=True)
class PodLogOptions:
    """Kubernetes' PodLogOptions, already converted from the query string."""

    container: str = ""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    since_seconds: int | None = None
    since_time: datetime | None = None


def check_options(name: str, options: PodLogOptions) -> None:
    """kube-apiserver's PodLogOptions validation: InvalidError (422) naming each field."""
    problems: list[FieldError] = []
    if options.tail_lines is not None and options.tail_lines < 0:
        problems.append(
            invalid("tailLines", options.tail_lines, "must be greater than or equal to 0")
        )
    if options.limit_bytes is not None and options.limit_bytes < 1:
        problems.append(invalid("limitBytes", options.limit_bytes, "must be greater than 0"))
    if options.since_seconds is not None and options.since_time is not None:
        problems.append(
            FieldError(
                "", "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
            )
        )
    elif options.since_seconds is not None and options.since_seconds < 1:
        problems.append(invalid("sinceSeconds", options.since_seconds, "must be greater than 0"))
    if problems:
        raise InvalidError.for_object("PodLogOptions", name, problems)


def pick_container(pod: pod_pb2.Pod, container: str) -> str:
    """The container whose log is asked for, by kube-apiserver's rules and messages."""
    name = pod.metadata.name
    if not container:
        names = [c.name for c in pod.spec.containers]
        if len(names) == 1:
            return names[0]
        if not names:
            raise BadRequestError(f"a container name must be specified for pod {name}")
        message = (
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
        )
        inits = [c.name for c in pod.spec.initContainers]
        if inits:
            message += f" or one of the init containers: [{' '.join(inits)}]"
        ephemerals = [c.name for c in pod.spec.ephemeralContainers]
        if ephemerals:
            message += f" or one of the ephemeral containers: [{' '.join(ephemerals)}]"
        raise BadRequestError(message)
    known = {c.name for c in (*pod.spec.containers, *pod.spec.initContainers)}
    known.update(c.name for c in pod.spec.ephemeralContainers)
    if container not in known:
        raise BadRequestError(f"container {container} is not valid for pod {name}")
    return container


def kubelet_address(node: node_pb2.Node) -> str:
    """host:port of the node's kubelet (InternalIP, else Hostname; the registered port)."""
    port = node.status.daemonEndpoints.kubeletEndpoint.Port
    addresses = {a.type: a.address for a in node.status.addresses}
    host = addresses.get("InternalIP") or addresses.get("Hostname") or ""
    if not host or not port:
        known = [f"{{{a.type} {a.address}}}" for a in node.status.addresses]
        raise KubeletUnreachableError(
            f"no preferred addresses found; known addresses: [{' '.join(known)}]"
            if not host
            else f"node {node.metadata.name} does not report its kubelet's port"
        )
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def logs_request(
    pod: pod_pb2.Pod, container: str, options: PodLogOptions
) -> kubelet_pb2.LogsRequest:
    req = kubelet_pb2.LogsRequest(
        namespace=pod.metadata.namespace,
        name=pod.metadata.name,
        container=container,
        follow=options.follow,
        previous=options.previous,
        timestamps=options.timestamps,
    )
    if options.tail_lines is not None:
        req.tailLines = min(options.tail_lines, 2**31 - 1)
    if options.limit_bytes is not None:
        req.limitBytes = options.limit_bytes
    if options.since_seconds is not None:
        req.sinceSeconds = options.since_seconds
    if options.since_time is not None:
        set_timestamp(req.sinceTime, options.since_time)
    return req


class PodLogs:
    """Resolves pods to kubelets and streams their logs (one gRPC channel per request)."""

    def __init__(
        self, get_pod: GetPod, get_node: GetNode, credentials: Credentials = PLAINTEXT
    ) -> None:
        self.get_pod = get_pod
        self.get_node = get_node
        # The apiserver's kubelet client certificate and the CA of kubelets' serving
        # certificates; each kubelet's certificate is checked for its node's name.
        self.credentials = credentials

    async def stream(
        self, namespace: str, name: str, options: PodLogOptions
    ) -> AsyncGenerator[bytes, None]:
        """The log's chunks. Errors before the first chunk are raised by the first `anext`."""
        pod = await self.get_pod(namespace, name)
        check_options(name, options)
        container = pick_container(pod, options.container)
        if not pod.spec.nodeName:
            return  # no location yet: kube-apiserver streams nothing
        node = await self.get_node(pod.spec.nodeName)
        address = kubelet_address(node)
        req = logs_request(pod, container, options)
        left = options.limit_bytes
        creds = self.credentials
        if not creds.insecure:
            creds = replace(creds, server_name=node.metadata.name)
        async with creds.channel(address, CHANNEL_OPTIONS) as channel:
            stub = kubelet_pb2_grpc.KubeletStub(channel)
            call = stub.Logs(req, timeout=None if options.follow else LOGS_TIMEOUT)
            try:
                async for chunk in call:
                    data: bytes = chunk.data
                    if left is not None:
                        data = data[:left]
                        left -= len(data)
                    if data:
                        yield data
                    if left is not None and left <= 0:
                        return
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
                if code in _UNREACHABLE:
                    details = exc.details() if hasattr(exc, "details") else str(exc)
                    raise KubeletUnreachableError(
                        f"error talking to the kubelet of node {node.metadata.name} at "
                        f"{address}: {details}"
                    ) from exc
                raise from_rpc_error(exc) from exc
            finally:
                call.cancel()
