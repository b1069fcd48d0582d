"""Workloads across real processes: etcd, apiserver, scheduler, controller manager, 2 kubelets.

ReplicaSets of real `sleep` processes are created, scaled, deleted and healed; a kubelet and
the controller manager are killed with SIGKILL; a crashing container restarts with back-off;
`tinykube logs` prints a container's output. Timings are shortened through flags (lease
durations and grace periods of seconds) and every wait polls for a condition.

If the scheduler package cannot run yet, a small binder in this module assigns pending pods
round-robin to Ready, untainted nodes instead (see `binder`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.waiting import eventually
from tinykube.client import Client
from tinykube.errors import NotFoundError, TinykubeError
from tinykube.launcher import Exited, LocalCluster, has_main
from tinykube.v1 import node_pb2, pod_pb2, replicaset_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

NS = "default"
KUBELET_ARGS = [
    "--node-lease-duration-seconds", "4",
    "--node-status-update-frequency", "1s",
    "--crash-loop-backoff", "1s",
    "--crash-loop-backoff-max", "4s",
    "--poll-interval", "200ms",
]  # fmt: skip
CONTROLLER_ARGS = [
    "--node-monitor-grace-period", "5s",
    "--node-monitor-period", "1s",
    "--default-unreachable-toleration-seconds", "3",
    "--leader-elect-lease-duration", "4s",
    "--leader-elect-renew-deadline", "3s",
    "--leader-elect-retry-period", "1s",
]  # fmt: skip


def processes_running(argv: list[str]) -> list[int]:
    """Pids in the process table whose command line is exactly `argv` (zombies excluded)."""
    wanted = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_bytes() != wanted:
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2 :].split()[0] != "Z":
            found.append(int(entry.name))
    return found


def schedulable(node: node_pb2.Node) -> bool:
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    blocked = any(t.effect in ("NoSchedule", "NoExecute") for t in node.spec.taints)
    return ready and not blocked and not node.spec.unschedulable


async def binder(client: Client) -> None:
    """Stand-in for the scheduler: bind pending pods round-robin to schedulable nodes."""
    turn = 0
    while True:
        try:
            nodes = sorted(
                n.metadata.name for n in (await client.nodes.list()).items if schedulable(n)
            )
            pending = (await client.pods.list("", field_selector="spec.nodeName=")).items
            for pod in pending:
                if not nodes or pod.metadata.HasField("deletionTimestamp"):
                    continue
                node = nodes[turn % len(nodes)]
                turn += 1
                with contextlib.suppress(TinykubeError):
                    await client.bind(
                        pod.metadata.namespace, pod.metadata.name, node, pod.metadata.uid
                    )
        except TinykubeError:
            pass
        await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    work = tmp_path_factory.mktemp("workloads")
    use_scheduler = has_main("scheduler")
    cl = LocalCluster(
        work,
        scheduler=use_scheduler,
        kubelets=("node-1", "node-2"),
        extra_args={"kubelet": KUBELET_ARGS, "controller": CONTROLLER_ARGS},
    )
    await asyncio.to_thread(cl.start)
    bind_task = None
    try:
        async with Client(cl.api_address) as client:
            if not use_scheduler:
                bind_task = asyncio.create_task(binder(client))
            await eventually(lambda: nodes_ready(client, 2), what="two Ready nodes")
            yield cl
    finally:
        if bind_task is not None:
            bind_task.cancel()
        await asyncio.to_thread(cl.stop)


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[Client]:
    async with Client(cluster.api_address) as c:
        yield c


async def nodes_ready(client: Client, count: int) -> bool:
    nodes = (await client.nodes.list()).items
    return sum(1 for n in nodes if schedulable(n)) >= count


def stay_on_unreachable_nodes(spec: pod_pb2.PodSpec) -> None:
    """Tolerate the unreachable taint for good. This module's controller manager evicts pods
    from a node silent for 5 s (+3 s toleration); a kubelet restart on a busy machine (SIGTERM
    ignored for 10 s, then a slow start) outlasts that, and the evicted pods' containers are then
    rightly killed by the restarted kubelet. Tests of what a restart keeps opt out of eviction."""
    spec.tolerations.add(
        key="node.kubernetes.io/unreachable", operator="Exists", effect="NoExecute"
    )


def sleeper_rs(name: str, replicas: int, token: str) -> replicaset_pb2.ReplicaSet:
    rs = replicaset_pb2.ReplicaSet(apiVersion="v1", kind="ReplicaSet")
    rs.metadata.name = name
    rs.metadata.namespace = NS
    rs.spec.replicas = replicas
    rs.spec.selector.matchLabels["app"] = name
    rs.spec.template.metadata.labels["app"] = name
    container = rs.spec.template.spec.containers.add(name="sleep", image="busybox")
    container.command.extend(["sleep", token])
    rs.spec.template.spec.terminationGracePeriodSeconds = 2
    return rs


async def rs_pods(client: Client, name: str) -> list[pod_pb2.Pod]:
    return [
        p
        for p in (await client.pods.list(NS, label_selector=f"app={name}")).items
        if not p.metadata.HasField("deletionTimestamp")
    ]


async def running(client: Client, name: str, count: int, argv: list[str]) -> bool:
    """Exactly `count` live pods, all Running and Ready, and exactly that many processes."""
    pods = await rs_pods(client, name)
    ready = [
        p
        for p in pods
        if p.status.phase == "Running"
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions)
    ]
    all_pods = (await client.pods.list(NS, label_selector=f"app={name}")).items
    return len(all_pods) == count and len(ready) == count and len(processes_running(argv)) == count


async def scale(client: Client, name: str, replicas: int) -> None:
    for _ in range(5):
        rs = await client.replica_sets.get(name, NS)
        rs.spec.replicas = replicas
        try:
            await client.replica_sets.update(rs)
            return
        except TinykubeError:
            continue


def token() -> str:
    # A unique, valid `sleep` argument so the test can find its own processes.
    return f"{3000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"


async def test_replicaset_runs_scales_and_is_deleted(client: Client) -> None:
    tok = token()
    argv = ["sleep", tok]
    await client.replica_sets.create(sleeper_rs("sleepers", 6, tok))
    await eventually(lambda: running(client, "sleepers", 6, argv), what="6 running sleepers")
    pods = await rs_pods(client, "sleepers")
    assert {p.spec.nodeName for p in pods} == {"node-1", "node-2"}
    for pod in pods:
        assert pod.metadata.ownerReferences[0].kind == "ReplicaSet"
        assert pod.status.hostIP == "127.0.0.1"
        assert pod.status.containerStatuses[0].state.HasField("running")
    rs = await client.replica_sets.get("sleepers", NS)
    assert (rs.status.replicas, rs.status.readyReplicas) == (6, 6)

    await scale(client, "sleepers", 2)
    await eventually(lambda: running(client, "sleepers", 2, argv), what="scaled down to 2")
    await scale(client, "sleepers", 6)
    await eventually(lambda: running(client, "sleepers", 6, argv), what="scaled back to 6")

    await client.replica_sets.delete("sleepers", NS)

    async def all_gone() -> bool:
        pods = (await client.pods.list(NS, label_selector="app=sleepers")).items
        return not pods and not processes_running(argv)

    await eventually(all_gone, what="pods and processes of the deleted ReplicaSet to go")


async def test_crashing_container_restarts_with_backoff(client: Client) -> None:
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name = "crasher"
    pod.metadata.namespace = NS
    c = pod.spec.containers.add(name="main", image="busybox")
    c.command.extend(["sh", "-c", "echo about to fail; exit 3"])
    await client.pods.create(pod)

    async def restarted() -> pod_pb2.ContainerStatus | None:
        p = await client.pods.get("crasher", NS)
        cs = p.status.containerStatuses
        return cs[0] if cs and cs[0].restartCount >= 2 else None

    status = await eventually(restarted, what="two restarts")
    assert status.lastState.terminated.exitCode == 3
    assert status.lastState.terminated.reason == "Error"
    p = await client.pods.get("crasher", NS)
    assert p.status.phase == "Running"
    # Between attempts the container waits out its back-off.
    waits = await eventually(lambda: crash_loop_waiting(client), limit=30, what="CrashLoopBackOff")
    assert "back-off" in waits.message
    events = [
        e
        for e in (await client.events.list(NS)).items
        if e.involvedObject.name == "crasher" and e.source.component == "kubelet"
    ]
    reasons = {e.reason: e for e in events}
    assert {"Started", "BackOff"} <= set(reasons), sorted(reasons)
    assert reasons["BackOff"].type == "Warning"
    await client.pods.delete("crasher", NS, grace_period_seconds=0)


async def crash_loop_waiting(client: Client) -> pod_pb2.ContainerStateWaiting | None:
    p = await client.pods.get("crasher", NS)
    cs = p.status.containerStatuses
    if cs and cs[0].state.waiting.reason == "CrashLoopBackOff":
        return cs[0].state.waiting
    return None


@pytest.mark.parametrize(
    ("policy", "script", "phase", "code"),
    [("Never", "exit 0", "Succeeded", 0), ("Never", "exit 7", "Failed", 7),
     ("OnFailure", "test -f done || { touch done; exit 1; }", "Succeeded", 0)],
)  # fmt: skip
async def test_run_to_completion_pods_finish_with_their_exit_code(
    client: Client, policy: str, script: str, phase: str, code: int
) -> None:
    name = f"job-{policy.lower()}-{code}-{uuid.uuid4().hex[:5]}"
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name = name
    pod.metadata.namespace = NS
    pod.spec.restartPolicy = policy
    c = pod.spec.containers.add(name="main", image="busybox")
    c.command.extend(["sh", "-c", script])

    async def finished() -> pod_pb2.Pod | None:
        p = await client.pods.get(name, NS)
        return p if p.status.phase in ("Succeeded", "Failed") else None

    await client.pods.create(pod)
    done = await eventually(finished, what=f"{name} to finish")
    assert done.status.phase == phase
    (cs,) = done.status.containerStatuses
    assert cs.state.terminated.exitCode == code
    assert cs.state.terminated.reason == ("Completed" if code == 0 else "Error")
    assert cs.restartCount == (1 if policy == "OnFailure" else 0)
    ready = next(c for c in done.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "PodCompleted")
    await client.pods.delete(name, NS, grace_period_seconds=0)


async def test_command_that_cannot_start_is_reported(client: Client) -> None:
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name = "nocommand"
    pod.metadata.namespace = NS
    pod.spec.containers.add(name="main", image="x", command=["/no/such/binary-tinykube"])
    await client.pods.create(pod)

    async def waiting() -> pod_pb2.ContainerStateWaiting | None:
        p = await client.pods.get("nocommand", NS)
        cs = p.status.containerStatuses
        return cs[0].state.waiting if cs and cs[0].state.waiting.reason else None

    state = await eventually(waiting, what="a waiting reason")
    assert state.reason == "RunContainerError"
    assert "No such file or directory" in state.message
    assert (await client.pods.get("nocommand", NS)).status.phase == "Pending"
    await client.pods.delete("nocommand", NS, grace_period_seconds=0)


async def test_tinykube_logs_prints_container_output(client: Client, cluster: LocalCluster) -> None:
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name = "talker"
    pod.metadata.namespace = NS
    c = pod.spec.containers.add(name="main", image="busybox")
    c.command.extend(["sh", "-c", 'echo "hello from $HOSTNAME"; echo line two; sleep 600'])
    pod.spec.terminationGracePeriodSeconds = 1
    await client.pods.create(pod)

    async def is_running() -> bool:
        p = await client.pods.get("talker", NS)
        return p.status.phase == "Running"

    await eventually(is_running, what="talker running")

    def logs(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tinykube.cli.main", "--server", cluster.api_address,
             "logs", "talker", *extra],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip

    async def printed() -> subprocess.CompletedProcess[str] | None:
        out = await asyncio.to_thread(logs)
        return out if "line two" in out.stdout else None

    result = await eventually(printed, what="tinykube logs output")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello from talker\nline two\n"
    tail = await asyncio.to_thread(logs, "--tail", "1")
    assert tail.stdout == "line two\n"
    missing = await asyncio.to_thread(logs, "-c", "nope")
    assert missing.returncode == 1
    assert "container nope is not valid for pod talker" in missing.stderr

    # -f streams until the pod is gone.
    follow = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tinykube.cli.main", "--server", cluster.api_address,
        "logs", "talker", "-f",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert follow.stdout is not None
    first = await asyncio.wait_for(follow.stdout.readline(), 30)
    assert first == b"hello from talker\n"
    await asyncio.sleep(0.5)
    assert follow.returncode is None, "logs -f ended while the pod was running"
    await client.pods.delete("talker", NS)
    rest, _ = await asyncio.wait_for(follow.communicate(), 30)
    assert rest == b"line two\n" and follow.returncode == 0

    async def gone() -> bool:
        try:
            await client.pods.get("talker", NS)
        except NotFoundError:
            return True
        return False

    await eventually(gone, what="graceful deletion confirmed by the kubelet")


async def test_dead_kubelet_pods_are_replaced_on_the_other_node(
    client: Client, cluster: LocalCluster
) -> None:
    tok = token()
    argv = ["sleep", tok]
    await client.replica_sets.create(sleeper_rs("survivors", 4, tok))
    await eventually(lambda: running(client, "survivors", 4, argv), what="4 running pods")
    pods = await rs_pods(client, "survivors")
    # Kill the kubelet of a node that runs some of the pods; the other one must take them.
    victim = pods[0].spec.nodeName
    survivor = "node-1" if victim == "node-2" else "node-2"
    on_victim = {p.metadata.name for p in pods if p.spec.nodeName == victim}

    await asyncio.to_thread(cluster.kill, f"kubelet-{victim}", signal.SIGKILL)

    async def victim_unreachable() -> bool:
        node = await client.nodes.get(victim)
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        tainted = any(t.key == "node.kubernetes.io/unreachable" for t in node.spec.taints)
        return ready.status == "Unknown" and ready.reason == "NodeStatusUnknown" and tainted

    await eventually(victim_unreachable, what=f"{victim} Ready=Unknown and tainted")

    async def healed() -> bool:
        pods = await rs_pods(client, "survivors")
        names = {p.metadata.name for p in pods}
        all_pods = (await client.pods.list(NS, label_selector="app=survivors")).items
        return (
            len(all_pods) == 4
            and not names & on_victim
            and all(p.spec.nodeName == survivor and p.status.phase == "Running" for p in pods)
        )

    await eventually(healed, what=f"replacements Running on {survivor}")

    # The kubelet comes back: the node is Ready again and untainted, and the processes of the
    # pods that were deleted while it was away are killed.
    await asyncio.to_thread(cluster.start_component, f"kubelet-{victim}")

    async def victim_back() -> bool:
        node = await client.nodes.get(victim)
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        return ready.status == "True" and not node.spec.taints

    await eventually(victim_back, what=f"{victim} Ready again")
    await eventually(
        lambda: asyncio.sleep(0, len(processes_running(argv)) == 4),
        what="orphaned processes killed",
    )
    await client.replica_sets.delete("survivors", NS)
    await eventually(
        lambda: asyncio.sleep(0, not processes_running(argv)), what="survivors cleaned up"
    )


async def test_pods_of_a_frozen_kubelet_turn_not_ready_and_come_back(
    client: Client, cluster: LocalCluster
) -> None:
    """A kubelet stopped (SIGSTOP) past the grace period: its node turns Unknown and its pods
    Ready=False (so Services drop them); they tolerate the unreachable taint for 120 s, so when
    it resumes (SIGCONT) the same pods are Ready again, reported by the kubelet."""
    tok = token()
    argv = ["sleep", tok]
    rs = sleeper_rs("frozen", 2, tok)
    rs.spec.template.spec.tolerations.add(
        key="node.kubernetes.io/unreachable",
        operator="Exists",
        effect="NoExecute",
        tolerationSeconds=120,
    )
    await client.replica_sets.create(rs)
    await eventually(lambda: running(client, "frozen", 2, argv), what="2 running pods")
    pods = await rs_pods(client, "frozen")
    victim = pods[0].spec.nodeName
    on_victim = {p.metadata.uid for p in pods if p.spec.nodeName == victim}

    def ready(pod: pod_pb2.Pod) -> str:
        return next((c.status for c in pod.status.conditions if c.type == "Ready"), "")

    async def victims_ready(want: str) -> bool:
        pods = await rs_pods(client, "frozen")
        mine = [p for p in pods if p.metadata.uid in on_victim]
        return len(mine) == len(on_victim) and all(ready(p) == want for p in mine)

    await asyncio.to_thread(cluster.kill, f"kubelet-{victim}", signal.SIGSTOP)
    try:

        async def victim_unknown() -> bool:
            node = await client.nodes.get(victim)
            return any(c.type == "Ready" and c.status == "Unknown" for c in node.status.conditions)

        await eventually(victim_unknown, what=f"{victim} Ready=Unknown")
        await eventually(lambda: victims_ready("False"), what=f"the pods on {victim} not Ready")
        events = (await client.events.list(NS)).items
        assert any(
            e.reason == "NodeNotReady"
            and e.message == "Node is not ready"
            and e.involvedObject.uid in on_victim
            for e in events
        ), [(e.reason, e.message) for e in events]
    finally:
        await asyncio.to_thread(cluster.kill, f"kubelet-{victim}", signal.SIGCONT)
    await eventually(lambda: victims_ready("True"), what=f"the pods on {victim} Ready again")
    await eventually(lambda: nodes_ready(client, 2), what="both nodes Ready")
    # Nothing was replaced: the same pods, the same processes.
    assert {p.metadata.uid for p in await rs_pods(client, "frozen")} >= on_victim
    assert len(processes_running(argv)) == 2
    await client.replica_sets.delete("frozen", NS)
    await eventually(lambda: asyncio.sleep(0, not processes_running(argv)), what="frozen cleaned")


async def test_controller_manager_killed_during_scale_up_never_overshoots(
    client: Client, cluster: LocalCluster
) -> None:
    tok = token()
    desired = 50
    await client.replica_sets.create(sleeper_rs("burst", 0, tok))
    controller = cluster.processes["controller"]
    created: set[str] = set()
    at_kill: list[int] = []

    async def watch_creations() -> None:
        # Every pod ever created for the ReplicaSet: none is deleted in this test, so the
        # number of distinct names is exactly the number of creations.
        async for event in client.pods.watch(NS, label_selector="app=burst"):
            if event.type != "ADDED":
                continue
            created.add(event.object.metadata.name)
            if not at_kill:
                # Kill the controller manager the moment its first pod appears: mid slow start.
                os.killpg(controller.pid, signal.SIGKILL)
                at_kill.append(len(created))

    watcher = asyncio.create_task(watch_creations())
    try:
        await asyncio.sleep(0.5)  # the watch is established
        await scale(client, "burst", desired)
        await eventually(lambda: asyncio.sleep(0, bool(at_kill)), what="the first pod")
        await asyncio.to_thread(cluster.kill, "controller", signal.SIGKILL)
        killed_with = len((await client.pods.list(NS, label_selector="app=burst")).items)
        await asyncio.to_thread(cluster.start_component, "controller")
        await eventually(
            lambda: running(client, "burst", desired, ["sleep", tok]),
            limit=120,
            what=f"{desired} pods after the restart",
        )
        await asyncio.sleep(2)  # and it stays exact
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    print(f"controller manager killed with {killed_with}/{desired} pods created")
    assert killed_with < desired, "the controller manager finished before it was killed"
    assert len(created) == desired, f"{len(created)} pods created for {desired} replicas"
    assert len(await rs_pods(client, "burst")) == desired
    await client.replica_sets.delete("burst", NS)
    await eventually(
        lambda: asyncio.sleep(0, not processes_running(["sleep", tok])), what="burst cleaned up"
    )


async def test_kubelet_restart_adopts_running_containers(
    client: Client, cluster: LocalCluster
) -> None:
    tok = token()
    argv = ["sleep", tok]
    rs = sleeper_rs("steady", 2, tok)
    stay_on_unreachable_nodes(rs.spec.template.spec)
    await client.replica_sets.create(rs)
    await eventually(lambda: running(client, "steady", 2, argv), what="2 running pods")
    before = sorted(processes_running(argv))
    await asyncio.to_thread(cluster.restart, "kubelet-node-1")
    await asyncio.to_thread(cluster.restart, "kubelet-node-2")
    await eventually(lambda: nodes_ready(client, 2), what="nodes Ready after restart")
    await asyncio.sleep(2)  # give a wrongly restarting kubelet the chance to duplicate
    assert sorted(processes_running(argv)) == before
    await eventually(lambda: running(client, "steady", 2, argv), what="still running")
    await client.replica_sets.delete("steady", NS)
    await eventually(
        lambda: asyncio.sleep(0, not processes_running(argv)), what="steady cleaned up"
    )


async def test_a_pod_force_deleted_while_its_kubelet_was_down_is_stopped_as_its_spec_says(
    client: Client, cluster: LocalCluster, tmp_path: Path
) -> None:
    """kube's kubelet restores a gone pod's preStop hook and grace period from its containers
    (their labels) and stops them with it; tinykube's keeps the spec it started them from."""
    tok = token()
    marker = tmp_path / "prestop"
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name, pod.metadata.namespace = f"gone-{tok[:8]}", NS
    pod.spec.nodeName = "node-1"
    pod.spec.terminationGracePeriodSeconds = 7
    c = pod.spec.containers.add(name="main", image="busybox", command=["sleep", tok])
    c.lifecycle.preStop.exec.command.extend(["sh", "-c", f"echo stopped > {marker}"])
    stay_on_unreachable_nodes(pod.spec)
    await client.pods.create(pod)
    await eventually(
        lambda: asyncio.sleep(0, bool(processes_running(["sleep", tok]))), what="the container"
    )
    await asyncio.to_thread(cluster.kill, "kubelet-node-1", signal.SIGKILL)
    try:
        await client.pods.delete(pod.metadata.name, NS, grace_period_seconds=0)
        assert processes_running(["sleep", tok]), "the container outlives its kubelet"
    finally:
        await asyncio.to_thread(cluster.start_component, "kubelet-node-1")
    await eventually(
        lambda: asyncio.sleep(0, not processes_running(["sleep", tok])),
        what="the orphaned container stopped by the restarted kubelet",
    )
    assert marker.read_text() == "stopped\n", "the preStop hook did not run"


async def test_container_output_survives_a_kubelet_restart(
    client: Client, cluster: LocalCluster
) -> None:
    # The container's stdout is a pipe to its log shim, not to the kubelet: a restarted
    # kubelet must neither kill it (SIGPIPE) nor lose a line of its output.
    pod = pod_pb2.Pod(apiVersion="v1", kind="Pod")
    pod.metadata.name = "ticker"
    pod.metadata.namespace = NS
    c = pod.spec.containers.add(name="main", image="busybox")
    c.command.extend(["sh", "-c", 'i=0; while :; do echo "tick $i"; i=$((i+1)); sleep 0.05; done'])
    pod.spec.terminationGracePeriodSeconds = 1
    stay_on_unreachable_nodes(pod.spec)
    await client.pods.create(pod)

    def logs() -> list[str]:
        out = subprocess.run(
            [sys.executable, "-m", "tinykube.cli.main", "--server", cluster.api_address,
             "logs", "ticker"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        return out.stdout.splitlines() if out.returncode == 0 else []

    async def ticking() -> list[str] | None:
        lines = await asyncio.to_thread(logs)
        return lines if len(lines) >= 5 else None

    before = len(await eventually(ticking, what="ticker's output"))
    running_pod = await client.pods.get("ticker", NS)
    container_id = running_pod.status.containerStatuses[0].containerID
    await asyncio.to_thread(cluster.restart, f"kubelet-{running_pod.spec.nodeName}")
    await eventually(lambda: nodes_ready(client, 2), what="nodes Ready after restart")

    async def grew() -> list[str] | None:
        lines = await asyncio.to_thread(logs)
        return lines if len(lines) >= before + 40 else None

    lines = await eventually(grew, what="output written after the kubelet restart")
    assert lines == [f"tick {i}" for i in range(len(lines))], "lines were lost or mangled"
    status = (await client.pods.get("ticker", NS)).status.containerStatuses[0]
    assert (status.containerID, status.restartCount) == (container_id, 0)
    assert status.state.HasField("running")
    await client.pods.delete("ticker", NS, grace_period_seconds=0)


async def test_second_controller_manager_takes_over_when_the_leader_dies(
    client: Client, cluster: LocalCluster
) -> None:
    await asyncio.to_thread(cluster.start_component, "controller-2", ["--identity", "standby"])

    async def holder() -> str:
        lease = await client.leases.get("tinykube-controller-manager", "kube-system")
        return lease.spec.holderIdentity

    assert await eventually(holder, what="a leader") != "standby"
    tok = token()
    await client.replica_sets.create(sleeper_rs("handover", 1, tok))
    await eventually(
        lambda: running(client, "handover", 1, ["sleep", tok]), what="1 pod from the leader"
    )
    await asyncio.to_thread(cluster.kill, "controller", signal.SIGKILL)

    async def standby_leads() -> bool:
        return await holder() == "standby"

    await eventually(standby_leads, what="the standby to take the lease")
    await scale(client, "handover", 3)
    await eventually(
        lambda: running(client, "handover", 3, ["sleep", tok]), what="3 pods from the new leader"
    )
    await client.replica_sets.delete("handover", NS)
    await eventually(
        lambda: asyncio.sleep(0, not processes_running(["sleep", tok])), what="handover cleaned"
    )


async def test_components_carry_on_after_an_apiserver_restart(
    client: Client, cluster: LocalCluster
) -> None:
    tok = token()
    argv = ["sleep", tok]
    await client.replica_sets.create(sleeper_rs("resilient", 2, tok))
    await eventually(lambda: running(client, "resilient", 2, argv), what="2 running pods")
    await asyncio.to_thread(cluster.restart, "apiserver")
    # The controller manager's and kubelets' watches resume against the new apiserver. A
    # restart that outlasted a leader's renew deadline (3 s for this module's controller
    # manager) made it exit; the launcher starts it again after 10 s, as the kubelet would.
    await scale(client, "resilient", 4)
    await eventually(
        lambda: running(client, "resilient", 4, argv), limit=120, what="4 after the restart"
    )
    # Both nodes are (or are again) Ready and untainted: their kubelets' Leases and status
    # resumed too. Not at once: if the restart outlasted the 5 s grace, the node lifecycle
    # controller marked a node Unknown and its kubelet sets it back on its next report, which
    # 4 running pods (all maybe on the other node) do not wait for.
    await eventually(lambda: nodes_ready(client, 2), what="both nodes Ready after the restart")
    await client.replica_sets.delete("resilient", NS)
    await eventually(
        lambda: asyncio.sleep(0, not processes_running(argv)), what="resilient cleaned up"
    )


async def test_leaders_that_lost_their_lease_in_an_apiserver_outage_are_restarted(
    client: Client, cluster: LocalCluster
) -> None:
    """kube-scheduler and kube-controller-manager exit when they cannot renew their Lease (an
    apiserver outage longer than the renew deadline) and the kubelet starts them again; so
    does the launcher. Without it the cluster was left with neither."""
    if not has_main("scheduler"):
        pytest.skip("no scheduler yet")
    tok = token()
    argv = ["sleep", tok]
    await client.replica_sets.create(sleeper_rs("outlived", 1, tok))
    await eventually(lambda: running(client, "outlived", 1, argv), what="1 running pod")
    seen = len(cluster.events)
    await asyncio.to_thread(cluster.kill, "apiserver", signal.SIGTERM)
    try:

        async def scheduler_gave_up() -> bool:
            exits = [e for e in cluster.events[seen:] if isinstance(e, Exited)]
            return any(e.name == "scheduler" and e.code == 1 for e in exits)

        await eventually(scheduler_gave_up, what="the scheduler's exit on its lost Lease")
    finally:
        await asyncio.to_thread(cluster.start_component, "apiserver")
    await scale(client, "outlived", 3)
    await eventually(
        lambda: running(client, "outlived", 3, argv), limit=120, what="3 from restarted leaders"
    )
    assert cluster.restarts.get("scheduler", 0) >= 1
    await client.replica_sets.delete("outlived", NS)
    await eventually(
        lambda: asyncio.sleep(0, not processes_running(argv)), what="outlived cleaned up"
    )
