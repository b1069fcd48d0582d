"""The prober: its threshold state machine, its timing on a fake clock (initial delay, period,
startup gating, liveness hold), exec probes against real short processes, port resolution, and
the pod worker turning probe results into containerStatuses, conditions, kills and Events."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from kubelet.envvars import expand
from kubelet.fake import FakeRuntime
from kubelet.pods import PodManager
from kubelet.prober import (
    LIVENESS,
    READINESS,
    STARTUP,
    Outcome,
    ProbeManager,
    ProbeState,
    ProbeTarget,
    resolve_port,
    run_exec,
)
from kubelet.runtime import RUNNING, ContainerRecord, PodRecord
from tests.unit.controller.fakes import FakeClient
from tinykube.clock import Clock, FakeClock
from tinykube.meta import int_or_string_value
from tinykube.v1 import pod_pb2


def probe(**fields: Any) -> pod_pb2.Probe:
    base: dict[str, Any] = {
        "exec": {"command": ["true"]},
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    return json_format.ParseDict({**base, **fields}, pod_pb2.Probe())


# ---- the state machine ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "thresholds", "outcomes", "results"),
    [
        # Readiness starts not ready; one success is enough with successThreshold 1.
        (READINESS, (1, 3), [True], [True]),
        # Three failures in a row to turn unready; a success in between resets the run.
        (READINESS, (1, 3), [True, False, False, True, False, False, False],
         [True, True, True, True, True, True, False]),
        # successThreshold 2: two successes in a row.
        (READINESS, (2, 1), [True, False, True, True], [False, False, False, True]),
        # Liveness starts alive; failureThreshold 2 kills on the second failure, then holds.
        (LIVENESS, (1, 2), [False, False, True, True], [True, False, False, False]),
        # Startup: not started until a success; failures below the threshold change nothing.
        (STARTUP, (1, 3), [False, False, True], [False, False, True]),
        (STARTUP, (1, 2), [False, False, True], [False, False, False]),
    ],
)  # fmt: skip
def test_thresholds(
    kind: str, thresholds: tuple[int, int], outcomes: list[bool], results: list[bool]
) -> None:
    state = ProbeState(kind, probe(successThreshold=thresholds[0], failureThreshold=thresholds[1]))
    seen = []
    for ok in outcomes:
        state.record(ok)
        seen.append(state.result)
    assert seen == results


def test_liveness_failure_holds_until_a_new_instance() -> None:
    state = ProbeState(LIVENESS, probe(failureThreshold=1))
    assert state.record(False) is True
    assert state.on_hold and not state.result
    assert state.record(True) is False and not state.result


# ---- timing on a fake clock -------------------------------------------------------------------


class Script:
    """A probe runner answering from a script per probe kind, recording when it ran."""

    def __init__(self, clock: FakeClock, answers: dict[str, list[bool | None]]) -> None:
        self.clock = clock
        self.answers = answers
        self.calls: list[tuple[str, float]] = []

    async def __call__(self, target: ProbeTarget, p: pod_pb2.Probe) -> Outcome:
        kind = next(k for k, v in KIND_OF.items() if getattr(target.container, v) is p)
        self.calls.append((kind, self.clock.monotonic() - START))
        queue = self.answers[kind]
        ok = queue.pop(0) if len(queue) > 1 else queue[0]
        return Outcome(ok, "" if ok else f"{kind.lower()} says no")


KIND_OF = {LIVENESS: "livenessProbe", READINESS: "readinessProbe", STARTUP: "startupProbe"}
START = 1000.0  # FakeClock's monotonic origin


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def emit(self, obj: Any, type: str, reason: str, message: str) -> None:
        self.events.append((type, reason, message))


def pod_with(**probes: pod_pb2.Probe) -> pod_pb2.Pod:
    pod = pod_pb2.Pod()
    pod.metadata.name, pod.metadata.namespace, pod.metadata.uid = "web", "default", "u1"
    pod.spec.nodeName = "n1"
    pod.spec.restartPolicy = "Always"
    c = pod.spec.containers.add(name="c", image="x", command=["serve"])
    c.ports.add(name="http", containerPort=8080)
    for field, p in probes.items():
        getattr(c, field).CopyFrom(p)
    return pod


def running_record(clock: FakeClock, pid: int = 100, restarts: int = 0) -> PodRecord:
    rec = PodRecord("u1", "default", "web", clock.now().timestamp())
    rec.containers["c"] = ContainerRecord(
        "c", state=RUNNING, pid=pid, restart_count=restarts, started_at=clock.now().timestamp()
    )
    return rec


async def advance(clock: FakeClock, seconds: float, step: float = 0.5) -> None:
    """Let every task run, then move the clock by steps, letting them run after each."""
    for _ in range(60):
        await asyncio.sleep(0)
    for _ in range(round(seconds / step)):
        clock.advance(step)
        for _ in range(60):
            await asyncio.sleep(0)


async def test_initial_delay_then_period_and_change_callbacks() -> None:
    clock = FakeClock()
    changes: list[str] = []
    script = Script(clock, {READINESS: [False, True, True, False, False]})
    events = Recorder()
    manager = ProbeManager(clock=clock, runner=script, events=events, on_change=changes.append)
    pod = pod_with(readinessProbe=probe(initialDelaySeconds=5, periodSeconds=2, failureThreshold=2))
    manager.sync(pod, running_record(clock))
    await advance(clock, 4.5)
    assert script.calls == [] and manager.verdicts("u1") == {"c": (True, False)}
    await advance(clock, 1)  # t=5.5: the first probe ran at t=5, and failed
    assert script.calls == [(READINESS, 5.0)]
    await advance(clock, 2)  # t=7: success -> ready
    assert manager.verdicts("u1") == {"c": (True, True)} and changes == ["u1"]
    await advance(clock, 4)  # t=9 success, t=11 failure (1 of 2): still ready
    assert manager.verdicts("u1")["c"] == (True, True)
    await advance(clock, 2)  # t=13 the second failure in a row: not ready
    assert manager.verdicts("u1")["c"] == (True, False) and changes == ["u1", "u1"]
    assert [t for _, t in script.calls] == [5.0, 7.0, 9.0, 11.0, 13.0]
    assert events.events[0] == ("Warning", "Unhealthy", "Readiness probe failed: readiness says no")
    assert len(events.events) == 3  # one per failed probe
    await manager.close()


async def test_startup_gates_readiness_and_liveness_and_triggers_them() -> None:
    clock = FakeClock()
    script = Script(clock, {STARTUP: [False, False, True], READINESS: [True], LIVENESS: [True]})
    manager = ProbeManager(clock=clock, runner=script)
    pod = pod_with(
        startupProbe=probe(periodSeconds=1, failureThreshold=5),
        readinessProbe=probe(periodSeconds=10),
        livenessProbe=probe(periodSeconds=10),
    )
    manager.sync(pod, running_record(clock))
    await advance(clock, 1.5)
    assert manager.verdicts("u1") == {"c": (False, False)}
    assert {k for k, _ in script.calls} == {STARTUP}
    await advance(clock, 1)  # t=2: startup succeeds; readiness and liveness run at once
    assert manager.verdicts("u1") == {"c": (True, True)}
    assert sorted(script.calls[3:]) == [(LIVENESS, 2.0), (READINESS, 2.0)]
    await advance(clock, 5)
    assert [k for k, _ in script.calls].count(STARTUP) == 3, "startup probed after it succeeded"
    await manager.close()


async def test_liveness_failure_is_reported_once_and_a_restart_starts_afresh() -> None:
    clock = FakeClock()
    script = Script(clock, {LIVENESS: [False], READINESS: [True]})
    manager = ProbeManager(clock=clock, runner=script)
    pod = pod_with(
        livenessProbe=probe(periodSeconds=1, failureThreshold=2),
        readinessProbe=probe(periodSeconds=1),
    )
    manager.sync(pod, running_record(clock))
    await advance(clock, 0.5)
    assert manager.take_failures("u1") == {}
    await advance(clock, 1)  # second failure at t=1
    assert manager.take_failures("u1") == {"c": "liveness"}
    assert manager.take_failures("u1") == {}, "one kill per instance"
    await advance(clock, 3)
    assert [k for k, _ in script.calls].count(LIVENESS) == 2, "probed a container being killed"
    # The restarted instance (another pid, restart count 1) starts from the initial results.
    manager.sync(pod, running_record(clock, pid=101, restarts=1))
    assert manager.take_failures("u1") == {} and manager.verdicts("u1") == {"c": (True, False)}
    await manager.close()


async def test_startup_failure_is_a_kill() -> None:
    clock = FakeClock()
    script = Script(clock, {STARTUP: [False]})
    manager = ProbeManager(clock=clock, runner=script)
    manager.sync(pod_with(startupProbe=probe(periodSeconds=1, failureThreshold=3)),
                 running_record(clock))  # fmt: skip
    await advance(clock, 2.5)
    assert manager.take_failures("u1") == {"c": "startup"}
    await manager.close()


async def test_an_errored_probe_is_an_event_and_no_result() -> None:
    clock = FakeClock()
    events = Recorder()

    async def errors(target: ProbeTarget, p: pod_pb2.Probe) -> Outcome:
        return Outcome(None, 'strconv.Atoi: parsing "web": invalid syntax')

    manager = ProbeManager(clock=clock, runner=errors, events=events)
    manager.sync(pod_with(livenessProbe=probe(failureThreshold=1)), running_record(clock))
    await advance(clock, 0.5)
    assert manager.take_failures("u1") == {}
    assert events.events == [
        (
            "Warning",
            "Unhealthy",
            'Liveness probe errored and resulted in unknown state: strconv.Atoi: parsing "web": '
            "invalid syntax",
        )
    ]
    await manager.close()


# ---- handlers that need no sockets ------------------------------------------------------------


@pytest.mark.parametrize(
    ("port", "expected"),
    [
        (8080, 8080),
        ("http", 8080),
        ("9090", 9090),  # not a port name: read as a number, as the kubelet does
        ("web", ValueError('strconv.Atoi: parsing "web": invalid syntax')),
        (0, ValueError("invalid port number: 0")),
    ],
)
def test_resolve_port(port: int | str, expected: int | Exception) -> None:
    container = pod_with().spec.containers[0]
    if isinstance(expected, Exception):
        with pytest.raises(ValueError, match=str(expected).replace('"', ".")):
            resolve_port(int_or_string_value(port), container)
    else:
        assert resolve_port(int_or_string_value(port), container) == expected


def exec_target(tmp_path: Path, **env: str) -> ProbeTarget:
    return ProbeTarget(pod_with(), pod_with().spec.containers[0], "127.0.0.1",
                       {"PATH": "/usr/bin:/bin", **env}, str(tmp_path))  # fmt: skip


@pytest.mark.parametrize(
    ("command", "ok", "output"),
    [
        (["true"], True, ""),
        (["sh", "-c", "echo not yet; exit 1"], False, "not yet\n"),
        (["sh", "-c", 'echo "$GREETING from $(pwd)" >&2'], True, "hello from {cwd}\n"),
        (["no-such-command"], False, 'exec: "no-such-command": executable file not found in $PATH'),
    ],
)  # fmt: skip
async def test_exec_probe(tmp_path: Path, command: list[str], ok: bool, output: str) -> None:
    target = exec_target(tmp_path, GREETING="hello")
    outcome = await run_exec(target, probe(exec={"command": command}))
    assert outcome == Outcome(ok, output.format(cwd=tmp_path))


async def test_exec_probe_is_killed_at_its_timeout(tmp_path: Path) -> None:
    marker = tmp_path / "survived"
    began = time.monotonic()
    outcome = await run_exec(
        exec_target(tmp_path),
        probe(exec={"command": ["sh", "-c", f"sleep 3; touch {marker}"]}, timeoutSeconds=1),
    )
    assert outcome.ok is False and "timed out" in outcome.output
    assert time.monotonic() - began < 2.5
    await asyncio.sleep(2.5)  # the command would have finished by now had it not been killed
    assert not marker.exists()


# ---- the pod worker -------------------------------------------------------------------------


class RestartingRuntime(FakeRuntime):
    """A fake runtime whose containers can be killed (and come back as a new instance)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.kills: list[tuple[str, float, str]] = []

    async def sync_pod(self, pod: pod_pb2.Pod) -> PodRecord:
        rec = await super().sync_pod(pod)
        for crec in rec.containers.values():
            crec.pid = crec.pid or 100
        return rec

    async def kill_container(self, uid: str, name: str, grace_seconds: float, why: str) -> None:
        self.kills.append((name, grace_seconds, why))
        rec = self._pods[uid]
        crec = rec.containers[name]
        crec.pid += 1
        crec.restart_count += 1
        rec.events.append(("Normal", "Killing", why))


async def settle(clock: FakeClock, check: Any, limit: float = 30.0) -> None:
    for _ in range(int(limit / 0.5)):
        if check():
            return
        await advance(clock, 0.5)
    raise AssertionError("condition never held")


async def test_pod_worker_reports_readiness_and_restarts_on_liveness_failure() -> None:
    clock = FakeClock()
    client = FakeClient(clock)
    runtime = RestartingRuntime(clock)
    events = Recorder()
    answers: dict[str, list[bool | None]] = {READINESS: [False, False, True], LIVENESS: [True]}
    script = Script(clock, answers)
    manager: PodManager
    probes = ProbeManager(clock=clock, runner=script, events=events,
                          on_change=lambda uid: manager.wake(uid))  # fmt: skip
    manager = PodManager(client, runtime, {"n1"}, lambda _n: "10.0.0.5", clock=clock,
                         events=events, probes=probes)  # fmt: skip
    pod = pod_with(
        readinessProbe=probe(periodSeconds=1),
        livenessProbe=probe(periodSeconds=1, failureThreshold=1, terminationGracePeriodSeconds=4),
    )
    created = await client.pods.create(pod)
    manager.on_add(created)

    def status() -> pod_pb2.PodStatus:
        return client.pods.objects["default/web"].status

    def conditions() -> dict[str, tuple[str, str, str]]:
        return {c.type: (c.status, c.reason, c.message) for c in status().conditions}

    await settle(clock, lambda: status().phase == "Running")
    assert conditions()["ContainersReady"] == (
        "False",
        "ContainersNotReady",
        "containers with unready status: [c]",
    )
    assert conditions()["Ready"] == conditions()["ContainersReady"]
    assert status().containerStatuses[0].started and not status().containerStatuses[0].ready
    writes = sum(1 for call, _ in client.pods.calls if call == "update_status")
    await settle(clock, lambda: conditions()["Ready"][0] == "True")
    assert status().containerStatuses[0].ready
    assert sum(1 for call, _ in client.pods.calls if call == "update_status") == writes + 1
    await advance(clock, 5)  # steady and ready: no more status writes
    assert sum(1 for call, _ in client.pods.calls if call == "update_status") == writes + 1

    answers[LIVENESS] = [False, True]  # one failure, then the new instance is healthy
    await settle(clock, lambda: status().containerStatuses[0].restartCount == 1)
    assert runtime.kills == [("c", 4.0, "Container c failed liveness probe, will be restarted")]
    assert ("Normal", "Killing", "Container c failed liveness probe, will be restarted") in (
        events.events
    )
    assert ("Warning", "Unhealthy", "Liveness probe failed: liveness says no") in events.events
    await settle(clock, lambda: status().containerStatuses[0].ready)
    await manager.stop()


def test_status_without_probes_is_ready_when_running() -> None:
    from kubelet.runtime import build_pod_status

    clock = FakeClock()
    pod = pod_with()
    rec = running_record(clock)
    ready = build_pod_status(pod, rec, "h", pod_pb2.PodStatus(), 0.0, probes={})
    assert ready.containerStatuses[0].ready and ready.containerStatuses[0].started
    gated = build_pod_status(pod, rec, "h", pod_pb2.PodStatus(), 0.0, probes={"c": (False, True)})
    assert not gated.containerStatuses[0].started and not gated.containerStatuses[0].ready


# ---- the process runtime's kill of one container ---------------------------------------------


@pytest.mark.parametrize(("policy", "state"), [("Always", "waiting"), ("Never", "terminated")])
async def test_process_runtime_kills_one_container(tmp_path: Path, policy: str, state: str) -> None:
    from kubelet.process import ProcessRuntime
    from tests.unit.kubelet.test_process_runtime import make_pod, settle

    # Real time: the kill waits (up to the grace period) for a real process to exit.
    rt = ProcessRuntime(tmp_path, clock=Clock(), backoff_initial=10, backoff_max=40)
    p = make_pod("u9", "sleep", "60", policy=policy)
    rec = await settle(rt, p, RUNNING)
    rec.events.clear()
    why = "Container c failed liveness probe, will be restarted"
    await rt.kill_container("u9", "c", 5.0, why)
    assert rec.events == [("Normal", "Killing", why)]
    rec = await settle(rt, p, state)
    term = rec.containers["c"].last if state == "waiting" else rec.containers["c"].terminated
    assert term is not None and (term.exit_code, term.signal, term.reason) == (143, 15, "Error")
    await rt.kill_pod("u9", 0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(PORT)", "8080"),
        ("curl localhost:$(PORT)/$(PATH_)", "curl localhost:8080/$(PATH_)"),  # unknown: kept
        ("$$(PORT)", "$(PORT)"),  # escaped
        ("cost $$5", "cost $5"),
        ("$(PORT", "$(PORT"),  # not closed
        ("$HOME and $", "$HOME and $"),  # shell syntax is the shell's
    ],
)
def test_exec_command_expansion(text: str, expected: str) -> None:
    assert expand(text, {"PORT": "8080"}) == expected


async def test_exec_probe_expands_the_containers_env(tmp_path: Path) -> None:
    target = exec_target(tmp_path)
    target.container.env.add(name="WANT", value="yes")
    outcome = await run_exec(target, probe(exec={"command": ["echo", "$(WANT) $(NOPE)"]}))
    assert outcome == Outcome(True, "yes $(NOPE)\n")
