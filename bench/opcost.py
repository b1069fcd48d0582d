"""Instructions per API request, counted by callgrind: a cost a busy machine does not move.

    python bench/opcost.py --count 200                          # this checkout
    python bench/opcost.py --tree /tmp/old --tree . --count 200   # against another commit
    python bench/opcost.py --insecure --count 200               # plaintext, nobody checked

CPU seconds per request move by 10-30 % with the machine's load (a shared 2-core machine is
rarely quiet for long), so two commits compared by time need a quiet hour. The number of
instructions the apiserver executes per request hardly moves: this script runs one apiserver
(from `--tree` through PYTHONPATH, so an older commit's `git archive` runs with this venv)
under `valgrind --tool=callgrind` beside an etcd, and a driver process (this file with
`--drive`, using the tree's own client) sends one kind of request at a time, one after another
(no concurrency: no batching, so the count is the same every run).

By default the apiserver runs as `tinykube up` runs it: TLS on its gRPC port and on its etcd
link (certificates from tinykube.pki's `cluster_specs`, issued into the run's temporary
directory), every request authenticated by its client certificate and authorized by
Node,RBAC, with NodeRestriction admission. Each phase's requests come from the identity that
sends them in a cluster:

- `create`: Pod Create, the harness's pod (requests, a scheduler nobody serves), as
  `system:kube-controller-manager` (the ReplicaSet controller's user; RBAC decides);
- `bind`: Pod Bind to a node, one pod per call, as `system:kube-scheduler` (RBAC);
- `status`: Pod UpdateStatus to Running, as the node's kubelet reports a started pod:
  `system:node:node-0` in `system:nodes` (the Node authorizer and NodeRestriction);
- `lease`: Lease Update in kube-node-lease (renewTime), as each of 50 kubelets' heartbeat:
  `system:node:node-<i>` renews its own Lease over its own connection.
- `create-stream`, `status-stream`, `lease-stream`: the same requests as messages of one
  Pods/CreateStream, Pods/UpdateStatusStream and Leases/UpdateStream (`Client(pipeline=True)`),
  one at a time too (new pods, bound between the phases; skipped for a tree without them).

`--insecure` runs it plaintext with nothing checked (every request anonymous), for comparison;
the request stream is the same.

Before each phase the apiserver is let settle (under 15 % of a CPU for 3 s: under callgrind it
reconciles the bootstrap RBAC policy for minutes after it reports healthy), and each
identity's first requests are made (and retried until they succeed) before the first phase.
Then the counters are zeroed (`callgrind_control --zero`), and after the phase dumped
(`--dump`); a phase's instructions over its requests is the figure, for every thread of the
apiserver (gRPC's included). It includes what the apiserver does on its own meanwhile
(bookmarks, its identity Lease, the kubernetes Service's endpoints): counted for
`--idle-seconds` before the first phase, that rate times a phase's duration is reported as the
phase's `idle_share_per_request`. Under callgrind the apiserver runs 30-60x slower: 200 requests
a phase take a few minutes on a loaded machine. Prints one JSON line per tree; nothing is
asserted. Needs valgrind (Debian's `valgrind` package).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
PHASES = (
    "create",
    "bind",
    "status",
    "lease",
    "create-stream",
    "status-stream",
    "lease-stream",
)
LEASES = 50


# ---- the driver (runs with the tree under test on PYTHONPATH) ---------------------------------


def _credentials(entry: list[str] | None) -> Any:
    """The tree's Credentials from [ca, cert, key] file paths (None: plaintext)."""
    from tinykube.tls import PLAINTEXT, Credentials

    if entry is None:
        return PLAINTEXT
    ca, cert, key = entry
    return Credentials.from_files(ca_file=ca, cert_file=cert, key_file=key)


async def drive(address: str, count: int, identities: dict[str, Any]) -> None:
    """Send the phases' requests; `identities` names each sender's certificate files
    ({"admin", "creator", "binder": [ca, cert, key], "nodes": [[ca, cert, key], ...]}) or is
    empty (--insecure: one plaintext client sends everything)."""
    from contextlib import AsyncExitStack

    from google.protobuf import json_format

    from tinykube.client import Client
    from tinykube.v1 import lease_pb2, node_pb2, pod_pb2

    def wait_for_go(phase: str) -> None:
        print(f"ready {phase}", flush=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("the parent did not say go")

    def done(phase: str) -> None:
        print(f"done {phase}", flush=True)

    def new_pod(name: str) -> Any:
        pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
        pod.metadata.name, pod.metadata.namespace = name, "default"
        pod.metadata.labels["app"] = "cost"
        pod.spec.schedulerName = "nobody"
        c = pod.spec.containers.add(name="c", image="registry.k8s.io/pause:3.10")
        c.resources.requests["cpu"] = "100m"
        c.resources.requests["memory"] = "500Mi"
        return pod

    async def patiently(
        what: str,
        call: Callable[[], Awaitable[Any]],
        exists: Callable[[], Awaitable[Any]] | None = None,
    ) -> Any:
        """`call()` until it succeeds: under callgrind the apiserver takes minutes to reconcile
        the bootstrap RBAC policy (until then the controller manager and the scheduler are
        refused, as in a cluster starting) and TLS handshakes can outlast a client's connect
        deadline. Done before the phases, so their requests find warm connections."""
        deadline = time.monotonic() + 1200
        while True:
            try:
                return await call()
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise
                if exists is not None and type(exc).__name__ == "AlreadyExistsError":
                    return await exists()  # an attempt that timed out was applied
                print(f"driver: {what}: {exc}; again in 2s", file=sys.stderr, flush=True)
                await asyncio.sleep(2)

    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    async with AsyncExitStack() as stack:
        clients: dict[str, Any] = {}

        async def client_of(name: str, entry: list[str] | None) -> Any:
            if name not in clients:
                made = Client(address, timeout=600.0, credentials=_credentials(entry))
                clients[name] = await stack.enter_async_context(made)
            return clients[name]

        def node_entry(i: int) -> list[str] | None:
            return identities["nodes"][i] if identities else None

        def who(role: str) -> tuple[str, list[str] | None]:
            # --insecure: one client for everything, as before.
            return (role, identities[role]) if identities else ("plain", None)

        admin = await client_of(*who("admin"))
        creator = await client_of(*who("creator"))
        binder = await client_of(*who("binder"))
        kubelet = await client_of("node-0" if identities else "plain", node_entry(0))
        node = node_pb2.Node(apiVersion="v1", kind="Node")
        node.metadata.name = "node-0"
        for resources in (node.status.capacity, node.status.allocatable):
            resources.update({"cpu": "64", "memory": "256Gi", "pods": "110000"})
        await patiently(
            "create the node", lambda: admin.nodes.create(node), lambda: admin.nodes.get("node-0")
        )
        # Each identity's first request, outside the phases (see `patiently`): a pod created,
        # bound and reported Running by those who do it in the phases.
        warm = pod_pb2.Pod(apiVersion="v1", kind="Pod")
        warm.metadata.name, warm.metadata.namespace = "warm", "default"
        warm.spec.schedulerName = "nobody"
        warm.spec.containers.add(name="c", image="registry.k8s.io/pause:3.10")
        warm = await patiently(
            "create a pod",
            lambda: creator.pods.create(warm),
            lambda: admin.pods.get("warm", "default"),
        )
        uid = warm.metadata.uid
        await patiently("bind a pod", lambda: binder.bind("default", "warm", "node-0", uid))
        warm = await patiently("get a pod", lambda: kubelet.pods.get("warm", "default"))
        warm.status.phase = "Running"
        await patiently("report a pod's status", lambda: kubelet.pods.update_status(warm))
        pods: list[Any] = []
        wait_for_go("create")
        for i in range(count):
            pods.append(await creator.pods.create(new_pod(f"cost-{i:05d}")))
        done("create")

        wait_for_go("bind")
        for pod in pods:
            await binder.bind("default", pod.metadata.name, "node-0", pod.metadata.uid)
        done("bind")

        current = [await kubelet.pods.get(p.metadata.name, "default") for p in pods]
        wait_for_go("status")
        # As JSON, so fields an older tree's PodStatus lacks are left out.
        status = {
            "phase": "Running",
            "hostIP": "10.0.0.1",
            "hostIPs": [{"ip": "10.0.0.1"}],
            "podIP": "10.0.0.1",
            "podIPs": [{"ip": "10.0.0.1"}],
            "startTime": stamp,
            "qosClass": "Burstable",
            "conditions": [
                {"type": kind, "status": "True", "lastTransitionTime": stamp}
                for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "imageID": "registry.k8s.io/pause@sha256:" + "0" * 64,
                    "containerID": "fake://0",
                    "ready": True,
                    "started": True,
                    "state": {"running": {"startedAt": stamp}},
                }
            ],
        }
        for pod in current:
            json_format.ParseDict(status, pod.status, ignore_unknown_fields=True)
            await kubelet.pods.update_status(pod)
        done("status")
        streams = hasattr(creator.pods, "pipelined")

        leases = []
        heartbeats = []
        for i in range(LEASES):
            # Each node renews its own Lease over its own connection (NodeRestriction lets a
            # node write only the Lease named after it).
            beat = await client_of(f"node-{i}" if identities else "plain", node_entry(i))
            lease = lease_pb2.Lease(apiVersion="coordination.k8s.io/v1", kind="Lease")
            lease.metadata.name, lease.metadata.namespace = f"node-{i}", "kube-node-lease"
            lease.spec.holderIdentity = f"node-{i}"
            lease.spec.leaseDurationSeconds = 40
            lease.spec.renewTime.FromDatetime(now)
            create = functools.partial(beat.leases.create, lease)
            get = functools.partial(beat.leases.get, f"node-{i}", "kube-node-lease")
            leases.append(await patiently(f"create lease node-{i}", create, get))
            heartbeats.append(beat)
        wait_for_go("lease")
        for i in range(count):
            lease = leases[i % LEASES]
            renewed = now + datetime.timedelta(seconds=10 * (i // LEASES + 1))
            lease.spec.renewTime.FromDatetime(renewed)
            leases[i % LEASES] = await heartbeats[i % LEASES].leases.update(lease)
        done("lease")

        if not streams:
            for phase in ("create-stream", "status-stream", "lease-stream"):
                print(f"skip {phase}", flush=True)
            return
        # Each identity's own streams: the creator's creates, node-0's status writes, and
        # each node's Lease renewals on that node's connection.
        creates_s, statuses_s = creator.pods.pipelined(), kubelet.pods.pipelined()
        leases_s = [beat.leases.pipelined() for beat in heartbeats]
        # Open the streams (and pass their first-answer wait) before the measured phases.
        warm = await creates_s.create(new_pod("cost-s-warm"))
        await binder.bind("default", warm.metadata.name, "node-0", warm.metadata.uid)
        warm = await kubelet.pods.get(warm.metadata.name, "default")
        json_format.ParseDict(status, warm.status, ignore_unknown_fields=True)
        await statuses_s.update_status(warm)
        streamed = []
        wait_for_go("create-stream")
        for i in range(count):
            streamed.append(await creates_s.create(new_pod(f"cost-s-{i:05d}")))
        done("create-stream")
        for pod in streamed:
            await binder.bind("default", pod.metadata.name, "node-0", pod.metadata.uid)
        current = [await kubelet.pods.get(p.metadata.name, "default") for p in streamed]
        wait_for_go("status-stream")
        for pod in current:
            json_format.ParseDict(status, pod.status, ignore_unknown_fields=True)
            await statuses_s.update_status(pod)
        done("status-stream")
        for i, lease in enumerate(leases):
            lease.spec.renewTime.FromDatetime(now)
            leases[i] = await leases_s[i].update(lease)
        wait_for_go("lease-stream")
        for i in range(count):
            lease = leases[i % LEASES]
            renewed = now + datetime.timedelta(seconds=10 * (i // LEASES + count + 1))
            lease.spec.renewTime.FromDatetime(renewed)
            leases[i % LEASES] = await leases_s[i % LEASES].update(lease)
        done("lease-stream")


# ---- the parent ------------------------------------------------------------------------------


def _summary(dump: Path) -> int:
    """The dump's total instruction count (callgrind's `summary:` line)."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {dump}")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _dump_instructions(pid: int, work: Path) -> int:
    """Dump callgrind's counters since the last zero; their instruction total."""
    before = set(work.glob("callgrind.out*"))
    _callgrind_control("--dump", str(pid))
    (dump,) = set(work.glob("callgrind.out*")) - before
    return _summary(dump)


def _settle(pid: int, quiet: float = 0.15, seconds: float = 3.0, limit: float = 300) -> None:
    """Wait until the apiserver has used under `quiet` of a CPU for `seconds` in a row (an
    idle apiserver under callgrind, instrumenting, takes about 5 %), at most `limit`."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        cpu = _cpu_seconds(pid)
        time.sleep(seconds)
        if _cpu_seconds(pid) - cpu < quiet * seconds:
            return
    print(f"opcost: the apiserver was still busy after {limit:g}s", file=sys.stderr, flush=True)


def _signal_profiler(pid: int, work: Path, expect: str) -> None:
    """Toggle the apiserver's profiler (`profiled`) and wait until it says it did."""
    log = work / "apiserver.log"
    seen = log.read_text(errors="replace").count(f"opcost: profile {expect}")
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 120
    while log.read_text(errors="replace").count(f"opcost: profile {expect}") == seen:
        if time.monotonic() > deadline:
            raise SystemExit(f"the apiserver's profiler never said {expect!r}")
        time.sleep(0.1)


def profiled(prefix: str, argv: list[str]) -> int:
    """The apiserver (`python -m apiserver argv`) with a cProfile of its event loop's thread
    per phase: SIGUSR1 starts a profile, the next one writes it to `<prefix>-<phase>.pstats`
    (phases in `PHASES` order), so each phase's call counts are its own."""
    import cProfile

    from apiserver.__main__ import main as apiserver_main

    current: list[cProfile.Profile] = []
    phases = list(PHASES)

    def toggle(signum: int, frame: Any) -> None:
        if current:
            profile = current.pop()
            profile.disable()
            phase = phases.pop(0)
            profile.dump_stats(f"{prefix}-{phase}.pstats")
            print(f"opcost: profile dumped {phase}", flush=True)
        else:
            profile = cProfile.Profile()
            current.append(profile)
            print("opcost: profile started", flush=True)
            profile.enable()

    signal.signal(signal.SIGUSR1, toggle)
    return apiserver_main(argv)


def _callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def _security(work: Path) -> tuple[Any, list[str], dict[str, Any], Any]:
    """`tinykube up`'s certificates for this run: etcd's TLS, the apiserver's flags (as
    tinykube.launcher's `security_args`), the driver's identities and the parent's (admin)
    credentials."""
    from tinykube.localetcd import EtcdTLS
    from tinykube.pki import PKI, cluster_specs
    from tinykube.tls import Credentials

    pki = PKI(work / "pki")
    nodes = [f"node-{i}" for i in range(LEASES)]
    # The nodes' serving certificates are for their kubelet ports, which nothing dials here.
    pki.ensure_all([s for s in cluster_specs(nodes) if not s.name.endswith("-serving")])
    pki.ensure_service_account_key()
    ca = str(pki.ca_cert_path)
    server, peer = pki.paths("etcd-server"), pki.paths("etcd-peer")
    etcd_tls = EtcdTLS(str(server.cert), str(server.key), ca, str(peer.cert), str(peer.key))
    api, etcd_client = pki.paths("apiserver"), pki.paths("apiserver-etcd-client")
    kubelet_client = pki.paths("apiserver-kubelet-client")
    flags = ["--tls-cert-file", str(api.cert), "--tls-private-key-file", str(api.key)]
    flags += ["--client-ca-file", ca, "--etcd-cafile", ca]
    flags += ["--etcd-certfile", str(etcd_client.cert), "--etcd-keyfile", str(etcd_client.key)]
    flags += ["--kubelet-client-certificate", str(kubelet_client.cert)]
    flags += ["--kubelet-client-key", str(kubelet_client.key)]
    flags += ["--kubelet-certificate-authority", ca]
    flags += ["--service-account-key-file", str(pki.service_account_pub_path)]
    flags += ["--service-account-signing-key-file", str(pki.service_account_key_path)]

    def entry(name: str) -> list[str]:
        paths = pki.paths(name)
        return [ca, str(paths.cert), str(paths.key)]

    identities = {
        "admin": entry("admin"),  # system:masters: the Node object
        "creator": entry("controller-manager"),  # the ReplicaSet controller's user
        "binder": entry("scheduler"),
        "nodes": [entry(f"kubelet-{node}") for node in nodes],
    }
    admin = pki.paths("admin")
    parent = Credentials.from_files(ca_file=ca, cert_file=str(admin.cert), key_file=str(admin.key))
    return etcd_tls, flags, identities, parent


def one_run(
    tree: Path,
    count: int,
    valgrind: bool = True,
    cprofile: Path | None = None,
    *,
    insecure: bool = False,
    keep: bool = False,
    idle_seconds: float = 20.0,
) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from tinykube.health import wait_healthy
    from tinykube.localetcd import EtcdServer, free_port
    from tinykube.tls import PLAINTEXT

    work = Path(tempfile.mkdtemp(prefix="tinykube-opcost-"))
    identities: dict[str, Any]
    if insecure:
        etcd_tls, security, identities, parent = None, ["--insecure"], {}, PLAINTEXT
    else:
        etcd_tls, security, identities, parent = _security(work)
    (work / "identities.json").write_text(json.dumps(identities))
    etcd = EtcdServer(str(work / "etcd"), die_with_parent=True, tls=etcd_tls)
    etcd.start()
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    port = free_port()
    out = work / "callgrind.out"
    # Uninstrumented (several times faster) until the first phase turns it on.
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-line=no"]
    cmd += ["--instr-atstart=no"]
    if not valgrind:
        cmd = []
    cmd += [sys.executable]
    if cprofile is not None:
        # One profile per phase: SIGUSR1 starts one, the next dumps it (`profiled`).
        cprofile.mkdir(parents=True, exist_ok=True)
        mode = "insecure" if insecure else "tls"
        prefix = str(cprofile / f"{tree.name}-{mode}")
        cmd += [str(Path(__file__).resolve()), "--profiled", prefix, "--"]
    else:
        cmd += ["-m", "apiserver"]
    cmd += ["--etcd-servers", etcd.url]
    cmd += ["--bind-address", f"127.0.0.1:{port}", "--rest-port", "-1", *security]
    # No periodic work of its own during a phase: compaction off.
    cmd += ["--compaction-interval", "0"]
    with open(work / "apiserver.log", "wb") as log:
        api = subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
    driver: subprocess.Popen[str] | None = None
    result: dict[str, Any] = {
        "tree": str(tree),
        "count": count,
        "nproc": os.cpu_count(),
        "security": "insecure" if insecure else "tls+Node,RBAC",
    }
    try:
        address = f"127.0.0.1:{port}"
        wait_healthy(address, 900, alive=lambda: api.poll() is None, credentials=parent)
        driver = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--drive",
                address,
                str(count),
                str(work / "identities.json"),
            ],
            cwd=tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert driver.stdin is not None and driver.stdout is not None
        for phase in PHASES:
            line = driver.stdout.readline().strip()
            if line == f"skip {phase}":
                result[phase] = None
                continue
            if line != f"ready {phase}":
                raise SystemExit(f"driver: expected 'ready {phase}', got {line!r}")
            # Nothing of the start left running (the bootstrap RBAC policy's reconciliation
            # takes minutes under callgrind) or of the phase before.
            _settle(api.pid)
            if valgrind and phase == PHASES[0]:
                # Uninstrumented (several times faster) through the start and the warm-up.
                _callgrind_control("--instr=on", str(api.pid))
            if valgrind and phase == PHASES[0] and idle_seconds > 0:
                # What the apiserver does on its own (bookmarks, its Lease, the kubernetes
                # Service's endpoints) per second, which every phase includes for as long as
                # it takes: under callgrind a phase takes a minute or more.
                _callgrind_control("--zero", str(api.pid))
                time.sleep(idle_seconds)
                result["idle_instructions_per_second"] = round(
                    _dump_instructions(api.pid, work) / idle_seconds
                )
            if valgrind:
                _callgrind_control("--zero", str(api.pid))
            if cprofile is not None:
                _signal_profiler(api.pid, work, "started")
            began, cpu = time.monotonic(), _cpu_seconds(api.pid)
            driver.stdin.write("go\n")
            driver.stdin.flush()
            line = driver.stdout.readline().strip()
            if line != f"done {phase}":
                raise SystemExit(f"driver: expected 'done {phase}', got {line!r}")
            seconds = round(time.monotonic() - began, 1)
            if cprofile is not None:
                _signal_profiler(api.pid, work, f"dumped {phase}")
            if not valgrind:
                used = _cpu_seconds(api.pid) - cpu
                result[phase] = {
                    "cpu_us_per_request": round(used / count * 1e6),
                    "seconds": seconds,
                }
                continue
            instructions = _dump_instructions(api.pid, work)
            result[phase] = {
                "instructions_per_request": round(instructions / count),
                "seconds_under_callgrind": seconds,
            }
            idle = result.get("idle_instructions_per_second")
            if idle is not None:
                # The background's share of the figure (its rate times the phase's duration).
                result[phase]["idle_share_per_request"] = round(idle * seconds / count)
            print(f"{tree.name} {result['security']} {phase}: "
                  f"{instructions / count / 1e6:.2f} M/request",
                  file=sys.stderr, flush=True)  # fmt: skip
        driver.wait(60)
        return result
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        api.terminate()
        try:
            api.wait(60)
        except subprocess.TimeoutExpired:
            api.kill()
            api.wait()
        etcd.stop()
        if keep:
            print(f"kept {work}", file=sys.stderr, flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    if len(sys.argv) > 3 and sys.argv[1] == "--profiled" and sys.argv[3] == "--":
        return profiled(sys.argv[2], sys.argv[4:])
    if len(sys.argv) == 5 and sys.argv[1] == "--drive":
        identities = json.loads(Path(sys.argv[4]).read_text())
        asyncio.run(drive(sys.argv[2], int(sys.argv[3]), identities))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--tree", type=Path, action="append", default=[], help="checkouts to run")
    p.add_argument("--count", type=int, default=200, help="requests per phase")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument(
        "--no-valgrind",
        action="store_true",
        help="run the apiserver plainly and report CPU microseconds per request instead",
    )
    p.add_argument(
        "--cprofile",
        type=Path,
        help="run the apiserver under cProfile (no valgrind), writing one profile per phase, "
        "DIR/<tree>-<tls|insecure>-<phase>.pstats: call counts per function are exact, so two "
        "trees' counts show what a request does more",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext apiserver and etcd, nothing authenticated or authorized (as "
        "`tinykube up --insecure`), to compare with the default (TLS, Node,RBAC)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep each run's directory (callgrind dumps for callgrind_annotate, the "
        "apiserver's log); by default it is removed",
    )
    p.add_argument(
        "--idle-seconds",
        type=float,
        default=20.0,
        help="seconds of an idle apiserver counted before the first phase (its background "
        "instructions per second, which each phase includes for its duration); 0: none",
    )
    a = p.parse_args()
    trees = [t.resolve() for t in a.tree] or [HERE]
    for _ in range(a.runs):
        for tree in trees:
            valgrind = not (a.no_valgrind or a.cprofile)
            result = one_run(
                tree,
                a.count,
                valgrind,
                a.cprofile,
                insecure=a.insecure,
                keep=a.keep,
                idle_seconds=a.idle_seconds,
            )
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
