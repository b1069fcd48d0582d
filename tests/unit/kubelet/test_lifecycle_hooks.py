"""Lifecycle hooks, termination messages and securityContext users in the process runtime
(real short-lived processes; the kubelet's lifecycle code is shared with the CRI runtime), and
the pure helpers of kubelet/lifecycle.py, kubelet/security.py and kubelet/pullsecrets.py."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path

import pytest
from aiohttp import web

from kubelet.lifecycle import ExecResult, log_tail, run_hook, termination_message
from kubelet.process import ProcessRuntime
from kubelet.pullsecrets import Credential, credentials, image_registry, matching
from kubelet.runtime import (
    RUNNING,
    TERMINATED,
    WAITING,
    ContainerRecord,
    PodRecord,
    Termination,
    build_pod_status,
)
from kubelet.security import effective, verify_run_as_non_root
from tinykube.clock import Clock
from tinykube.v1 import pod_pb2, secret_pb2


def make_pod(uid: str, script: str, policy: str = "Never") -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name = "p"
    pod.metadata.namespace = "default"
    pod.metadata.uid = uid
    pod.spec.restartPolicy = policy
    pod.spec.terminationGracePeriodSeconds = 30
    c = pod.spec.containers.add(name="c", image="x", command=["sh", "-c", script])
    c.terminationMessagePath = "/dev/termination-log"
    c.terminationMessagePolicy = "File"
    return pod


async def settle(rt: ProcessRuntime, pod: pod_pb2.Pod, until: str) -> PodRecord:
    for _ in range(400):
        rec = await rt.sync_pod(pod)
        if "c" in rec.containers and rec.containers["c"].state == until:
            return rec
        await asyncio.sleep(0.02)
    raise AssertionError(f"container never reached {until}: {rec.containers['c']}")


def written(path: Path) -> bool:
    return path.exists() and bool(path.read_text())


async def wait_for(path: Path) -> None:
    for _ in range(500):
        if written(path):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never written")


def runtime(tmp_path: Path) -> ProcessRuntime:
    return ProcessRuntime(tmp_path, clock=Clock(), backoff_initial=10, backoff_max=40)


# ---- termination messages ----


async def test_the_message_file_becomes_the_terminated_message(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    pod = make_pod("m1", 'printf "disk full" > "$TINYKUBE_ROOT/dev/termination-log"; exit 2')
    rec = await settle(rt, pod, TERMINATED)
    term = rec.containers["c"].terminated
    assert term is not None and (term.exit_code, term.message) == (2, "disk full")
    # The file lives in the pod's directory, as kube's <pod dir>/containers/<name>/<id>.
    assert Path(rec.containers["c"].message_file).parent == tmp_path / "pods/m1/containers/c"


async def test_the_message_is_the_last_4096_bytes(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    script = (
        'f="$TINYKUBE_ROOT/dev/termination-log"; i=0; '
        'while [ $i -lt 500 ]; do printf "%09d\\n" $i >> "$f"; i=$((i+1)); done; exit 0'
    )
    rec = await settle(rt, make_pod("m2", script), TERMINATED)
    term = rec.containers["c"].terminated
    assert term is not None and len(term.message) == 4096
    assert term.message.endswith("000000499\n")


async def test_fallback_to_logs_on_error_only_when_failed_and_silent(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    script = 'i=0; while [ $i -lt 100 ]; do echo "line $i"; i=$((i+1)); done; exit 1'
    failed = make_pod("m3", script)
    failed.spec.containers[0].terminationMessagePolicy = "FallbackToLogsOnError"
    rec = await settle(rt, failed, TERMINATED)
    term = rec.containers["c"].terminated
    assert term is not None
    # The last 80 lines (20..99), at most 2048 bytes of their end.
    expected = "".join(f"line {i}\n" for i in range(20, 100))
    assert term.message == expected[-2048:]
    ok = make_pod("m4", "echo fine; exit 0")
    ok.spec.containers[0].terminationMessagePolicy = "FallbackToLogsOnError"
    rec = await settle(rt, ok, TERMINATED)
    assert rec.containers["c"].terminated is not None
    assert rec.containers["c"].terminated.message == ""


def test_termination_message_helpers(tmp_path: Path) -> None:
    missing = str(tmp_path / "gone")
    log = tmp_path / "0.log"
    log.write_text(
        "2026-01-01T00:00:00.000000000Z stdout P par\n"
        "2026-01-01T00:00:00.000000000Z stdout F tial\n"
        "2026-01-01T00:00:00.100000000Z stderr F boom\n"
    )
    assert log_tail(log) == "partial\nboom\n"
    assert termination_message(missing, "FallbackToLogsOnError", 1, "Error", log) == (
        "partial\nboom\n"
    )
    assert termination_message(missing, "FallbackToLogsOnError", 0, "Completed", log) == ""
    assert termination_message(missing, "File", 1, "Error", log) == ""


# ---- preStop ----


async def test_prestop_exec_runs_before_sigterm(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    pod = make_pod(
        "s1",
        "trap 'if [ -f hooked ]; then echo saw-hook > out; fi; exit 0' TERM; "
        "echo up > started; while true; do sleep 0.05; done",
        policy="Always",
    )
    pod.spec.containers[0].lifecycle.preStop.exec.command.extend(["sh", "-c", "echo 1 > hooked"])
    rec = await rt.sync_pod(pod)
    assert rec.containers["c"].state == RUNNING
    pod_dir = tmp_path / "pods/s1"
    await wait_for(pod_dir / "started")
    await rt.kill_pod("s1", 10)
    assert (pod_dir / "out").read_text() == "saw-hook\n"
    term = rec.containers["c"].terminated
    assert term is not None and term.exit_code == 0
    assert [e[1] for e in rec.events][-1] == "Killing"


async def test_a_prestop_hook_longer_than_the_grace_period_is_abandoned(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    pod = make_pod("s2", "echo up > started; exec sleep 60", policy="Always")
    pod.spec.containers[0].lifecycle.preStop.exec.command.extend(["sleep", "60"])
    rec = await rt.sync_pod(pod)
    await wait_for(tmp_path / "pods/s2/started")
    # grace 1 s: the hook is given up after it, the container then gets kube's minimum 2 s.
    await asyncio.wait_for(rt.kill_pod("s2", 1), 30)
    term = rec.containers["c"].terminated
    assert rec.containers["c"].state == TERMINATED and term is not None
    assert term.exit_code == 143  # SIGTERM ended it


async def test_a_failed_prestop_hook_is_an_event_and_the_stop_goes_on(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    pod = make_pod("s3", "echo up > started; exec sleep 60", policy="Always")
    pod.spec.containers[0].lifecycle.preStop.exec.command.extend(["sh", "-c", "exit 7"])
    rec = await rt.sync_pod(pod)
    await wait_for(tmp_path / "pods/s3/started")
    await rt.kill_pod("s3", 10)
    assert ("Warning", "FailedPreStopHook", "PreStopHook failed") in rec.events
    assert rec.containers["c"].state == TERMINATED


async def test_prestop_http_get_reaches_the_pod(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers.get("User-Agent", "")))
        return web.Response(status=500)  # any status: kube only fails on no response

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        rt = runtime(tmp_path)
        pod = make_pod("s4", "echo up > started; exec sleep 60", policy="Always")
        c = pod.spec.containers[0]
        # (A declared port would have to be free on the node, in the process runtime.)
        c.lifecycle.preStop.httpGet.path = "/drain"
        c.lifecycle.preStop.httpGet.port.number_value = port
        rec = await rt.sync_pod(pod)
        await wait_for(tmp_path / "pods/s4/started")
        await rt.kill_pod("s4", 10)
        assert seen == [("/drain", "kube-lifecycle/1.37")]
        assert not [e for e in rec.events if e[1] == "FailedPreStopHook"]
    finally:
        await runner.cleanup()


# ---- postStart ----


async def test_poststart_runs_right_after_the_start(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    pod = make_pod("p1", "exec sleep 60", policy="Always")
    pod.spec.containers[0].lifecycle.postStart.exec.command.extend(["sh", "-c", "echo 1 > hooked"])
    rec = await rt.sync_pod(pod)
    assert rec.containers["c"].state == RUNNING
    assert (tmp_path / "pods/p1/hooked").read_text() == "1\n"
    await rt.kill_pod("p1", 0)


async def test_a_failed_poststart_hook_kills_the_container(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    pod = make_pod("p2", "exec sleep 60", policy="Always")
    pod.spec.containers[0].lifecycle.postStart.exec.command.extend(
        ["sh", "-c", "echo nope; echo bad >&2; exit 3"]
    )
    rec = await rt.sync_pod(pod)
    assert ("Warning", "FailedPostStartHook", "PostStartHook failed") in rec.events
    assert ("Normal", "Killing", "FailedPostStartHook") in rec.events
    rec = await settle(rt, pod, WAITING)
    crec = rec.containers["c"]
    assert crec.waiting_reason == "PostStartHookError"
    assert crec.waiting_message == (
        'Exec lifecycle hook ([sh -c echo nope; echo bad >&2; exit 3]) for Container "c" in Pod '
        "\"p_default(p2)\" failed - error: command 'sh -c echo nope; echo bad >&2; exit 3' "
        'exited with 3: bad\n, message: "nope\\nbad\\n"'
    )
    assert crec.last is not None and crec.next_start > crec.last.finished_at


async def test_hook_handlers_words() -> None:
    pod = make_pod("h", "true")
    container = pod.spec.containers[0]

    async def no_exec(argv: list[str]) -> ExecResult:
        return ExecResult(0, "", "")

    tcp = pod_pb2.LifecycleHandler()
    tcp.tcpSocket.port.number_value = 80
    assert await run_hook(tcp, pod, container, exec_hook=no_exec, pod_ip="127.0.0.1") == (
        "Cannot run handler: invalid handler: tcpSocket"
    )
    http = pod_pb2.LifecycleHandler()
    http.httpGet.path = "/x"
    http.httpGet.port.number_value = 1  # nothing listens on port 1
    message = await run_hook(http, pod, container, exec_hook=no_exec, pod_ip="127.0.0.1")
    assert message == (
        'HTTP lifecycle hook (/x) for Container "c" in Pod "p_default(h)" failed - error: '
        'Get "http://127.0.0.1:1/x": dial tcp 127.0.0.1:1: connect: connection refused'
    )
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    nap = pod_pb2.LifecycleHandler()
    nap.sleep.seconds = 5
    assert await run_hook(nap, pod, container, exec_hook=no_exec, pod_ip="", sleep=sleep) == ""
    assert slept == [5.0]


# ---- securityContext ----


def test_effective_security_context_prefers_the_container() -> None:
    pod = make_pod("x", "true")
    pod.spec.securityContext.runAsUser = 1000
    pod.spec.securityContext.runAsGroup = 3000
    pod.spec.securityContext.supplementalGroups.extend([4000])
    pod.spec.securityContext.fsGroup = 2000
    container = pod.spec.containers[0]
    container.securityContext.runAsUser = 1500
    container.securityContext.allowPrivilegeEscalation = False
    eff = effective(pod, container)
    assert (eff.run_as_user, eff.run_as_group, eff.groups) == (1500, 3000, [4000, 2000])
    assert not eff.allow_privilege_escalation


def test_run_as_non_root_words() -> None:
    pod = make_pod("x", "true")
    container = pod.spec.containers[0]
    container.securityContext.runAsNonRoot = True
    assert verify_run_as_non_root(pod, container, 0, "") == (
        'container has runAsNonRoot and image will run as root (pod: "p_default(x)", container: c)'
    )
    assert verify_run_as_non_root(pod, container, None, "nginx") == (
        "container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user "
        'is non-root (pod: "p_default(x)", container: c)'
    )
    assert verify_run_as_non_root(pod, container, 1000, "") == ""
    container.securityContext.runAsUser = 0
    assert verify_run_as_non_root(pod, container, 1000, "") == (
        'container\'s runAsUser breaks non-root policy (pod: "p_default(x)", container: c)'
    )


async def test_run_as_non_root_with_uid_0_waits_with_a_config_error(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    pod = make_pod("r1", "exit 0")
    pod.spec.containers[0].securityContext.runAsNonRoot = True
    pod.spec.containers[0].securityContext.runAsUser = 0
    rec = await rt.sync_pod(pod)
    crec = rec.containers["c"]
    assert (crec.state, crec.waiting_reason) == (WAITING, "CreateContainerConfigError")
    assert "runAsUser breaks non-root policy" in crec.waiting_message


@pytest.mark.skipif(os.geteuid() != 0, reason="setuid needs a root kubelet")
async def test_run_as_user_and_groups_when_the_kubelet_is_root(tmp_path: Path) -> None:
    rt = runtime(tmp_path)
    # Its working directory (the pod's) is not its own: cd / first; the log shim is root's.
    pod = make_pod("u1", 'cd /; echo "$(id -u) $(id -g) $(id -G)"; exit 0')
    pod.spec.securityContext.runAsUser = 1234
    pod.spec.securityContext.runAsGroup = 2345
    pod.spec.securityContext.supplementalGroups.append(3456)
    rec = await settle(rt, pod, TERMINATED)
    assert rec.containers["c"].terminated is not None
    log = rt.log_path("u1", "c")
    assert log is not None
    assert log.read_text().split()[-4:] == ["1234", "2345", "2345", "3456"]


# ---- imagePullSecrets ----


def docker_secret(auths: dict[str, dict[str, str]]) -> secret_pb2.Secret:
    secret = secret_pb2.Secret(type="kubernetes.io/dockerconfigjson")
    secret.data[".dockerconfigjson"] = json.dumps({"auths": auths}).encode()
    return secret


def test_pull_secret_credentials_and_matching() -> None:
    token = base64.b64encode(b"bob:s3cret").decode()
    creds = credentials(
        [
            docker_secret(
                {
                    "https://127.0.0.1:5000": {"username": "alice", "password": "pw"},
                    "127.0.0.1:5000/team": {"auth": token},
                    "https://index.docker.io/v1/": {"username": "hub", "password": "h"},
                }
            ),
            secret_pb2.Secret(type="Opaque"),
        ]
    )
    assert creds == [
        Credential("127.0.0.1:5000", "alice", "pw"),
        Credential("127.0.0.1:5000/team", "bob", "s3cret"),
        Credential("docker.io", "hub", "h"),
    ]
    assert image_registry("busybox") == ("docker.io", "library/busybox")
    assert image_registry("127.0.0.1:5000/team/app:1") == ("127.0.0.1:5000", "team/app")
    assert [c.username for c in matching(creds, "127.0.0.1:5000/team/app:1")] == ["bob", "alice"]
    assert [c.username for c in matching(creds, "127.0.0.1:5000/other:1")] == ["alice"]
    assert [c.username for c in matching(creds, "nginx:1.27")] == ["hub"]
    assert matching(creds, "quay.io/x/y") == []


def test_a_pods_messages_share_12_kib() -> None:
    pod = make_pod("cap", "true")
    for i in range(3):
        pod.spec.containers.add(name=f"c{i}", image="x")
    rec = PodRecord("cap", "default", "p", 0.0)
    for c in pod.spec.containers:
        rec.containers[c.name] = ContainerRecord(
            c.name,
            state=TERMINATED,
            terminated=Termination(1, "Error", 0.0, 1.0, message="x" * 4096),
        )
    status = build_pod_status(pod, rec, "10.0.0.1", pod_pb2.PodStatus(), 2.0)
    # 4 containers: 3072 bytes each.
    assert [len(cs.state.terminated.message) for cs in status.containerStatuses] == [3072] * 4
