"""The node container of docker-compose.containerd.yml: containerd, then the kubelet over it.

What kind's node image does with systemd, in one process tree (run with `init: true`):

1. cgroups: in a container that is not `--privileged`, Docker mounts each cgroup v1 hierarchy
   read-only (the container's own subtree); they are remounted read-write (a bind remount: the
   mount's flag, not the superblock's), so runc can make the pods' cgroups under the node's.
   Privileged containers and cgroup v2 need nothing.
2. containerd with the config `tinykube up --runtime containerd` uses
   (tinykube/containerd.py: restrict_oom_score_adj, disable_apparmor, cgroupfs, CNI from
   /usr/lib/cni, the locally built pause image), its root on the node's volume (not the
   container's overlay root: overlayfs cannot have its upper directory on overlayfs), plus the
   compose registry as a plain-HTTP mirror (`--registry host:port`).
3. the pause and `tinykube.local/busybox:1` images imported with ctr.
4. the pod routes (kindnet's job): a child process that lists the Nodes every 10 s (with the
   node's kube-proxy credentials, `--routes-kubeconfig`: the node authorizer lets a kubelet read
   its own Node only) and
   routes each other node's spec.podCIDR through its InternalIP (`ip route replace`), removing
   routes of nodes that left. All node containers share one Docker network, so the next hop is
   on the link.
5. masquerading (kindnet's too), with `--cluster-cidr`: the nftables table `ip tinykube-ipmasq`
   masquerades traffic from the pods to anything outside the cluster CIDR (the compose
   services: the cluster DNS, the apiserver, the registry), which has no route back to pod IPs;
   pod to pod stays unNATed. And `net.bridge.bridge-nf-call-iptables=1` (per network namespace
   since Linux 5.3; kubeadm's preflight wants it): a reply from a pod to a pod on the same
   bridge that reached it through a Service's cluster IP is switched, not routed, and only
   br_netfilter hands it to conntrack to undo the proxy's DNAT.
6. exec the kubelet (the arguments after `--`), so Docker's stop signal reaches it.

`python node.py routes --node-name N` runs step 4 alone (what step 4 starts).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tinykube.containerd import (
    BUSYBOX_ENTRYPOINT,
    BUSYBOX_IMAGE,
    Containerd,
    containerd_config,
    oci_image,
)

ROUTE_PROTO = "99"  # marks the routes this process owns (ip route ... proto 99)
MASQ_TABLE = "tinykube-ipmasq"
BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def writable_cgroups() -> None:
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    for line in mounts:
        fields = line.split()
        point, options = fields[4], fields[5]
        sep = fields.index("-")
        if fields[sep + 1] == "cgroup" and "ro" in options.split(","):
            subprocess.run(["mount", "-o", "remount,bind,rw", point], check=True)
            print(f"node: {point} remounted read-write", flush=True)


def start_containerd(base: Path, registries: list[str]) -> Containerd:
    ctd = Containerd(base)
    p = ctd.paths
    for d in (p.root, p.state, p.cni_conf_dir, p.cni_data_dir, p.socket_dir):
        d.mkdir(parents=True, exist_ok=True)
    config = containerd_config(p)
    for registry in registries:
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config += f'\n[{cri}.registry.mirrors."{registry}"]\n  endpoint = ["http://{registry}"]\n'
    p.config.write_text(config)
    p.socket.unlink(missing_ok=True)
    with open(p.base / "containerd.log", "ab") as log:
        ctd.proc = subprocess.Popen(
            ["containerd", "--config", str(p.config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while not p.socket.exists():
        if ctd.proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"node: containerd did not start; see {p.base / 'containerd.log'}")
        time.sleep(0.1)
    ctd.ensure_pause_image()
    archive = p.base / "busybox.tar"
    archive.write_bytes(oci_image(BUSYBOX_IMAGE, BUSYBOX_ENTRYPOINT))
    ctd.import_image(archive)
    print(f"node: containerd on {p.endpoint}, registries {registries}", flush=True)
    return ctd


def masquerade(cluster_cidr: str) -> None:
    """kindnet's masquerading: pod traffic leaving the cluster CIDR gets the node's address.
    The table is written whole each start (the node's network namespace may be reused)."""
    table = MASQ_TABLE
    script = "\n".join(
        [
            f"add table ip {table}",
            f"delete table ip {table}",
            f"add table ip {table}",
            f"add chain ip {table} postrouting "
            "{ type nat hook postrouting priority srcnat; policy accept; }",
            f"add rule ip {table} postrouting "
            f"ip saddr {cluster_cidr} ip daddr != {cluster_cidr} masquerade",
            "",
        ]
    )
    subprocess.run(["nft", "-f", "-"], input=script, text=True, check=True)
    print(f"node: pod traffic from {cluster_cidr} leaving it is masqueraded", flush=True)


def bridge_netfilter() -> None:
    """net.bridge.bridge-nf-call-iptables=1 in this network namespace, or a warning where the
    kernel has no br_netfilter (then a Service answers a pod only from other nodes' pods)."""
    if not BRIDGE_NF.exists():
        print(
            "node: warning: no br_netfilter (no /proc/sys/net/bridge): a pod reaching a Service "
            "gets no answer from an endpoint on its own node (modprobe br_netfilter on the host)",
            flush=True,
        )
        return
    if BRIDGE_NF.read_text().strip() != "1":
        BRIDGE_NF.write_text("1\n")
        print("node: net.bridge.bridge-nf-call-iptables set to 1", flush=True)


async def node_routes(client: Any, node_name: str) -> dict[str, str]:
    """podCIDR -> InternalIP of every other node that has both."""
    routes = {}
    for node in (await client.nodes.list()).items:
        ips = [a.address for a in node.status.addresses if a.type == "InternalIP"]
        if node.metadata.name != node_name and node.spec.podCIDR and ips:
            routes[node.spec.podCIDR] = ips[0]
    return routes


def apply_routes(want: dict[str, str]) -> None:
    """Make this node's routes (proto 99) the pod CIDR -> next hop map `want`."""
    shown = subprocess.run(
        ["ip", "-4", "route", "show", "proto", ROUTE_PROTO],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    have = {ln.split()[0]: ln.split()[2] for ln in shown.splitlines() if " via " in ln}
    for cidr, via in want.items():
        if have.get(cidr) != via:
            replace = ["ip", "route", "replace", cidr, "via", via, "proto", ROUTE_PROTO]
            subprocess.run(replace, check=True)
            print(f"routes: {cidr} via {via}", flush=True)
    for cidr in set(have) - set(want):
        subprocess.run(["ip", "route", "del", cidr, "proto", ROUTE_PROTO], check=False)
        print(f"routes: {cidr} removed", flush=True)


async def sync_routes(node_name: str, interval: float) -> None:
    """kindnet's route loop: list the Nodes every `interval` seconds (one client, the kubelet's
    credentials from $KUBECONFIG) and make this node's routes to the others' pod CIDRs match."""
    from tinykube.client import Client

    async with Client.from_kubeconfig() as client:
        while True:
            try:
                await asyncio.to_thread(apply_routes, await node_routes(client, node_name))
            except Exception as exc:  # the apiserver away, a route refused: next round
                print(f"routes: {exc!r}", flush=True)
            await asyncio.sleep(interval)


def _cidr(text: str) -> str:
    try:
        return str(ipaddress.IPv4Network(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an IPv4 CIDR: {exc}") from exc


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["routes"]:
        p = argparse.ArgumentParser(prog="node.py routes")
        p.add_argument("--node-name", required=True)
        p.add_argument("--interval", type=float, default=10.0)
        a = p.parse_args(argv[1:])
        asyncio.run(sync_routes(a.node_name, a.interval))
        return
    if "--" not in argv:
        sys.exit(
            "usage: node.py --node-name N [--registry HOST:PORT]... [--cluster-cidr CIDR] "
            "-- KUBELET ARGV"
        )
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="node.py")
    p.add_argument("--node-name", required=True, help="the Node whose routes are skipped")
    p.add_argument("--containerd-dir", default="/var/lib/node/containerd")
    p.add_argument("--registry", action="append", default=[], help="a plain-HTTP registry")
    p.add_argument(
        "--routes-kubeconfig",
        default="",
        help="the pod routes' credentials (default $KUBECONFIG): one that may list Nodes, as "
        "kube-proxy's (a kubelet may read its own Node only)",
    )
    p.add_argument(
        "--cluster-cidr",
        default="",
        type=_cidr,
        help="the pods' network: traffic from it to elsewhere is masqueraded (kindnet's)",
    )
    a = p.parse_args(argv[:cut])
    kubelet = argv[cut + 1 :]
    writable_cgroups()
    bridge_netfilter()
    if a.cluster_cidr:
        masquerade(a.cluster_cidr)
    start_containerd(Path(a.containerd_dir), a.registry)
    routes = [sys.executable, __file__, "routes", "--node-name", a.node_name]
    env = {**os.environ, "KUBECONFIG": a.routes_kubeconfig} if a.routes_kubeconfig else None
    subprocess.Popen(routes, env=env)
    os.execvp(kubelet[0], kubelet)


if __name__ == "__main__":
    main()
