"""The process runtime against real short-lived local processes (no sockets; fake clock for
back-off, real time only for process exits)."""

from __future__ import annotations

import asyncio
import os
import signal
from itertools import count
from pathlib import Path

import pytest

from kubelet.crilog import LogFormatError, parse_record, writer_active
from kubelet.envvars import EnvSources
from kubelet.process import LOG_DRAIN_WAIT, ProcessRuntime, live_group_members, proc_start_time
from kubelet.runtime import RUNNING, TERMINATED, WAITING, PodRecord, build_pod_status
from tests.unit.controller.fakes import FakeResource
from tinykube.clock import Clock, FakeClock
from tinykube.v1 import configmap_pb2, pod_pb2, secret_pb2


def make_pod(uid: str, *command: str, policy: str = "Always", name: str = "p") -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name = name
    pod.metadata.namespace = "default"
    pod.metadata.uid = uid
    pod.spec.restartPolicy = policy
    pod.spec.containers.add(name="c", image="x", command=list(command))
    return pod


async def settle(rt: ProcessRuntime, pod: pod_pb2.Pod, until: str) -> PodRecord:
    """sync_pod until the container reaches state `until` (real time: a process must exit)."""
    for _ in range(200):
        rec = await rt.sync_pod(pod)
        if "c" in rec.containers and rec.containers["c"].state == until:
            return rec
        await asyncio.sleep(0.02)
    raise AssertionError(f"container never reached {until}: {rec.containers['c']}")


def records(path: Path | None) -> list[tuple[str, str]]:
    """(stream, text) of each CRI record in a log file; every line must be a record."""
    assert path is not None
    out = []
    for line in path.read_bytes().splitlines(keepends=True):
        try:
            rec = parse_record(line)
        except LogFormatError as exc:
            raise AssertionError(f"not a CRI record: {line!r}") from exc
        out.append((rec.stream, rec.text.decode()))
    return out


def text(path: Path | None) -> str:
    return "".join(t for _, t in records(path))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def runtime(tmp_path: Path, clock: Clock) -> ProcessRuntime:
    return ProcessRuntime(tmp_path, clock=clock, backoff_initial=10, backoff_max=40)


async def test_exit_code_and_log_with_restart_policy_never(
    tmp_path: Path, clock: FakeClock
) -> None:
    rt = runtime(tmp_path, clock)
    pod = make_pod("u1", "sh", "-c", "echo out; echo err >&2; exit 3", policy="Never")
    rec = await settle(rt, pod, TERMINATED)
    term = rec.containers["c"].terminated
    assert term is not None and (term.exit_code, term.reason) == (3, "Error")
    assert rec.final_phase == "Failed"
    # stdout and stderr are separate streams (their relative order is the shim's reading order).
    assert sorted(records(rt.log_path("u1", "c"))) == [("stderr", "err\n"), ("stdout", "out\n")]
    status = build_pod_status(pod, rec, "10.0.0.1", pod_pb2.PodStatus(), 0.0)
    assert status.phase == "Failed"
    assert status.containerStatuses[0].state.terminated.exitCode == 3
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "PodCompleted")


async def test_on_failure_success_completes_the_pod(tmp_path: Path, clock: FakeClock) -> None:
    rt = runtime(tmp_path, clock)
    rec = await settle(rt, make_pod("u2", "true", policy="OnFailure"), TERMINATED)
    assert rec.final_phase == "Succeeded"
    assert rec.containers["c"].restart_count == 0


async def test_crash_loop_backs_off_and_doubles(tmp_path: Path, clock: FakeClock) -> None:
    rt = runtime(tmp_path, clock)
    pod = make_pod("u3", "sh", "-c", "exit 2")
    rec = await settle(rt, pod, WAITING)
    c = rec.containers["c"]
    assert c.waiting_reason == "CrashLoopBackOff"
    assert c.waiting_message == "back-off 10s restarting failed container=c pod=p_default(u3)"
    assert c.last is not None and c.last.exit_code == 2
    assert [(t, r) for t, r, _ in rec.events] == [
        ("Normal", "Pulled"),
        ("Normal", "Created"),
        ("Normal", "Started"),
        ("Warning", "BackOff"),
    ]
    assert rec.events[3][2] == "Back-off restarting failed container c in pod p_default(u3)"
    # Not before the back-off has passed.
    clock.advance(9)
    assert (await rt.sync_pod(pod)).containers["c"].state == WAITING
    clock.advance(1.5)
    rec = await rt.sync_pod(pod)
    assert rec.containers["c"].restart_count == 1
    rec = await settle(rt, pod, WAITING)
    assert "back-off 20s" in rec.containers["c"].waiting_message
    status = build_pod_status(pod, rec, "h", pod_pb2.PodStatus(), 0.0)
    assert status.phase == "Running"
    assert status.containerStatuses[0].restartCount == 1
    assert status.containerStatuses[0].lastState.terminated.exitCode == 2


async def test_command_that_cannot_start_is_a_waiting_reason(
    tmp_path: Path, clock: FakeClock
) -> None:
    rt = runtime(tmp_path, clock)
    pod = make_pod("u4", "definitely-not-a-command-tinykube")
    rec = await rt.sync_pod(pod)
    c = rec.containers["c"]
    assert (c.state, c.waiting_reason) == (WAITING, "RunContainerError")
    assert 'exec: "definitely-not-a-command-tinykube": executable file not found' in (
        c.waiting_message
    )
    pod2 = make_pod("u5", "/nonexistent/bin")
    c2 = (await rt.sync_pod(pod2)).containers["c"]
    assert "No such file or directory" in c2.waiting_message
    status = build_pod_status(pod, rec, "h", pod_pb2.PodStatus(), 0.0)
    assert status.phase == "Pending"
    assert status.containerStatuses[0].state.waiting.reason == "RunContainerError"


async def test_restarted_runtime_adopts_running_processes(tmp_path: Path) -> None:
    first = ProcessRuntime(tmp_path, clock=Clock())
    pod = make_pod("u6", "sleep", "30")
    rec = await first.sync_pod(pod)
    pid = rec.containers["c"].pid
    assert rec.containers["c"].state == RUNNING and proc_start_time(pid)

    second = ProcessRuntime(tmp_path, clock=Clock())
    assert second.load() == ["u6"]
    rec2 = await second.sync_pod(pod)
    assert rec2.containers["c"].pid == pid, "a duplicate process was started"
    assert rec2.containers["c"].state == RUNNING

    await second.kill_pod("u6", 1.0)
    assert proc_start_time(pid) is None
    first._children.pop(pid).wait()  # reap: it was the first runtime's child
    second.forget("u6")
    assert not (tmp_path / "pods" / "u6").exists()


@pytest.mark.parametrize(
    ("policy", "state", "restarts"),
    [
        # Lost while no kubelet ran (a reboot, `tinykube up` stopped): started again at once.
        ("Always", RUNNING, 1),
        ("OnFailure", RUNNING, 1),  # reported as exit code 137, a failure
        ("Never", TERMINATED, 0),
    ],
)
async def test_containers_gone_at_kubelet_start_restart_at_once(
    tmp_path: Path, clock: FakeClock, policy: str, state: str, restarts: int
) -> None:
    first = runtime(tmp_path, clock)
    pod = make_pod("g1", "sleep", "30", policy=policy)
    rec = await first.sync_pod(pod)
    child = first._children.pop(rec.containers["c"].pid)
    child.kill()
    child.wait()

    second = runtime(tmp_path, clock)
    second.load()
    rec2 = await second.sync_pod(pod)  # the same instant: no back-off wait
    crec = rec2.containers["c"]
    assert (crec.state, crec.restart_count) == (state, restarts)
    assert crec.waiting_reason != "CrashLoopBackOff"
    assert (crec.last or crec.terminated) is not None
    assert (crec.last or crec.terminated).reason == "ContainerStatusUnknown"  # type: ignore[union-attr]
    if state == RUNNING:
        assert crec.backoff_exp == 0, "a lost container is no crash: no back-off to grow"
        assert not any(reason == "BackOff" for _, reason, _ in rec2.events)
        # A crash after that backs off as ever.
        second._children[crec.pid].kill()
        rec3 = await settle(second, pod, WAITING)
        assert rec3.containers["c"].waiting_reason == "CrashLoopBackOff"
        await second.kill_pod("g1", 1.0)


async def test_kill_escalates_to_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    rt = ProcessRuntime(tmp_path, clock=Clock())
    pod = make_pod("u7", "sh", "-c", "trap '' TERM; echo ready; while true; do sleep 0.05; done")
    rec = await rt.sync_pod(pod)
    pid = rec.containers["c"].pid
    log_path = rt.log_path("u7", "c")
    assert log_path is not None
    for _ in range(100):
        if log_path.exists() and log_path.read_bytes():
            break
        await asyncio.sleep(0.02)
    await rt.kill_pod("u7", 0.3)
    assert proc_start_time(pid) is None
    assert not live_group_members(pid), "a process of the container survived"


def with_init(uid: str, init_cmd: list[str], policy: str = "Always") -> pod_pb2.Pod:
    pod = make_pod(uid, "sleep", "30", policy=policy)
    pod.spec.initContainers.add(name="init", image="x", command=init_cmd)
    return pod


async def test_init_containers_run_to_success_before_the_app(
    tmp_path: Path, clock: FakeClock
) -> None:
    rt = runtime(tmp_path, clock)
    pod = with_init("i1", ["sh", "-c", "echo prepared > ready.txt"])
    rec = await rt.sync_pod(pod)
    assert rec.containers == {}, "app container started before its init container finished"
    status = build_pod_status(pod, rec, "h", pod_pb2.PodStatus(), 0.0)
    assert status.phase == "Pending"
    init = next(c for c in status.conditions if c.type == "Initialized")
    assert (init.status, init.reason) == ("False", "ContainersNotInitialized")
    assert status.containerStatuses[0].state.waiting.reason == "PodInitializing"
    rec = await settle(rt, pod, RUNNING)
    assert (tmp_path / "pods" / "i1" / "ready.txt").read_text() == "prepared\n"
    status = build_pod_status(pod, rec, "h", status, 1.0)
    assert status.phase == "Running"
    assert status.initContainerStatuses[0].state.terminated.reason == "Completed"
    assert {c.type: c.status for c in status.conditions}["Initialized"] == "True"
    await rt.kill_pod("i1", 0)


async def test_failing_init_container_fails_the_pod_under_never(
    tmp_path: Path, clock: FakeClock
) -> None:
    rt = runtime(tmp_path, clock)
    pod = with_init("i2", ["sh", "-c", "exit 1"], policy="Never")
    for _ in range(200):
        rec = await rt.sync_pod(pod)
        if rec.final_phase:
            break
        await asyncio.sleep(0.02)
    assert rec.final_phase == "Failed"
    assert rec.containers == {}


async def test_failing_init_container_is_retried_with_backoff(
    tmp_path: Path, clock: FakeClock
) -> None:
    rt = runtime(tmp_path, clock)
    pod = with_init("i3", ["sh", "-c", "exit 1"])
    for _ in range(200):
        rec = await rt.sync_pod(pod)
        if rec.init_containers["init"].waiting_reason == "CrashLoopBackOff":
            break
        await asyncio.sleep(0.02)
    status = build_pod_status(pod, rec, "h", pod_pb2.PodStatus(), 0.0)
    assert status.phase == "Pending"
    assert status.initContainerStatuses[0].lastState.terminated.exitCode == 1
    assert rec.containers == {}


async def test_environment_and_working_directory(tmp_path: Path, clock: FakeClock) -> None:
    rt = runtime(tmp_path, clock)
    pod = make_pod("e1", "sh", "-c", 'echo "$GREETING $HOSTNAME $PWD" "${SECRET:-unset}"')
    pod.spec.restartPolicy = "Never"
    pod.spec.containers[0].env.add(name="GREETING", value="hi")
    await settle(rt, pod, TERMINATED)
    # The kubelet's own environment does not leak into containers.
    assert text(rt.log_path("e1", "c")) == f"hi p {tmp_path / 'pods' / 'e1'} unset\n"


# ---- logs per container instance, through the log shim ----

# Each instance prints its number (kept in a file in the pod's directory); 0 and 1 crash.
COUNTING = (
    'n=$(cat n 2>/dev/null || echo 0); echo "run $n"; echo $((n + 1)) > n; '
    '[ "$n" -ge 2 ] && exec sleep 30; exit 1'
)


async def test_each_instance_has_its_own_log_and_only_two_are_kept(
    tmp_path: Path, clock: FakeClock
) -> None:
    rt = runtime(tmp_path, clock)
    pod = make_pod("l1", "sh", "-c", COUNTING)
    await settle(rt, pod, WAITING)
    # Crash-looping: the crashed instance is both the current and the previous log.
    assert rt.log_path("l1", "c") == rt.log_path("l1", "c", previous=True)
    assert text(rt.log_path("l1", "c")) == "run 0\n"
    clock.advance(11)
    await rt.sync_pod(pod)
    await settle(rt, pod, WAITING)
    assert text(rt.log_path("l1", "c", previous=True)) == "run 1\n"
    clock.advance(21)
    rec = await rt.sync_pod(pod)
    assert (rec.containers["c"].state, rec.containers["c"].restart_count) == (RUNNING, 2)
    for _ in range(200):
        if text(rt.log_path("l1", "c")):
            break
        await asyncio.sleep(0.02)
    cases = [(False, "run 2\n", "2.log"), (True, "run 1\n", "1.log")]
    for previous, want, name in cases:
        path = rt.log_path("l1", "c", previous=previous)
        assert path is not None and path.name == name
        assert text(path) == want, previous
    logs = tmp_path / "pods" / "l1" / "logs" / "c"
    assert sorted(p.name for p in logs.iterdir()) == ["1.log", "2.log"], "instance 0 was kept"
    await rt.kill_pod("l1", 0)


async def test_no_previous_instance(tmp_path: Path, clock: FakeClock) -> None:
    rt = runtime(tmp_path, clock)
    pod = make_pod("l2", "sleep", "30")
    await rt.sync_pod(pod)
    assert rt.log_path("l2", "c", previous=True) is None
    assert rt.log_path("nope", "c", previous=True) is None
    path = rt.log_path("l2", "c")
    assert path is not None and path.name == "0.log"
    await rt.kill_pod("l2", 0)


async def test_an_exit_is_reported_once_the_log_is_complete(
    tmp_path: Path, clock: FakeClock
) -> None:
    rt = runtime(tmp_path, clock)
    pod = make_pod("l3", "seq", "1", "30000", policy="Never")
    await settle(rt, pod, TERMINATED)
    got = records(rt.log_path("l3", "c"))
    assert len(got) == 30000 and got[-1] == ("stdout", "30000\n")


async def test_a_background_child_holding_the_output_delays_the_exit_at_most_briefly(
    tmp_path: Path, clock: FakeClock
) -> None:
    rt = runtime(tmp_path, clock)
    # The shell exits at once; its background sleep keeps the stdout pipe open.
    pod = make_pod("l4", "sh", "-c", "sleep 30 & echo started", policy="Never")
    rec = await rt.sync_pod(pod)
    pid = rec.containers["c"].pid
    try:
        for _ in range(100):
            rec = await rt.sync_pod(pod)
            await asyncio.sleep(0.02)
        assert rec.containers["c"].state == RUNNING, "reported before the log was drained"
        assert writer_active(rt.log_path("l4", "c"))  # type: ignore[arg-type]
        clock.advance(LOG_DRAIN_WAIT + 0.1)
        rec = await rt.sync_pod(pod)
        term = rec.containers["c"].terminated
        assert term is not None and term.exit_code == 0
    finally:
        os.killpg(pid, signal.SIGKILL)


async def test_output_continues_into_the_same_file_after_a_kubelet_restart(
    tmp_path: Path,
) -> None:
    first = ProcessRuntime(tmp_path, clock=Clock())
    script = "echo one; while [ ! -e go ]; do sleep 0.02; done; echo two; exec sleep 30"
    pod = make_pod("l5", "sh", "-c", script)
    rec = await first.sync_pod(pod)
    pid = rec.containers["c"].pid
    (shim,) = first._shims
    # The shim is in a session of its own: the container's group signals never reach it.
    assert os.getsid(shim.pid) == shim.pid != os.getpgid(pid)

    second = ProcessRuntime(tmp_path, clock=Clock())
    second.load()
    path = second.log_path("l5", "c")
    assert path == first.log_path("l5", "c")
    (tmp_path / "pods" / "l5" / "go").touch()
    for _ in range(200):
        if text(path) == "one\ntwo\n":
            break
        await asyncio.sleep(0.02)
    assert text(path) == "one\ntwo\n"
    await second.kill_pod("l5", 1.0)
    first._children.pop(pid).wait()
    # With the container gone, its shim reads EOF and exits on its own, releasing the log.
    await asyncio.wait_for(asyncio.to_thread(shim.wait), 10)
    assert not writer_active(path)  # type: ignore[arg-type]


# ---- the container's environment (kubelet/envvars.py) -----------------------------------------


def config_map(name: str, data: dict[str, str]) -> configmap_pb2.ConfigMap:
    cm = configmap_pb2.ConfigMap(data=data)
    cm.metadata.name, cm.metadata.namespace = name, "default"
    return cm


class ConfigMapsOnly:
    def __init__(self, clock: FakeClock) -> None:
        self.config_maps = FakeResource("ConfigMap", configmap_pb2.ConfigMap, clock, count(1))
        self.secrets = FakeResource("Secret", secret_pb2.Secret, clock, count(1))


async def test_the_process_gets_its_resolved_env_and_expanded_args(
    tmp_path: Path, clock: FakeClock
) -> None:
    api = ConfigMapsOnly(clock)
    await api.config_maps.create(config_map("cfg", {"COLOR": "blue"}))
    rt = ProcessRuntime(tmp_path, clock=clock, node_ip="10.0.0.5", env_sources=EnvSources(api=api))
    pod = make_pod("u-env", "sh", "-c", 'echo "$COLOR|$(COLOR)|$NAME|$GREETING"', policy="Never")
    c = pod.spec.containers[0]
    c.envFrom.add().configMapRef.name = "cfg"
    c.env.add(name="NAME").valueFrom.fieldRef.fieldPath = "metadata.name"
    c.env.add(name="GREETING", value="hi $(NAME)")
    await settle(rt, pod, TERMINATED)
    assert text(rt.log_path("u-env", "c")) == "blue|blue|p|hi p\n"


async def test_a_missing_config_map_keeps_the_container_waiting_until_it_exists(
    tmp_path: Path, clock: FakeClock
) -> None:
    api = ConfigMapsOnly(clock)
    rt = ProcessRuntime(tmp_path, clock=clock, backoff_initial=10, env_sources=EnvSources(api=api))
    pod = make_pod("u-cm", "sh", "-c", "echo $(COLOR)", policy="Never")
    pod.spec.containers[0].env.add(name="COLOR").valueFrom.configMapKeyRef.CopyFrom(
        pod_pb2.ConfigMapKeySelector(name="cfg", key="color")
    )
    rec = await rt.sync_pod(pod)
    crec = rec.containers["c"]
    assert (crec.state, crec.waiting_reason, crec.waiting_message, crec.pid) == (
        WAITING,
        "CreateContainerConfigError",
        'configmap "cfg" not found',
        0,
    )
    assert rec.events == [("Warning", "Failed", 'Error: configmap "cfg" not found')]
    status = build_pod_status(pod, rec, "10.0.0.1", pod_pb2.PodStatus(), 0.0)
    assert status.phase == "Pending"
    assert status.containerStatuses[0].state.waiting.message == 'configmap "cfg" not found'

    await api.config_maps.create(config_map("cfg", {"other": "x"}))
    clock.advance(10)
    rec = await rt.sync_pod(pod)
    assert rec.containers["c"].waiting_message == "couldn't find key color in ConfigMap default/cfg"
    assert rec.containers["c"].restart_count == 0

    api.config_maps.objects["default/cfg"].data["color"] = "green"
    rec = await rt.sync_pod(pod)
    assert rec.containers["c"].state == WAITING, "retried before the back-off"
    clock.advance(10)
    await settle(rt, pod, TERMINATED)
    assert text(rt.log_path("u-cm", "c")) == "green\n"


async def test_a_nul_byte_in_a_value_is_a_run_error_not_a_crash(
    tmp_path: Path, clock: FakeClock
) -> None:
    api = ConfigMapsOnly(clock)
    secret = secret_pb2.Secret(data={"k": b"a\x00b"})
    secret.metadata.name, secret.metadata.namespace = "s", "default"
    await api.secrets.create(secret)
    rt = ProcessRuntime(tmp_path, clock=clock, env_sources=EnvSources(api=api))
    pod = make_pod("u-nul", "true")
    pod.spec.containers[0].envFrom.add().secretRef.name = "s"
    rec = await rt.sync_pod(pod)
    crec = rec.containers["c"]
    assert crec.state == WAITING and crec.waiting_reason == "RunContainerError"
    assert "embedded null byte" in crec.waiting_message


async def test_a_tty_container_runs_on_a_terminal_of_its_own(
    tmp_path: Path, clock: FakeClock
) -> None:
    """`tty: true`: stdin, stdout and stderr are a pseudo-terminal's slave (its controlling
    terminal); its output, stderr included, is the log's stdout; the kubelet keeps the master
    as its stdin, and stdinOnce's end is the terminal's end of file."""
    rt = runtime(tmp_path, clock)
    pod = make_pod("tty1", "sh", "-c", "tty; echo err >&2; read x; echo got $x", policy="Never")
    pod.spec.containers[0].tty = True
    pod.spec.containers[0].stdin = True
    await settle(rt, pod, RUNNING)
    fd = rt.stdin_pipes.writer("tty1", "c")
    assert fd >= 0 and os.isatty(fd)
    os.write(fd, b"hello\r")  # a terminal's Enter: the line discipline makes it a newline
    os.close(fd)
    rec = await settle(rt, pod, TERMINATED)
    assert rec.containers["c"].terminated is not None
    assert rec.containers["c"].terminated.exit_code == 0
    recs = records(rt.log_path("tty1", "c"))
    assert {stream for stream, _ in recs} == {"stdout"}
    out = "".join(t for _, t in recs)
    assert "/dev/pts/" in out and "err" in out and "got hello" in out, out


async def test_a_tty_containers_stdin_once_ends_with_end_of_file(
    tmp_path: Path, clock: FakeClock
) -> None:
    rt = runtime(tmp_path, clock)
    pod = make_pod("tty2", "sh", "-c", "cat; echo done", policy="Never")
    pod.spec.containers[0].tty = True
    pod.spec.containers[0].stdin = True
    await settle(rt, pod, RUNNING)
    rt.stdin_pipes.close("tty2", "c")  # what the first attach's end does for stdinOnce
    await settle(rt, pod, TERMINATED)
    assert "done" in text(rt.log_path("tty2", "c"))


async def test_an_ephemeral_container_runs_once_with_its_targets_environment(
    tmp_path: Path, clock: FakeClock
) -> None:
    rt = runtime(tmp_path, clock)
    pod = make_pod("eph1", "sleep", "60")
    pod.spec.containers[0].env.add(name="GREETING", value="hi")
    await settle(rt, pod, RUNNING)
    pod.spec.ephemeralContainers.add(
        name="dbg", image="busybox", command=["sh", "-c", "echo eph $GREETING; exit 2"],
        targetContainerName="c",
    )  # fmt: skip
    for _ in range(200):
        rec = await rt.sync_pod(pod)
        crec = rec.ephemeral_containers.get("dbg")
        if crec is not None and crec.state == TERMINATED:
            break
        await asyncio.sleep(0.02)
    assert crec is not None and crec.terminated is not None
    assert crec.terminated.exit_code == 2
    clock.advance(3600)
    for _ in range(5):  # never restarted, whatever the pod's restartPolicy (Always)
        rec = await rt.sync_pod(pod)
    assert rec.ephemeral_containers["dbg"].state == TERMINATED
    assert rec.ephemeral_containers["dbg"].restart_count == 0
    assert text(rt.log_path("eph1", "dbg")) == "eph hi\n"
    status = build_pod_status(pod, rec, "10.0.0.1", pod_pb2.PodStatus(), 0.0)
    assert [s.name for s in status.ephemeralContainerStatuses] == ["dbg"]
    assert status.ephemeralContainerStatuses[0].state.terminated.exitCode == 2
    assert status.phase == "Running"
    # The kubelet's state keeps it across a restart.
    again = runtime(tmp_path, clock)
    again.load()
    restored = again.record("eph1")
    assert restored is not None
    assert restored.ephemeral_containers["dbg"].state == TERMINATED
    await rt.kill_pod("eph1", 0)
