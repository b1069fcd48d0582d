"""`tinykube explain pod NAME` / `tinykube explain -f pod.yaml`: why a pod went where it went.

Asks the scheduler's own gRPC service (`tinykube.v1.Scheduler`, `--scheduler`, default
127.0.0.1:10259 or $TINYKUBE_SCHEDULER): Explain returns the pod's last scheduling attempt,
Simulate (with -f) a dry run of a pod that is not created. Prints the outcome, then one row per
node with every Filter plugin's verdict ("ok", the reasons, or "-" when not needed because an
earlier filter had already rejected the node), then the weighted scores of the nodes scored.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from datetime import UTC

import grpc

from tinykube.cli import printers
from tinykube.cli.common import CLIError, Context
from tinykube.errors import from_rpc_error
from tinykube.manifest import load_manifests
from tinykube.serving import CHANNEL_OPTIONS
from tinykube.v1 import pod_pb2, scheduler_pb2, scheduler_pb2_grpc

DEFAULT_SCHEDULER = "127.0.0.1:10259"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "explain",
        help="show the scheduler's verdict for a pod on every node",
        description=(
            "Ask the scheduler why a pod was placed (or not): each filter plugin's verdict per "
            "node and the weighted scores. With -f, simulate a pod without creating it."
        ),
    )
    parser.add_argument("resource", nargs="?", help="pod (the only kind explained)")
    parser.add_argument("name", nargs="?", metavar="NAME")
    parser.add_argument("-f", "--filename", help="simulate the pod in this YAML file instead")
    parser.add_argument(
        "--scheduler",
        default=os.environ.get("TINYKUBE_SCHEDULER", DEFAULT_SCHEDULER),
        help=f"scheduler gRPC address (default $TINYKUBE_SCHEDULER or {DEFAULT_SCHEDULER})",
    )
    parser.add_argument("--nodes", type=int, default=20, help="nodes to show (default 20)")
    parser.set_defaults(func=run)


async def run(args: argparse.Namespace, ctx: Context) -> int:
    if args.filename:
        request: object = scheduler_pb2.SimulateRequest(
            pod=_load_pod(args.filename, ctx.namespace), maxNodes=args.nodes
        )
        method = "Simulate"
    else:
        if args.resource not in ("pod", "pods", "po") or not args.name:
            raise CLIError("usage: tinykube explain pod NAME  (or: tinykube explain -f pod.yaml)")
        request = scheduler_pb2.ExplainRequest(
            namespace=ctx.namespace, name=args.name, maxNodes=args.nodes
        )
        method = "Explain"
    async with ctx.dial_credentials().channel(args.scheduler, CHANNEL_OPTIONS) as ch:
        stub = scheduler_pb2_grpc.SchedulerStub(ch)
        try:
            resp = await getattr(stub, method)(request, timeout=ctx.request_timeout)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc
    ctx.print(render(resp, simulated=method == "Simulate"), end="")
    return 0


def _load_pod(path: str, namespace: str) -> pod_pb2.Pod:
    with open(path) as f:
        objs = load_manifests(f.read(), path)
    pods = [o.obj for o in objs if isinstance(o.obj, pod_pb2.Pod)]
    if len(pods) != 1:
        raise CLIError(f"{path}: expected exactly one Pod, found {len(pods)}")
    pod = pods[0]
    pod.metadata.namespace = pod.metadata.namespace or namespace
    return pod


def _verdict(v: scheduler_pb2.FilterVerdict) -> str:
    if v.verdict == "PASSED":
        return "ok"
    if v.verdict == "NOT_RUN":
        return "-"
    return ", ".join(v.reasons)


def render(resp: scheduler_pb2.ExplainResponse, *, simulated: bool = False) -> str:
    out: list[str] = []
    who = f"Pod {resp.namespace}/{resp.name}"
    placed = "would be scheduled to" if simulated else "scheduled to"
    when = ""
    if resp.HasField("attemptedAt"):
        when = f" (attempt at {resp.attemptedAt.ToDatetime(UTC):%Y-%m-%d %H:%M:%S}Z)"
    if resp.selectedNode:
        out.append(
            f"{who}: {placed} {resp.selectedNode}; {resp.feasibleNodes}/{resp.totalNodes} "
            f"nodes feasible{when}"
        )
    else:
        verdict = "would be unschedulable" if simulated else "unschedulable"
        out.append(f"{who}: {verdict}: {resp.message}{when}")
    nodes = list(resp.nodes)
    if not nodes:
        return "\n".join(out) + "\n"
    shown = "" if len(nodes) >= resp.totalNodes else f" (first {len(nodes)} of {resp.totalNodes})"
    out += ["", f"Filters{shown}:"]
    plugins = [f.plugin for f in nodes[0].filters]
    rows: list[Sequence[str]] = []
    for n in nodes:
        rows.append([n.node, "yes" if n.feasible else "no", *(_verdict(v) for v in n.filters)])
    out.append(printers.render(["NODE", "FEASIBLE", *plugins], rows).rstrip("\n"))
    scored = [n for n in nodes if n.scored and n.scores]
    if scored:
        score_plugins = [(s.plugin, s.weight) for s in scored[0].scores]
        rows = []
        for n in scored:
            by = {s.plugin: s for s in n.scores}
            cells = [
                f"{by[p].score}x{w}={by[p].weighted}" if p in by else "-" for p, w in score_plugins
            ]
            mark = " <" if n.node == resp.selectedNode else ""
            rows.append([n.node, *cells, f"{n.totalScore}{mark}"])
        header = ["NODE", *(f"{p}" for p, _ in score_plugins), "TOTAL"]
        out += ["", "Scores (normalized score x weight):"]
        out.append(printers.render(header, rows).rstrip("\n"))
    elif resp.selectedNode:
        out += ["", "Not scored: only one node was feasible."]
    return "\n".join(out) + "\n"
