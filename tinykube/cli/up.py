"""`tinykube up`: run a whole local cluster in the foreground until Ctrl-C.

Starts `tinykube.launcher.LocalCluster` with the default ports (etcd 2379, apiserver 6443 and
its REST API 8080, scheduler 10259, controller manager 10257, kubelets 10250, 10251, ...) or free
ones
(`--free-ports` for every port no flag sets, or a port flag set to 0), prints every endpoint,
writes them to `DATA_DIR/endpoints.json`, and waits. Every link is TLS: the cluster CA and
certificates live in `DATA_DIR/pki` (`--pki-dir`; reused across restarts), the admin's
kubeconfig is `DATA_DIR/kubeconfig` and each component's is beside it (`--insecure`: plaintext,
no credentials, a warning). A component that exits on its own (a scheduler or controller manager
that lost its lease exits 1, as kube's do) is reported with its exit code and log file and
started again after the kubelet's crash-loop back-off (10 s doubling to 5 min, reset after 10
minutes running; `launcher.RestartBackoff`), as the kubelet restarts kube's static pods; each
restart is reported too (`--no-restart`: only reported). Ctrl-C or SIGTERM stops every process
(SIGTERM, then SIGKILL after a grace) and exits 0. The data directory (etcd's data and the logs)
survives restarts of `up`. A component that fails to start is reported with its log's tail (exit 1).

Each kubelet reports an equal share of this machine (`machine_share`: cores and memory divided
by the number of kubelets), so the cluster never promises more than the machine has;
`--node-capacity cpu=..,memory=..,pods=..` overrides any of them for every node.

Before starting anything it takes the data directory's lock and checks that every port it will
listen on is free (exit 1 naming the running cluster or the port; `launcher.ClusterRunning`,
`launcher.PortInUse`). Its processes get a parent-death signal (`tinykube.pdeathsig`), so they
stop when `up` dies however it dies. The suggested commands are printed by a path that runs
them from where `up` runs (`tool_command`): `.venv/bin/tinykube` unless PATH finds that file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from tinykube import launcher
from tinykube.cli.common import DEFAULT_SERVER, Context
from tinykube.containerd import (
    BUSYBOX_IMAGE,
    KUBE_DNS_IP,
    NodeRuntimes,
    install_hint,
    missing_prerequisites,
    publish_dns,
)
from tinykube.localetcd import free_port
from tinykube.quantity import QuantityError, parse_quantity
from tinykube.tls import INSECURE_WARNING

POLL_SECONDS = 1.0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "up",
        help="run a local cluster (etcd, apiserver, scheduler, controller, kubelets, proxies)",
        description="Start a local tinykube cluster in the foreground; Ctrl-C stops it.",
        global_flags=False,
    )
    parser.add_argument(
        "--data-dir",
        default=".tinykube",
        help="etcd data and component logs (default ./.tinykube)",
    )
    parser.add_argument(
        "--kubelets", type=int, default=2, help="number of kubelets, node-1..node-N (default 2)"
    )
    parser.add_argument(
        "--runtime",
        "--kubelet-runtime",
        dest="kubelet_runtime",
        default="process",
        choices=("process", "fake", "containerd"),
        help="pod runtime: process (local processes), fake (Running at once), containerd (real "
        "containers: one containerd per node with its own pod network; needs root and "
        "Debian's containerd runc containernetworking-plugins busybox-static)",
    )
    parser.add_argument(
        "--node-capacity",
        type=parse_capacity,
        default=None,
        metavar="cpu=Q,memory=Q,pods=N",
        help="what every node reports (the kubelet's --capacity); a resource not given is an "
        "equal share of this machine's cores and memory, and 110 pods. Default: each node "
        "gets 1/N of the machine, so the cluster promises no more than it has",
    )
    parser.add_argument("--no-scheduler", action="store_true", help="do not start the scheduler")
    parser.add_argument(
        "--no-controller", action="store_true", help="do not start the controller manager"
    )
    parser.add_argument(
        "--no-proxy",
        action="store_true",
        help="no proxy beside each kubelet, and kubelets share 127.0.0.1 instead of 127.0.1.N",
    )
    defaults = (
        ("etcd", launcher.DEFAULT_ETCD_PORT),
        ("apiserver", launcher.DEFAULT_APISERVER_PORT),
        ("scheduler", launcher.DEFAULT_SCHEDULER_PORT),
        ("controller", launcher.DEFAULT_CONTROLLER_PORT),
        ("rest", launcher.DEFAULT_REST_PORT),
    )
    for name, port in defaults:
        what = "the apiserver's REST API (kubectl), " if name == "rest" else ""
        parser.add_argument(f"--{name}-port", type=int, default=None, help=f"{what}default {port}")
    parser.add_argument(
        "--kubelet-port",
        type=int,
        default=None,
        help=f"first kubelet's port (default {launcher.DEFAULT_KUBELET_PORT}); the i-th gets +i",
    )
    parser.add_argument(
        "--free-ports",
        action="store_true",
        help="free ports for every port not given by a flag (tests; see endpoints.json)",
    )
    parser.add_argument(
        "--no-restart",
        dest="restart",
        action="store_false",
        help="report a component that exits on its own but do not start it again",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="development only: no certificates, plaintext links, no authentication",
    )
    parser.add_argument(
        "--etcd-socket",
        action="store_true",
        help="the apiserver dials etcd on a unix socket in DATA_DIR/etcd instead of its TCP "
        "port (not with --ha)",
    )
    parser.add_argument(
        "--pki-dir",
        default=None,
        help="the cluster CA and certificates (default DATA_DIR/pki; reused across restarts)",
    )
    parser.add_argument(
        "--start-timeout", type=float, default=60.0, help="seconds each component gets to start"
    )
    parser.add_argument(
        "--ha",
        action="store_true",
        help="high availability: 3 etcd members (client ports ETCD_PORT+2i, peers +1) and 2 "
        "apiservers (the second on APISERVER_PORT+1 and REST_PORT+1)",
    )
    parser.set_defaults(func=run)


def build_cluster(args: argparse.Namespace) -> launcher.LocalCluster:
    def port(value: int | None, default: int) -> int:
        if value is not None:
            return value
        return 0 if args.free_ports else default

    nodes = [f"node-{i}" for i in range(1, args.kubelets + 1)]
    capacity = {**machine_share(len(nodes)), **(args.node_capacity or {})}
    extra = {"kubelet": ["--capacity", ",".join(f"{k}={v}" for k, v in capacity.items())]}
    return launcher.LocalCluster(
        args.data_dir,
        extra_args=extra,
        apiserver_port=port(args.apiserver_port, launcher.DEFAULT_APISERVER_PORT),
        scheduler=not args.no_scheduler,
        controller=not args.no_controller,
        kubelets=nodes,
        # containerd: the kubelets' --container-runtime-endpoint selects their CRI runtime.
        kubelet_runtime="process" if args.kubelet_runtime == "containerd" else args.kubelet_runtime,
        etcd_port=port(args.etcd_port, launcher.DEFAULT_ETCD_PORT),
        scheduler_port=port(args.scheduler_port, launcher.DEFAULT_SCHEDULER_PORT),
        controller_port=port(args.controller_port, launcher.DEFAULT_CONTROLLER_PORT),
        kubelet_port=port(args.kubelet_port, launcher.DEFAULT_KUBELET_PORT),
        start_timeout=args.start_timeout,
        proxies=not args.no_proxy,
        node_ips=not args.no_proxy,
        proxy_port=port(None, launcher.DEFAULT_PROXY_PORT),
        rest_port=port(args.rest_port, launcher.DEFAULT_REST_PORT),
        # Components must not outlive `up`, however it dies (SIGKILL, a closed terminal).
        die_with_parent=True,
        insecure=args.insecure,
        supervise=args.restart,
        pki_dir=args.pki_dir,
        ha=args.ha,
        etcd_socket=args.etcd_socket,
    )


def parse_capacity(text: str) -> dict[str, str]:
    """`cpu=2,memory=4Gi,pods=50`: resource names to quantities, each parsed strictly."""
    out: dict[str, str] = {}
    for item in text.split(","):
        name, sep, amount = item.strip().partition("=")
        if not sep or not name.strip() or not amount.strip():
            raise argparse.ArgumentTypeError(f"{item.strip()!r} is not RESOURCE=QUANTITY")
        try:
            parse_quantity(amount.strip())
        except QuantityError as exc:
            raise argparse.ArgumentTypeError(f"invalid quantity for {name.strip()}: {exc}") from exc
        out[name.strip()] = amount.strip()
    return out


def machine_memory_bytes() -> int | None:
    """MemTotal of /proc/meminfo (None where it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine_share(
    nodes: int, cpus: int | None = None, memory_bytes: int | None = None
) -> dict[str, str]:
    """An equal share of this machine's cores and memory for each of `nodes` nodes.

    cpu in millicores (whole cores where it divides evenly), memory in Ki, both rounded down
    so the nodes together never promise more than the machine has; at least 1m and 1Ki. A
    resource whose machine amount is unknown is left to the kubelet's own default.
    """
    cpus = os.cpu_count() if cpus is None else cpus
    memory_bytes = machine_memory_bytes() if memory_bytes is None else memory_bytes
    n = max(1, nodes)
    share: dict[str, str] = {}
    if cpus:
        millis = max(1, cpus * 1000 // n)
        share["cpu"] = str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
    if memory_bytes:
        share["memory"] = f"{max(1, memory_bytes // 1024 // n)}Ki"
    return share


def run(args: argparse.Namespace, ctx: Context) -> int:
    if args.etcd_socket and args.ha:
        ctx.eprint("error: --etcd-socket is for a single etcd; --ha's members are dialled over TCP")
        return 2
    cluster = build_cluster(args)
    runtimes: NodeRuntimes | None = None
    if args.kubelet_runtime == "containerd":
        missing = missing_prerequisites()
        if missing:
            for why in missing:
                ctx.eprint(f"error: {why}")
            ctx.eprint(f"to run pods in containerd: {install_hint()}")
            return 1
        nodes = [f"node-{i}" for i in range(1, args.kubelets + 1)]
        runtimes = NodeRuntimes(Path(cluster.work_dir) / "containerd", nodes)
        ctx.print(f"starting containerd for {', '.join(nodes)} ...")
        try:
            for name, flags in runtimes.start().items():
                cluster.extra_args.setdefault(name, []).extend(flags)
            dns_address = runtimes.dns_address()
            # The kubernetes Service's endpoint, reachable from the pods' network namespaces.
            cluster.advertise_address = runtimes.advertise_address()
            cluster.components["dns"] = launcher.Component(
                "dns",
                "kubelet.dns",
                free_port(launcher.HOST),
                ["--dns-address", dns_address],
            )
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            runtimes.stop()
            ctx.eprint(f"error: containerd: {exc}")
            return 1
        ctx.print(f"image {BUSYBOX_IMAGE} is on every node (kubectl run x --image={BUSYBOX_IMAGE})")
        if runtimes.registry is not None:
            ctx.print(
                f"registry {runtimes.registry.address} (docker-registry): the nodes pull "
                f"{runtimes.registry.address}/busybox:1 from it"
            )
        else:
            ctx.print("no local registry: apt-get install docker-registry to have one")
    return _run(cluster, ctx, runtimes)


def _run(cluster: launcher.LocalCluster, ctx: Context, runtimes: NodeRuntimes | None) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    # SIGTERM (docker stop, kill) means the same as Ctrl-C. During start, Ctrl-C still raises
    # KeyboardInterrupt, and LocalCluster.start stops what it started.
    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        ctx.print(f"starting tinykube in {cluster.work_dir} ...")
        if cluster.insecure:
            ctx.eprint(f"warning: {INSECURE_WARNING}")
        try:
            cluster.start()
        except launcher.ComponentError as exc:
            ctx.eprint(f"error: {exc}")
            return 1
        signal.signal(signal.SIGINT, on_signal)
        if runtimes is not None and "dns" in cluster.components:
            dns = cluster.components["dns"].args[-1]
            asyncio.run(_publish_dns(cluster, dns))
            ctx.print(f"cluster DNS {dns}: Service kube-system/kube-dns {KUBE_DNS_IP}")
        endpoints = cluster.addresses
        width = max(len(n) for n in [*endpoints, "REST API"]) + 2
        ctx.print("tinykube is up:")
        for name, address in endpoints.items():
            ctx.print(f"  {name.ljust(width)}{address}")
        for name, url in zip(cluster.apiserver_names, cluster.rest_urls, strict=True):
            if name in endpoints:
                what = "REST API" if name == "apiserver" else f"REST API {name.partition('-')[2]}"
                ctx.print(f"  {what.ljust(width)}{url}")
        for note in cluster.skipped:
            ctx.print(f"  ({note})")
        ctx.print(f"logs: {cluster.logs_dir}/<component>.log")
        for i, line in enumerate(try_commands(cluster, tool_command)):
            ctx.print(f"{'try:' if i == 0 else ''.ljust(4)}  {line}")
        (Path(cluster.work_dir) / "endpoints.json").write_text(json.dumps(endpoints, indent=2))
        ctx.print("Press Ctrl-C to stop.")
        watch_components(cluster, stop, ctx)
        ctx.print("stopping ...")
    finally:
        cluster.stop()
        if runtimes is not None:
            # The pods' containers, then containerd, its mounts, the bridges and cgroups.
            runtimes.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    ctx.print("stopped.")
    return 0


async def _publish_dns(cluster: launcher.LocalCluster, address: str) -> None:
    from tinykube.client import Client

    async with Client(cluster.api_address, credentials=cluster.credentials) as client:
        await publish_dns(client, address)


def tool_command(
    name: str,
    bin_dir: Path | None = None,
    cwd: Path | None = None,
    path: str | None = None,
) -> str:
    """How to type `name`, a tool installed beside this Python (the venv's bin), so it runs.

    The bare name where PATH finds this very file; else its path: relative where `bin_dir`
    lies under `cwd` (`make up` in a checkout: `.venv/bin/tinykube`), absolute otherwise. A
    tool not in `bin_dir` stays a bare name (the user installed it elsewhere, or must).
    """
    bin_dir = Path(sys.executable).parent if bin_dir is None else bin_dir
    cwd = Path.cwd() if cwd is None else cwd
    path = os.environ.get("PATH", os.defpath) if path is None else path
    ours = bin_dir / name
    if not (ours.is_file() and os.access(ours, os.X_OK)):
        return name
    found = shutil.which(name, path=path)
    if found is not None and os.path.samefile(found, ours):
        return name
    try:
        return str(ours.absolute().relative_to(cwd.absolute()))
    except ValueError:
        return str(ours.absolute())


def try_commands(
    cluster: launcher.LocalCluster, command: Callable[[str], str] = tool_command
) -> list[str]:
    """The commands `up` suggests, each runnable as printed from where `up` runs."""
    kubectl = command("kubectl")
    if cluster.insecure:
        server = "" if cluster.api_address == DEFAULT_SERVER else f"--server {cluster.api_address} "
        lines = [
            f"{command('tinykube')} --insecure {server}get nodes",
            f"{command('grpcurl')} -plaintext {cluster.api_address} list",
        ]
        if cluster.rest_address == f"127.0.0.1:{launcher.DEFAULT_REST_PORT}":
            # kubectl without a kubeconfig talks to localhost:8080.
            lines.append(f"{kubectl} get nodes")
    else:
        pki = cluster.pki
        admin = pki.paths("admin")
        lines = [
            f"{command('tinykube')} --kubeconfig {cluster.kubeconfig} get nodes",
            f"{command('grpcurl')} -cacert {pki.ca_cert_path} -cert {admin.cert} "
            f"-key {admin.key} {cluster.api_address} list",
        ]
        lines.append(f"{kubectl} --kubeconfig {cluster.kubeconfig} get nodes")
        return lines
    lines.append(f"{kubectl} --kubeconfig {cluster.kubeconfig} get nodes")
    return lines


def watch_components(cluster: launcher.LocalCluster, stop: threading.Event, ctx: Context) -> None:
    """Until `stop` is set, report what the cluster's supervisor saw: each component that
    exited on its own (a warning with its exit code, when it restarts and its log) and each
    restart."""
    reported = 0
    while not stop.wait(POLL_SECONDS):
        events = cluster.events[reported:]
        reported += len(events)
        for event in events:
            if isinstance(event, launcher.Exited):
                ctx.eprint(f"warning: {event.describe()}")
            else:
                ctx.eprint(event.describe())
