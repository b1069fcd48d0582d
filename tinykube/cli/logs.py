"""`tinykube logs POD [-c CONTAINER] [-f] [--tail N]`: print a container's output.

As kubectl does, the CLI asks the apiserver for the pod, then the pod's node for its kubelet
address (the node's InternalIP and `status.daemonEndpoints.kubeletEndpoint.Port`) and streams
the `tinykube.v1.Kubelet/Logs` RPC from that kubelet directly.
"""

from __future__ import annotations

import argparse

import grpc

from tinykube import kinds
from tinykube.cli.common import CLIError, Context
from tinykube.errors import from_rpc_error
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import kubelet_pb2, kubelet_pb2_grpc, node_pb2


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "logs",
        help="print the logs of a container in a pod",
        description="Print a container's stdout and stderr, streamed from its node's kubelet.",
    )
    parser.add_argument("pod", help="pod name, or pod/NAME")
    parser.add_argument("-c", "--container", default="", help="container (if the pod has many)")
    parser.add_argument("-f", "--follow", action="store_true", help="stream new output")
    parser.add_argument("--tail", type=int, default=-1, help="only the last N lines")
    parser.set_defaults(func=run)


def kubelet_address(node: node_pb2.Node, host_ip: str = "") -> str:
    """host:port of a node's kubelet: the pod's hostIP (or the node's InternalIP) and the
    port the kubelet registered in daemonEndpoints."""
    port = node.status.daemonEndpoints.kubeletEndpoint.Port
    addresses = {a.type: a.address for a in node.status.addresses}
    host = host_ip or addresses.get("InternalIP") or addresses.get("Hostname") or ""
    if not host or not port:
        raise CLIError(f"node {node.metadata.name} does not report a kubelet endpoint")
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def pod_name(arg: str) -> str:
    """NAME or pod/NAME (what `get -o name` prints); other kinds have no logs of their own."""
    if "/" not in arg:
        return arg
    kind, _, name = arg.partition("/")
    if not name or "/" in name:
        raise CLIError("arguments in resource/name form must have a single resource and name")
    try:
        info = kinds.lookup(kind)
    except KeyError as exc:
        raise CLIError(exc.args[0]) from exc
    if info.kind != "Pod":
        raise CLIError(f"cannot get logs of a {info.kind.lower()}: tinykube logs takes pod/NAME")
    return name


async def run(args: argparse.Namespace, ctx: Context) -> int:
    args.pod = pod_name(args.pod)
    async with ctx.client() as client:
        pod = await client.pods.get(args.pod, ctx.namespace)
        if not pod.spec.nodeName:
            raise CLIError(f"pod {args.pod} is not scheduled to a node yet; it has no logs")
        node = await client.nodes.get(pod.spec.nodeName)
    request = kubelet_pb2.LogsRequest(
        namespace=ctx.namespace, name=args.pod, container=args.container, follow=args.follow
    )
    if args.tail >= 0:
        request.tailLines = args.tail
    # the kubelet's serving certificate names its node
    creds = ctx.dial_credentials(server_name=pod.spec.nodeName)
    async with creds.channel(kubelet_address(node, pod.status.hostIP), CHANNEL_OPTIONS) as channel:
        stub = kubelet_pb2_grpc.KubeletStub(channel)
        try:
            async for chunk in stub.Logs(request, timeout=None if args.follow else 30.0):
                text = chunk.data.decode("utf-8", errors="replace")
                ctx.print(text, end="")
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc
    return 0
