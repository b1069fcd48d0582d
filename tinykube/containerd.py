"""A private containerd for a node, its CNI network config, and small OCI images.

`tinykube up --runtime containerd` and the CRI tests run one containerd per node with its own
root, state and socket under the node's data directory (no systemd here, and nothing shared with
another containerd or dockerd on the machine). Its config carries what this kind of machine needs
(checked on Debian's containerd 1.6.20): `restrict_oom_score_adj` (no CAP_SYS_RESOURCE: runc
otherwise fails on the sandbox's oom_score_adj of -998), `disable_apparmor`, the cgroupfs driver,
CNI plugins from Debian's containernetworking-plugins (/usr/lib/cni) and a sandbox ("pause")
image that is built locally, since nothing can be pulled from the internet.

`cni_config` is the conflist the kubelet writes from the node's pod CIDR (bridge + host-local +
portmap; containerd adds loopback itself). `oci_image` builds a tiny OCI image archive with the
standard library (busybox-static inside), which `ctr images import` loads.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CNI_BIN_DIR = "/usr/lib/cni"
BUSYBOX = "/bin/busybox"
PAUSE_IMAGE = "tinykube.local/pause:1"
# What to install when something is missing (Debian's package names).
APT_PACKAGES = ("containerd", "runc", "containernetworking-plugins", "busybox-static", "nftables")
NAMESPACE = "k8s.io"


def missing_prerequisites() -> list[str]:
    """Why this machine cannot run the containerd runtime; empty if it can."""
    why = []
    if os.geteuid() != 0:
        why.append("the containerd runtime needs root (network namespaces, cgroups, mounts)")
    for binary, package in (("containerd", "containerd"), ("runc", "runc"), ("ctr", "containerd")):
        if shutil.which(binary) is None:
            why.append(f"{binary} is not installed (apt-get install {package})")
    for plugin in ("bridge", "host-local", "portmap", "loopback"):
        if not os.access(f"{CNI_BIN_DIR}/{plugin}", os.X_OK):
            why.append(
                f"CNI plugin {CNI_BIN_DIR}/{plugin} is missing "
                "(apt-get install containernetworking-plugins)"
            )
    if not os.access(BUSYBOX, os.X_OK):
        why.append(f"{BUSYBOX} is missing (apt-get install busybox-static)")
    if shutil.which("nft") is None:
        why.append("nft is not installed (apt-get install nftables): the proxies' nftables mode")
    return why


def install_hint() -> str:
    return "apt-get update && apt-get install -y " + " ".join(APT_PACKAGES) + " (as root)"


def cni_config(pod_cidr: str, bridge: str, data_dir: Path) -> dict[str, object]:
    """The CNI network of a node: a bridge with the node's pod CIDR (host-local IPAM, its
    leases under `data_dir`) and portmap for hostPorts."""
    return {
        "cniVersion": "0.4.0",
        "name": "tinykube",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(data_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def write_cni_config(conf_dir: Path, pod_cidr: str, bridge: str, data_dir: Path) -> Path:
    conf_dir.mkdir(parents=True, exist_ok=True)
    path = conf_dir / "10-tinykube.conflist"
    text = json.dumps(cni_config(pod_cidr, bridge, data_dir), indent=2)
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


@dataclass
class ContainerdPaths:
    base: Path

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def socket_dir(self) -> Path:
        """The sockets' directory: the base directory, or where its path is too long for a unix
        socket (104 bytes with containerd's ".ttrpc" suffix), a short one under /tmp named by
        a digest of the base's path (removed at stop)."""
        if len(str(self.base / "containerd.sock.ttrpc")) < 100:
            return self.base
        digest = hashlib.sha256(str(self.base.resolve()).encode()).hexdigest()[:12]
        return Path(f"/tmp/tkctd-{digest}")

    @property
    def socket(self) -> Path:
        return self.socket_dir / "containerd.sock"

    @property
    def config(self) -> Path:
        return self.base / "config.toml"

    @property
    def cni_conf_dir(self) -> Path:
        return self.base / "cni" / "net.d"

    @property
    def cni_data_dir(self) -> Path:
        return self.base / "cni" / "networks"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"


def containerd_config(paths: ContainerdPaths, oci_runtime: str = "") -> str:
    """The config of a node's containerd. `oci_runtime`: the runc-compatible binary its runc
    shims run (the shim's BinaryName: crun, say); "" is runc."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    binary = f'\n  BinaryName = "{oci_runtime}"' if oci_runtime else ""
    return f"""version = 2
root = "{paths.root}"
state = "{paths.state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{paths.socket}"

[ttrpc]
  address = "{paths.socket}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{paths.base / "opt"}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false{binary}

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{paths.cni_conf_dir}"
"""


class Containerd:
    """One containerd process with a private config; stopped by its PID."""

    def __init__(self, base: Path, oci_runtime: str = "") -> None:
        self.paths = ContainerdPaths(base)
        self.oci_runtime = oci_runtime
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        p = self.paths
        for d in (p.root, p.state, p.cni_conf_dir, p.cni_data_dir, p.socket_dir):
            d.mkdir(parents=True, exist_ok=True)
        p.config.write_text(containerd_config(p, self.oci_runtime))
        log = open(p.base / "containerd.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(
            ["containerd", "--config", str(p.config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not p.socket.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"containerd exited; see {p.base / 'containerd.log'}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not listen on {p.socket}")
            time.sleep(0.1)

    def ctr(self, *args: str, input: bytes | None = None) -> str:
        out = subprocess.run(
            ["ctr", "--address", str(self.paths.socket), "-n", NAMESPACE, *args],
            input=input,
            capture_output=True,
            check=True,
        )
        return out.stdout.decode()

    def import_image(self, archive: Path) -> None:
        self.ctr("images", "import", str(archive))

    def ensure_pause_image(self) -> None:
        archive = self.paths.base / "pause.tar"
        archive.write_bytes(oci_image(PAUSE_IMAGE, ["/bin/sleep", "2147483647"]))
        self.import_image(archive)

    def remove_all_pods(self) -> int:
        """Stop and remove every pod sandbox (and so every container) this containerd runs:
        the kubelet leaves them running when it stops, and containerd's shims outlive it."""
        import grpc

        from tinykube.cri.v1 import cri_pb2 as cri
        from tinykube.cri.v1 import cri_pb2_grpc as cri_grpc

        with grpc.insecure_channel(f"unix:{self.paths.socket}") as channel:
            rt = cri_grpc.RuntimeServiceStub(channel)
            items = rt.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=60).items
            for sandbox in items:
                rt.StopPodSandbox(cri.StopPodSandboxRequest(pod_sandbox_id=sandbox.id), timeout=60)
                rt.RemovePodSandbox(
                    cri.RemovePodSandboxRequest(pod_sandbox_id=sandbox.id), timeout=60
                )
        return len(items)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop containerd by its PID (its shims and their containers are killed first by
        whoever removed the pods), then unmount what it left under its root and state."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        unmount_under(self.paths.base)
        if self.paths.socket_dir != self.paths.base:
            shutil.rmtree(self.paths.socket_dir, ignore_errors=True)


def unmount_under(base: Path) -> None:
    """Unmount every mount below `base`, deepest first (sandbox shm, rootfs overlays)."""
    prefix = str(base.resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in sorted((m for m in points if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _tar_bytes(
    files: dict[str, tuple[bytes, int]],
    symlinks: dict[str, str],
    dirs: dict[str, int] | None = None,
) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        modes = {str(Path(n).parent): 0o755 for n in (*files, *symlinks)}
        modes.update(dirs or {})
        for d in sorted(m for m in modes if m != "."):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, modes[d]
            tar.addfile(info)
        for name, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        for name, target in sorted(symlinks.items()):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def oci_blobs(
    entrypoint: list[str],
    cmd: list[str] | None = None,
    *,
    context: Path | None = None,
    workdir: str = "/",
) -> tuple[bytes, dict[str, bytes]]:
    """An OCI image's manifest and its blobs by digest: the config and a layer with
    busybox-static at /bin/busybox and its applets as symlinks (sh, sleep, ip, cat, httpd, ...),
    /etc/passwd, /tmp, /root and /var; with `context`, a second layer holding that directory's
    files at `workdir` (as a Dockerfile's `COPY . <workdir>`)."""
    busybox = Path(BUSYBOX).read_bytes()
    applets = subprocess.run(
        [BUSYBOX, "--list"], capture_output=True, check=True, text=True
    ).stdout.split()
    tars = [
        _tar_bytes(
            {
                "bin/busybox": (busybox, 0o755),
                "etc/passwd": (b"root:x:0:0:root:/:/bin/sh\n", 0o644),
            },
            {f"bin/{a}": "busybox" for a in applets if a != "busybox"},
            {"tmp": 0o1777, "root": 0o700, "var": 0o755},
        )
    ]
    if context is not None:
        tars.append(_context_tar(context, workdir))
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    layers = []
    for layer_tar in tars:
        layer = gzip.compress(layer_tar, mtime=0)
        layers.append(
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": blob(layer),
                "size": len(layer),
            }
        )
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Entrypoint": entrypoint,
                "Cmd": cmd or [],
                "Env": ["PATH=/bin"],
                "WorkingDir": workdir,
            },
            "rootfs": {
                "type": "layers",
                "diff_ids": ["sha256:" + hashlib.sha256(t).hexdigest() for t in tars],
            },
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": blob(config),
                "size": len(config),
            },
            "layers": layers,
        }
    ).encode()
    return manifest, blobs


def _context_tar(context: Path, workdir: str) -> bytes:
    """`context`'s regular files (modes kept; symlinks and special files left out) under
    `workdir` in a tar, with fixed times and owners so the same files give the same digest."""
    if not context.is_dir():
        raise FileNotFoundError(f"{context}: not a directory")
    prefix = workdir.strip("/")
    files: dict[str, tuple[bytes, int]] = {}
    dirs: dict[str, int] = {}
    for path in sorted(context.rglob("*")):
        name = "/".join(p for p in (prefix, path.relative_to(context).as_posix()) if p)
        if path.is_symlink():
            continue
        if path.is_dir():
            dirs[name] = path.stat().st_mode & 0o7777
        elif path.is_file():
            files[name] = (path.read_bytes(), path.stat().st_mode & 0o7777)
    if prefix:
        dirs.setdefault(prefix, 0o755)
    return _tar_bytes(files, {}, dirs)


def oci_image(
    reference: str,
    entrypoint: list[str],
    cmd: list[str] | None = None,
    *,
    image: tuple[bytes, dict[str, bytes]] | None = None,
) -> bytes:
    """An OCI image archive (oci-layout, index.json, blobs) named `reference`, which `ctr
    images import` loads: `image` (manifest, blobs), else the image of `oci_blobs`."""
    manifest, blobs = image or oci_blobs(entrypoint, cmd)
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    blobs = {**blobs, digest: manifest}
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": len(manifest),
                "annotations": {
                    "io.containerd.image.name": reference,
                    "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    files = {
        "oci-layout": (json.dumps({"imageLayoutVersion": "1.0.0"}).encode(), 0o644),
        "index.json": (json.dumps(index).encode(), 0o644),
    }
    for digest, data in blobs.items():
        files[f"blobs/sha256/{digest.split(':', 1)[1]}"] = (data, 0o644)
    return _tar_bytes(files, {})


FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
# The pods' addresses: each Node gets a /24 of it from the controller manager's node IPAM.
CLUSTER_CIDR = "10.244.0.0/16"
# Services' cluster IPs under the containerd runtime (kube's default range): outside loopback,
# so pods reach them from their own network namespaces through the proxies' nftables DNAT.
SERVICE_CIDR = "10.96.0.0/12"
# kube's well-known cluster DNS address: the tenth of the service range.
KUBE_DNS_IP = "10.96.0.10"
# The cluster DNS's own address, on the loopback interface while `up --runtime containerd`
# runs: next to the service range and the load balancer pool, outside both (NodeLocal
# DNSCache's link-local 169.254.20.10 cannot be an EndpointSlice address).
DNS_LOCAL_IP = "10.112.255.10"
# The apiservers' --advertise-address under `up --runtime containerd`, on the loopback
# interface as DNS_LOCAL_IP is: the `kubernetes` Service's endpoint, which pods reach through
# its cluster IP (10.96.0.1, DNATed by the proxies); 127.0.0.1 is not routable from a pod's
# network namespace.
APISERVER_LOCAL_IP = "10.112.255.1"
# LoadBalancer Services' addresses (the controller manager's service-lb): outside loopback and
# next to the service range, DNATed by the proxies like cluster IPs, from the host and pods.
LB_POOL = "10.112.0.0/24"
# Each node proxy's nftables table (several nodes share this machine's kernel).
PROXY_TABLE_PREFIX = "tinykube-proxy-"
# The walkthrough's image, built and imported into every node's containerd by `tinykube up
# --runtime containerd`: busybox, running a shell loop unless given a command.
BUSYBOX_IMAGE = "tinykube.local/busybox:1"
BUSYBOX_ENTRYPOINT = ["/bin/sh", "-c", "while true; do sleep 1; done"]
# Where `up --runtime containerd` serves its registry (a free port if that one is taken).
REGISTRY_PORT = 5000


def _free_port(preferred: int) -> int:
    import socket

    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise OSError("no free port")


class NodeRuntimes:
    """One containerd per node for `tinykube up --runtime containerd`, with the kubelet flags
    that use it, and the cleanup that leaves the machine as found: pods removed, containerd
    stopped by PID and its mounts unmounted, the bridges deleted, ip_forward restored, the
    kubelets' cgroups removed."""

    def __init__(
        self,
        base: Path,
        nodes: list[str],
        cluster_cidr: str = CLUSTER_CIDR,
        *,
        oci_runtime: str = "",
    ) -> None:
        self.base = base
        self.nodes = nodes
        self.cluster_cidr = cluster_cidr
        # The OCI runtime binary the shims run instead of runc (containerd_config).
        self.oci_runtime = oci_runtime
        self.runtimes: dict[str, Containerd] = {}
        # A registry on this machine, when Debian's docker-registry is installed: images pushed
        # there are pulled by the nodes as from any registry.
        self.registry: Registry | None = None
        self._forward = ""
        # Set once start found the bridges free: stop removes only what is ours.
        self._owns_network = False
        self._chains: set[tuple[str, str]] = set()
        self._tables: set[str] = set()
        self._all_tables: set[tuple[str, str]] = set()
        # Whether dns_address added DNS_LOCAL_IP to the loopback interface (stop removes it).
        self._added_dns_ip = False
        # Whether advertise_address added APISERVER_LOCAL_IP there (stop removes it).
        self._added_api_ip = False

    def bridge(self, i: int) -> str:
        return f"tkcni{i}"

    def cgroup_root(self, node: str) -> str:
        return f"/tinykube/{node}"

    def start(self) -> dict[str, list[str]]:
        """Start every node's containerd; the extra flags per component: each kubelet's, and
        the controller manager's node IPAM (the Nodes' pod CIDRs, which the kubelets write
        their CNI networks from)."""
        taken = [
            self.bridge(i)
            for i in range(1, len(self.nodes) + 1)
            if Path(f"/sys/class/net/{self.bridge(i)}").exists()
        ]
        if taken:
            raise RuntimeError(
                f"network interface {', '.join(taken)} already exists: another cluster with the "
                "containerd runtime runs on this machine (one at a time: they share 10.244.0.0/16)"
            )
        self._forward = FORWARD.read_text().strip() if FORWARD.exists() else ""
        self._chains = iptables_chains() if shutil.which("iptables-save") else set()
        self._owns_network = True
        self._tables = nft_tables()
        self._all_tables = nft_all_tables()
        args: dict[str, list[str]] = {
            "controller": [
                "--allocate-node-cidrs",
                "--cluster-cidr",
                self.cluster_cidr,
                "--service-lb-pool",
                LB_POOL,
            ],
            "apiserver": ["--service-cluster-ip-range", SERVICE_CIDR],
        }
        if shutil.which("docker-registry") is not None:
            self.registry = Registry(self.base / "registry", _free_port(REGISTRY_PORT))
            self.registry.start()
            push_image(self.registry.address, "busybox", "1", BUSYBOX_ENTRYPOINT)
        for i, node in enumerate(self.nodes, start=1):
            ctd = Containerd(self.base / node, self.oci_runtime)
            self.runtimes[node] = ctd
            ctd.start()
            ctd.ensure_pause_image()
            archive = ctd.paths.base / "busybox.tar"
            archive.write_bytes(oci_image(BUSYBOX_IMAGE, BUSYBOX_ENTRYPOINT))
            ctd.import_image(archive)
            args[f"kubelet-{node}"] = [
                "--container-runtime-endpoint", ctd.paths.endpoint,
                "--cni-conf-dir", str(ctd.paths.cni_conf_dir),
                "--cni-bridge", self.bridge(i),
                "--cgroup-root", self.cgroup_root(node),
            ]  # fmt: skip
            # kube-proxy's nftables mode, masquerading all cluster-IP traffic (kube's
            # --masquerade-all): replies between pods on one bridge then come back through the
            # host's conntrack without br_netfilter, which this machine's sysctls may lack.
            args[f"kubelet-{node}"] += ["--cluster-dns", KUBE_DNS_IP]
            args[f"proxy-{node}"] = [
                "--proxy-mode", "nftables", "--nft-table", f"{PROXY_TABLE_PREFIX}{node}",
            ]  # fmt: skip
        return args

    def dns_address(self) -> str:
        """host:port the cluster DNS listens on: DNS_LOCAL_IP, added to the loopback interface
        (removed at stop) unless the machine has it already, port 53 when free. Local to this
        machine and nothing else: pods reach it through kube-dns's cluster IP, DNATed by the
        proxies, and no other host can query (and forward through) it."""
        if not _has_address(DNS_LOCAL_IP):
            subprocess.run(
                ["ip", "addr", "add", f"{DNS_LOCAL_IP}/32", "dev", "lo"],
                capture_output=True,
                check=True,
            )
            self._added_dns_ip = True
        import socket

        for port in (53, 0):
            with (
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
                socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp,
            ):
                try:
                    udp.bind((DNS_LOCAL_IP, port))
                    tcp.bind((DNS_LOCAL_IP, udp.getsockname()[1]))
                except OSError:
                    continue
                return f"{DNS_LOCAL_IP}:{udp.getsockname()[1]}"
        raise RuntimeError(f"cluster DNS: no free port on {DNS_LOCAL_IP}")

    def advertise_address(self) -> str:
        """The apiservers' --advertise-address: APISERVER_LOCAL_IP, added to the loopback
        interface (removed at stop) unless the machine has it already. Only this machine
        reaches it; its pods through the kubernetes Service's cluster IP."""
        if not _has_address(APISERVER_LOCAL_IP):
            subprocess.run(
                ["ip", "addr", "add", f"{APISERVER_LOCAL_IP}/32", "dev", "lo"],
                capture_output=True,
                check=True,
            )
            self._added_api_ip = True
        return APISERVER_LOCAL_IP

    def stop(self) -> None:
        if self.registry is not None:
            self.registry.stop()
        for ctd in self.runtimes.values():
            # A dead containerd: its mounts and bridges are still undone below.
            with contextlib.suppress(Exception):
                ctd.remove_all_pods()
            ctd.stop()
        if not self._owns_network:
            return
        for i in range(1, len(self.nodes) + 1):
            subprocess.run(["ip", "link", "del", self.bridge(i)], capture_output=True, check=False)
        for node in self.nodes:
            remove_cgroups(self.cgroup_root(node))
        remove_cgroups("/tinykube", leaf_only=True)
        if shutil.which("iptables-save"):
            # CNI's chains (portmap's CNI-HOSTPORT-*, the bridge's CNI-*) made since start.
            remove_chains({c for c in iptables_chains() - self._chains if c[1].startswith("CNI-")})
        remove_new_empty_iptables_tables(self._all_tables)
        if self._forward and FORWARD.read_text().strip() != self._forward:
            FORWARD.write_text(self._forward)
        if self._added_dns_ip:
            subprocess.run(
                ["ip", "addr", "del", f"{DNS_LOCAL_IP}/32", "dev", "lo"],
                capture_output=True,
                check=False,
            )
            self._added_dns_ip = False
        if self._added_api_ip:
            subprocess.run(
                ["ip", "addr", "del", f"{APISERVER_LOCAL_IP}/32", "dev", "lo"],
                capture_output=True,
                check=False,
            )
            self._added_api_ip = False
        # A proxy that died without deleting its table (SIGKILL) leaves it: remove ours.
        for table in nft_tables() - self._tables:
            if table.startswith(PROXY_TABLE_PREFIX):
                subprocess.run(
                    ["nft", "delete", "table", "ip", table], capture_output=True, check=False
                )


async def publish_dns(client: Any, address: str) -> None:
    """The kube-dns Service in kube-system at KUBE_DNS_IP (ports dns/UDP and dns-tcp/TCP 53)
    and, as it has no selector, its EndpointSlice naming the DNS process's address."""
    from google.protobuf import json_format

    from tinykube.v1 import endpointslice_pb2, service_pb2

    host, port = address.rsplit(":", 1)
    ports = [("dns", "UDP"), ("dns-tcp", "TCP")]
    svc = json_format.ParseDict(
        {
            "metadata": {
                "name": "kube-dns",
                "namespace": "kube-system",
                "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
            },
            "spec": {
                "clusterIP": KUBE_DNS_IP,
                "ports": [
                    {"name": n, "protocol": p, "port": 53, "targetPort": int(port)}
                    for n, p in ports
                ],
            },
        },
        service_pb2.Service(),
    )
    eps = json_format.ParseDict(
        {
            "metadata": {
                "name": "kube-dns-host",
                "namespace": "kube-system",
                "labels": {
                    "kubernetes.io/service-name": "kube-dns",
                    "endpointslice.kubernetes.io/managed-by": "tinykube-up",
                },
            },
            "addressType": "IPv4",
            "ports": [{"name": n, "protocol": p, "port": int(port)} for n, p in ports],
            "endpoints": [{"addresses": [host], "conditions": {"ready": True}}],
        },
        endpointslice_pb2.EndpointSlice(),
    )
    await client.services.create(svc)
    await client.endpoint_slices.create(eps)


def _has_address(ip: str) -> bool:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=False
    ).stdout
    return any(f" {ip}/" in line for line in out.splitlines())


def nft_all_tables() -> set[tuple[str, str]]:
    """(family, name) of every nftables table of the kernel (empty without nft)."""
    if shutil.which("nft") is None:
        return set()
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    return {
        (parts[1], parts[2])
        for parts in (ln.split() for ln in out.splitlines())
        if len(parts) == 3 and parts[0] == "table"
    }


# The tables iptables-nft makes (CNI portmap's iptables calls create them; deleting its chains
# leaves them behind, holding only empty base chains).
IPTABLES_NFT_TABLES = ("nat", "filter", "mangle", "raw")


def remove_new_empty_iptables_tables(before: set[tuple[str, str]]) -> list[str]:
    """Delete the iptables-nft tables (ip/ip6 nat, filter, ...) made since `before` that hold no
    rule, set or map any more; the deleted ones as `family name`."""
    removed: list[str] = []
    for family, name in sorted(nft_all_tables() - before):
        if family not in ("ip", "ip6") or name not in IPTABLES_NFT_TABLES:
            continue
        listing = subprocess.run(
            ["nft", "-j", "list", "table", family, name], capture_output=True, text=True
        )
        try:
            items = json.loads(listing.stdout)["nftables"]
        except (ValueError, KeyError, TypeError):
            continue
        if any(key in item for item in items for key in ("rule", "set", "map", "element")):
            continue  # someone else's rules: not ours to remove
        done = subprocess.run(["nft", "delete", "table", family, name], capture_output=True)
        if done.returncode == 0:
            removed.append(f"{family} {name}")
    return removed


def nft_tables() -> set[str]:
    """The names of the kernel's `ip` family nftables tables (empty without nft)."""
    if shutil.which("nft") is None:
        return set()
    out = subprocess.run(["nft", "list", "tables", "ip"], capture_output=True, text=True)
    return {ln.split()[-1] for ln in out.stdout.splitlines() if ln.startswith("table ip ")}


def remove_cgroups(root: str, *, leaf_only: bool = False) -> None:
    """rmdir `root` (and, unless leaf_only, the cgroups below it, deepest first) in every v1
    controller; busy or missing ones are left."""
    base = Path("/sys/fs/cgroup")
    if not base.is_dir():
        return
    for controller in base.iterdir():
        top = controller / root.lstrip("/")
        if not top.is_dir():
            continue
        below = [] if leaf_only else [p for p in top.rglob("*") if p.is_dir()]
        for d in [*sorted(below, key=lambda p: -len(p.parts)), top]:
            with contextlib.suppress(OSError):
                d.rmdir()


MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


def push_image(
    registry: str,
    repository: str,
    tag: str,
    entrypoint: list[str],
    *,
    image: tuple[bytes, dict[str, bytes]] | None = None,
    credentials: tuple[str, str] | None = None,
) -> str:
    """Push the image of `oci_blobs` to a registry over the distribution API (plain HTTP, a
    registry on this machine): each blob by a monolithic upload, then the manifest under `tag`.
    Its manifest digest."""
    import urllib.error
    import urllib.parse
    import urllib.request

    manifest, blobs = image or oci_blobs(entrypoint)
    base = f"http://{registry}/v2/{repository}"
    auth: dict[str, str] = {}
    if credentials is not None:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        auth["Authorization"] = f"Basic {token}"
    for digest, data in blobs.items():
        head = urllib.request.Request(f"{base}/blobs/{digest}", method="HEAD", headers=auth)
        try:
            with urllib.request.urlopen(head, timeout=30):
                continue  # already there
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        start = urllib.request.Request(
            f"{base}/blobs/uploads/", method="POST", data=b"", headers=auth
        )
        with urllib.request.urlopen(start, timeout=30) as resp:
            location = urllib.parse.urljoin(f"http://{registry}/", resp.headers["Location"])
        sep = "&" if "?" in location else "?"
        put = urllib.request.Request(
            f"{location}{sep}digest={urllib.parse.quote(digest)}",
            method="PUT",
            data=data,
            headers={"Content-Type": "application/octet-stream", **auth},
        )
        with urllib.request.urlopen(put, timeout=60):
            pass
    put = urllib.request.Request(
        f"{base}/manifests/{tag}",
        method="PUT",
        data=manifest,
        headers={"Content-Type": MANIFEST_TYPE, **auth},
    )
    with urllib.request.urlopen(put, timeout=30):
        pass
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def bcrypt_hash(password: str) -> str:
    """A bcrypt ($2b$) hash for an htpasswd file: libc's crypt (libxcrypt on Debian), else
    apache2-utils' htpasswd."""
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt

        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))
        if hashed and hashed.startswith("$2"):
            return hashed
    except ImportError:
        pass
    if shutil.which("htpasswd"):
        out = subprocess.run(
            ["htpasswd", "-nbB", "u", password], capture_output=True, text=True, check=True
        ).stdout
        return out.strip().split(":", 1)[1]
    raise RuntimeError("no bcrypt: libc crypt lacks it and htpasswd (apache2-utils) is missing")


class Registry:
    """The CNCF distribution registry (Debian's docker-registry) on 127.0.0.1, its storage under
    `base`; stopped by its PID."""

    def __init__(self, base: Path, port: int, users: dict[str, str] | None = None) -> None:
        self.base = base
        self.port = port
        # user -> password: the registry asks for them (htpasswd basic auth, bcrypt entries).
        self.users = users or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        import urllib.error
        import urllib.request

        self.base.mkdir(parents=True, exist_ok=True)
        config = self.base / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.base / 'data'}\n"
            "  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.address}\n"
        )
        if self.users:
            htpasswd = self.base / "htpasswd"
            htpasswd.write_text("".join(f"{u}:{bcrypt_hash(p)}\n" for u, p in self.users.items()))
            with config.open("a") as f:
                f.write(f"auth:\n  htpasswd:\n    realm: tinykube\n    path: {htpasswd}\n")
        log = open(self.base / "registry.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(
            ["docker-registry", "serve", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited; see {self.base / 'registry.log'}")
            try:
                with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2):
                    return
            except urllib.error.HTTPError as exc:
                if exc.code == 401:
                    return  # up, and asking for credentials
                raise
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"docker-registry did not answer on {self.address}"
                    ) from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def iptables_chains() -> set[tuple[str, str]]:
    """(table, chain) of the nat and filter tables' chains."""
    found = set()
    for table in ("nat", "filter"):
        out = subprocess.run(
            ["iptables-save", "-t", table], capture_output=True, text=True, check=False
        ).stdout
        found |= {(table, line[1:].split()[0]) for line in out.splitlines() if line[:1] == ":"}
    return found


def remove_chains(chains: set[tuple[str, str]]) -> None:
    """Delete the rules that jump to `chains` (CNI portmap's, made after a snapshot), then
    the chains."""
    for table in {t for t, _ in chains}:
        names = {c for t, c in chains if t == table}
        out = subprocess.run(
            ["iptables-save", "-t", table], capture_output=True, text=True, check=False
        ).stdout
        for line in out.splitlines():
            parts = shlex.split(line)  # comments are quoted and hold spaces
            jumps = any(f"-j {n}" in line for n in names)
            if line.startswith("-A ") and parts[1] not in names and jumps:
                _iptables(table, "-D", *parts[1:])
        for flag in ("-F", "-X"):
            for name in names:
                _iptables(table, flag, name)


def _iptables(table: str, *args: str) -> None:
    subprocess.run(["iptables", "-t", table, *args], capture_output=True, check=False)
