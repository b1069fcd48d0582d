"""Pure pieces of the scheduler process: flags -> Settings, the PodScheduled condition."""

from __future__ import annotations

from scheduler.__main__ import parse_args
from scheduler.app import _set_condition
from tests.unit.scheduler.builders import PodBuilder
from tinykube.clock import FakeClock


def test_flags() -> None:
    s = parse_args(
        ["--apiserver", "10.0.0.1:6443", "--bind-address", "127.0.0.1", "--port", "0",
         "--leader-elect", "false", "--lease-duration", "4", "--renew-deadline", "3",
         "--retry-period", "1"]
    )  # fmt: skip
    assert s.apiserver == "10.0.0.1:6443"
    assert s.listen == "127.0.0.1:0"
    assert s.leader_elect is False
    assert (s.lease_duration, s.renew_deadline, s.retry_period) == (4.0, 3.0, 1.0)
    assert s.lease_namespace == "kube-system" and s.lease_name == "tinykube-scheduler"


def test_unschedulable_condition_written_once_per_message() -> None:
    clock = FakeClock()
    pod = PodBuilder("web").obj()
    assert _set_condition(pod, clock, "0/1 nodes are available: 1 Insufficient cpu.")
    (cond,) = pod.status.conditions
    assert (cond.type, cond.status, cond.reason) == ("PodScheduled", "False", "Unschedulable")
    assert pod.status.phase == "Pending"
    first = cond.lastTransitionTime.ToDatetime()
    assert not _set_condition(pod, clock, "0/1 nodes are available: 1 Insufficient cpu.")
    clock.advance(5)
    assert _set_condition(pod, clock, "0/2 nodes are available: 2 Insufficient cpu.")
    (cond,) = pod.status.conditions
    assert cond.message == "0/2 nodes are available: 2 Insufficient cpu."
    assert cond.lastTransitionTime.ToDatetime() == first  # still False: no transition


def test_metrics_exposition() -> None:
    from prometheus_client import generate_latest

    from scheduler.metrics import Metrics

    m = Metrics()
    m.observe_attempt("scheduled", 0.002)
    m.observe_attempt("unschedulable", 0.001)
    m.observe_e2e(0.5)
    m.track_queue(lambda: {"active": 3, "backoff": 1, "unschedulable": 2})
    text = generate_latest(m.registry).decode()
    assert 'scheduler_schedule_attempts_total{result="scheduled"} 1.0' in text
    assert 'scheduler_pending_pods{queue="active"} 3.0' in text
    assert "scheduler_pod_scheduling_duration_seconds_count 1.0" in text


def test_load_config_file(tmp_path: object) -> None:
    from pathlib import Path

    from scheduler.config import load_config

    path = Path(str(tmp_path)) / "sched.yaml"
    path.write_text(
        "profiles:\n"
        "  - pluginConfig:\n"
        "      - name: NodeResourcesFit\n"
        "        args: {scoringStrategy: {type: MostAllocated}}\n"
    )
    cfg = load_config(path)
    assert cfg.profile.args["NodeResourcesFit"] == {"scoringStrategy": {"type": "MostAllocated"}}
    assert load_config("").profile.plugins == load_config(None).profile.plugins
