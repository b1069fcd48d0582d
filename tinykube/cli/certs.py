"""`tinykube certs --dir DIR`: the cluster CA, every certificate and kubeconfig, one bundle each.

What `kubeadm init phase certs all` and `kubeconfig all` do for a multi-host cluster (the
compose file's one-shot `certs` service runs it before anything else starts): the CA and every
certificate go to `DIR/pki` (reused across runs, re-issued when a name or address changes; the
CA key stays there), and each component gets a directory holding only what it needs, to be
mounted read-only where it runs:

- `etcd/`: ca.crt, server.crt/key, peer.crt/key; with `--etcd-members NAME=IP,...` (an etcd
  cluster, docker-compose.ha.yml) one such bundle per member, `NAME/`, holding that member's
  own certificates (its name and address, and the control plane's `--hosts`/`--ips`)
- `apiserver/`: ca.crt, apiserver.crt/key, etcd-client.crt/key, kubelet-client.crt/key, and
  admin.conf (its health check and `docker compose exec apiserver tinykube ...`)
- `scheduler/`, `controller-manager/`: ca.crt, serving.crt/key, and scheduler.conf /
  controller-manager.conf
- `dns/`: ca.crt, serving.crt/key and dns.conf (the cluster DNS, as system:kube-proxy)
- `<node>/`: ca.crt, kubelet.crt/key (its serving certificate), kubelet.conf, proxy.crt/key,
  proxy.conf
- `admin/`: ca.crt, admin.crt/key and kubeconfig, for the user (`--admin-server`: the address
  the user reaches the apiserver at, e.g. a published localhost port)

Keys are written mode 0600, the rest 0644; files are replaced atomically. Synchronous.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from tinykube.cli.common import CLIError, Context
from tinykube.kubeconfig import write_kubeconfig
from tinykube.pki import PKI, PKIError, cluster_specs


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "certs",
        help="write the cluster CA, certificates and kubeconfigs (one bundle per component)",
        description="Create (or reuse) the cluster's PKI and write each component's bundle.",
        global_flags=False,
    )
    parser.add_argument("--dir", required=True, help="where the PKI and the bundles go")
    parser.add_argument(
        "--nodes",
        default="",
        help="NAME=IP,...: each kubelet's node name and address (its serving certificate)",
    )
    parser.add_argument(
        "--hosts", default="", help="names the control plane is reached at (comma-separated)"
    )
    parser.add_argument(
        "--ips", default="", help="addresses the control plane is reached at (comma-separated)"
    )
    parser.add_argument(
        "--server", required=True, help="the REST API's URL for the components' kubeconfigs"
    )
    parser.add_argument(
        "--grpc-server", required=True, help="the gRPC API's host:port for the components"
    )
    parser.add_argument(
        "--admin-server",
        default="",
        help="the REST URL in the admin's kubeconfig (default: --server)",
    )
    parser.add_argument(
        "--etcd-members",
        default="",
        help="NAME=IP,...: the members of an etcd cluster, each with its own certificates",
    )
    parser.add_argument(
        "--admin-grpc-server",
        default="",
        help="the gRPC host:port in the admin's kubeconfig (default: --grpc-server)",
    )
    parser.set_defaults(func=run)


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _nodes(text: str, flag: str = "--nodes") -> dict[str, str]:
    nodes: dict[str, str] = {}
    for item in _split(text):
        name, sep, ip = item.partition("=")
        if not sep or not name or not ip:
            raise CLIError(f'{flag}: "{item}" is not NAME=IP')
        nodes[name] = ip
    return nodes


def _copy(src: Path, dst: Path) -> None:
    mode = 0o600 if src.suffix == ".key" else 0o644
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    os.chmod(tmp, mode)
    os.replace(tmp, dst)


def write_bundles(
    directory: Path,
    *,
    nodes: dict[str, str],
    hosts: list[str],
    ips: list[str],
    server: str,
    grpc_server: str,
    admin_server: str = "",
    admin_grpc_server: str = "",
    etcd_members: dict[str, str] | None = None,
) -> PKI:
    """Issue (or reuse) everything in `directory/pki` and write each component's bundle."""
    pki = PKI(directory / "pki")
    members = list((etcd_members or {}).items())
    pki.ensure_all(
        cluster_specs(
            list(nodes),
            hosts=hosts,
            ips=["127.0.0.1", *ips],
            node_ips=nodes,
            etcd_members=members,
        )
    )
    ca = pki.ca_cert_path.read_bytes()

    def bundle(name: str, files: dict[str, str]) -> Path:
        out = directory / name
        out.mkdir(parents=True, exist_ok=True)
        _copy(pki.ca_cert_path, out / "ca.crt")
        for target, cert in files.items():
            paths = pki.paths(cert)
            _copy(paths.cert, out / f"{target}.crt")
            _copy(paths.key, out / f"{target}.key")
        return out

    def conf(path: Path, cert: str, user: str, rest: str = "", grpc: str = "") -> None:
        paths = pki.paths(cert)
        write_kubeconfig(
            path,
            rest or server,
            user=user,
            ca=ca,
            cert=paths.cert.read_bytes(),
            key=paths.key.read_bytes(),
            grpc_server=grpc or grpc_server,
        )

    bundle("etcd", {"server": "etcd-server", "peer": "etcd-peer"})
    for name, _ in members:
        # A member named "etcd" replaces the single etcd's bundle with its own certificates.
        bundle(name, {"server": f"etcd-server-{name}", "peer": f"etcd-peer-{name}"})
    api = bundle(
        "apiserver",
        {
            "apiserver": "apiserver",
            "etcd-client": "apiserver-etcd-client",
            "kubelet-client": "apiserver-kubelet-client",
        },
    )
    # One service account key pair for every apiserver (--service-account-key-file sa.pub,
    # --service-account-signing-key-file sa.key).
    sa = pki.ensure_service_account_key()
    _copy(sa.cert, api / "sa.pub")
    _copy(sa.key, api / "sa.key")
    conf(api / "admin.conf", "admin", "kubernetes-admin")
    sched = bundle("scheduler", {"serving": "scheduler-serving"})
    conf(sched / "scheduler.conf", "scheduler", "system:kube-scheduler")
    cm = bundle("controller-manager", {"serving": "controller-manager-serving"})
    # kube-controller-manager's --service-account-private-key-file: token Secrets' signer.
    _copy(sa.key, cm / "sa.key")
    conf(cm / "controller-manager.conf", "controller-manager", "system:kube-controller-manager")
    # the cluster DNS reads Services and EndpointSlices as the proxies do (kube-proxy's
    # identity, as `tinykube up` runs it)
    dns = bundle("dns", {"serving": "dns-serving"})
    conf(dns / "dns.conf", "proxy", "system:kube-proxy")
    for node in nodes:
        out = bundle(node, {"kubelet": f"kubelet-{node}-serving", "proxy": f"proxy-{node}-serving"})
        conf(out / "kubelet.conf", f"kubelet-{node}", f"system:node:{node}")
        conf(out / "proxy.conf", "proxy", "system:kube-proxy")
    admin = bundle("admin", {"admin": "admin"})
    conf(admin / "kubeconfig", "admin", "kubernetes-admin", admin_server, admin_grpc_server)
    return pki


def run(args: argparse.Namespace, ctx: Context) -> int:
    directory = Path(args.dir)
    try:
        write_bundles(
            directory,
            nodes=_nodes(args.nodes),
            hosts=_split(args.hosts),
            ips=_split(args.ips),
            server=args.server,
            grpc_server=args.grpc_server,
            admin_server=args.admin_server,
            admin_grpc_server=args.admin_grpc_server,
            etcd_members=_nodes(args.etcd_members, "--etcd-members"),
        )
    except PKIError as exc:
        raise CLIError(str(exc)) from exc
    ctx.print(f"certificates and kubeconfigs written to {directory}")
    return 0
