"""nodes/{name}/proxy: what of a kubelet's own API the apiserver relays.

kube-apiserver proxies any path under `/api/v1/nodes/<node>/proxy/` to the kubelet's HTTPS port;
tinykube's kubelets speak gRPC, so the proxy answers the paths the kubelet serves as calls:
`stats/summary` (kube's summary API, what metrics-server and `kubectl get --raw` read) becomes
the kubelet's `Summary` call with the apiserver's kubelet client certificate (which the
kubelet authorizes for nodes/stats). The caller needs `get` on nodes/proxy, as in kube. Other
paths are 404 naming the supported one.
"""

from __future__ import annotations

from dataclasses import replace

import grpc

from apiserver.podlogs import _UNREACHABLE, KubeletUnreachableError, kubelet_address
from tinykube.errors import NotFoundError, from_rpc_error
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.tls import Credentials
from tinykube.v1 import kubelet_pb2, kubelet_pb2_grpc, node_pb2

SUMMARY_TIMEOUT = 30.0
PATHS = ("stats/summary",)


async def proxy_get(
    node: node_pb2.Node, path: str, query: dict[str, str], credentials: Credentials
) -> bytes:
    """The kubelet's answer (JSON) to GET `path` on node `node`."""
    path = path.strip("/")
    if path not in PATHS:
        raise NotFoundError(
            f'the kubelet of node "{node.metadata.name}" serves no "/{path}" through the '
            f"apiserver's proxy (supported: {', '.join('/' + p for p in PATHS)})"
        )
    only = query.get("only_cpu_and_memory", "").lower() in ("1", "true", "t")
    address = kubelet_address(node)
    if not credentials.insecure:
        credentials = replace(credentials, server_name=node.metadata.name)
    async with credentials.channel(address, CHANNEL_OPTIONS) as channel:
        stub = kubelet_pb2_grpc.KubeletStub(channel)
        try:
            resp = await stub.Summary(
                kubelet_pb2.SummaryRequest(onlyCpuAndMemory=only), timeout=SUMMARY_TIMEOUT
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() in _UNREACHABLE:
                raise KubeletUnreachableError(
                    f"error talking to the kubelet of node {node.metadata.name} at {address}: "
                    f"{exc.details()}"
                ) from exc
            raise from_rpc_error(exc) from exc
    data: bytes = resp.json
    return data
