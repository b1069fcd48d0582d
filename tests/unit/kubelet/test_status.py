"""PodStatus from runtime records: phases, conditions, kept transition times."""

from __future__ import annotations

from kubelet.runtime import (
    RUNNING,
    TERMINATED,
    WAITING,
    ContainerRecord,
    PodRecord,
    Termination,
    build_pod_status,
    pod_phase,
)
from tinykube.v1 import pod_pb2


def pod(*names: str) -> pod_pb2.Pod:
    p = pod_pb2.Pod()
    p.metadata.name = "p"
    for n in names:
        p.spec.containers.add(name=n, image="img")
    return p


def rec(**containers: ContainerRecord) -> PodRecord:
    return PodRecord("u", "default", "p", 100.0, dict(containers))


def term(code: int) -> Termination:
    return Termination(exit_code=code, reason="Error" if code else "Completed", started_at=1,
                       finished_at=2)  # fmt: skip


def test_phases() -> None:
    p = pod("a", "b")
    running = ContainerRecord("a", state=RUNNING, started_at=5)
    assert pod_phase(p, rec(a=running)) == "Pending"  # b has no record yet
    assert pod_phase(p, rec(a=running, b=ContainerRecord("b"))) == "Pending"
    restarting = ContainerRecord("b", state=WAITING, last=term(1), restart_count=1)
    assert pod_phase(p, rec(a=running, b=restarting)) == "Running"
    done = ContainerRecord("a", state=TERMINATED, terminated=term(0))
    failed = ContainerRecord("b", state=TERMINATED, terminated=term(4))
    assert pod_phase(p, rec(a=done, b=done)) == "Succeeded"
    assert pod_phase(p, rec(a=done, b=failed)) == "Failed"


def test_ready_conditions_and_kept_transition_times() -> None:
    p = pod("a")
    scheduled = pod_pb2.PodCondition(type="PodScheduled", status="True")
    previous = pod_pb2.PodStatus(conditions=[scheduled])
    r = rec(a=ContainerRecord("a", state=RUNNING, started_at=50, pid=42))
    s1 = build_pod_status(p, r, "10.1.1.1", previous, now=1000.0)
    conds = {c.type: c for c in s1.conditions}
    assert conds["PodScheduled"] == scheduled
    assert {t: c.status for t, c in conds.items()} == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    assert s1.hostIP == "10.1.1.1" and s1.phase == "Running"
    # The lists Kubernetes clients read (kubectl describe's IPs) carry the same address.
    assert [ip.ip for ip in s1.hostIPs] == [ip.ip for ip in s1.podIPs] == ["10.1.1.1"]
    assert s1.containerStatuses[0].containerID == "process://42"
    assert s1.containerStatuses[0].ready
    # The same state later: nothing changes, so the kubelet writes nothing.
    s2 = build_pod_status(p, r, "10.1.1.1", s1, now=2000.0)
    assert s2 == s1
    # The container dies: Ready flips and its transition time moves.
    r.containers["a"] = ContainerRecord("a", state=WAITING, last=term(1), restart_count=0,
                                        waiting_reason="CrashLoopBackOff")  # fmt: skip
    s3 = build_pod_status(p, r, "10.1.1.1", s2, now=3000.0)
    ready = next(c for c in s3.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "ContainersNotReady")
    assert ready.message == "containers with unready status: [a]"
    assert ready.lastTransitionTime.seconds == 3000
    init = next(c for c in s3.conditions if c.type == "Initialized")
    assert init.lastTransitionTime.seconds == 1000


def test_image_id_is_reported_once_the_container_exists() -> None:
    p = pod("a", "b", "c")
    p.spec.containers[1].command.append("sleep")
    r = rec(
        a=ContainerRecord("a", state=RUNNING, started_at=50, pid=42),
        b=ContainerRecord("b", state=WAITING, last=term(1), restart_count=1),
        c=ContainerRecord("c"),
    )
    a, b, c = build_pod_status(p, r, "10.1.1.1", pod_pb2.PodStatus(), now=1000.0).containerStatuses
    assert a.imageID.startswith("sha256:") and len(a.imageID) == len("sha256:") + 64
    # A crash-looping container still has its image; one never created has none yet.
    assert b.imageID.startswith("sha256:") and b.imageID != a.imageID
    assert c.imageID == ""
    # Stable: the same container reports the same ID in the next status.
    again = build_pod_status(p, r, "10.1.1.1", pod_pb2.PodStatus(), now=2000.0)
    assert again.containerStatuses[0].imageID == a.imageID
