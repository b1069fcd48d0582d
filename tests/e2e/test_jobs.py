"""Jobs across real processes (`tinykube up`: etcd, apiserver, scheduler, controller manager,
kubelets running real processes), driven by the real kubectl.

A Job of 5 completions, 2 at a time, whose first attempt fails (an atomic `mkdir` marker picks
exactly one pod to fail) succeeds with succeeded=5, failed=1, each pod counted once; an Indexed
Job's pods see JOB_COMPLETION_INDEX; a podFailurePolicy FailJob rule on exit code 42 fails the
Job with reason PodFailurePolicy; an Indexed Job with backoffLimitPerIndex 1 whose index 1 always
fails retries that index once, then fails with failedIndexes "1" and reason FailedIndexes;
`kubectl create job`, `logs job/NAME`, `wait`, `describe`, `get -o wide` and `delete` behave
as against Kubernetes; ttlSecondsAfterFinished removes a finished Job with its pods. Every wait
is kubectl's own `wait` or a bounded poll.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

WAIT = "--timeout=180s"
LIMIT = 120.0  # seconds a Job test waits for a condition (pods run to completion)


def get_json(cluster: UpCluster, *args: str) -> Any:
    return json.loads(ok(cluster.kubectl("get", *args, "-o", "json")))


def job_pods(cluster: UpCluster, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(
        cluster, "pods", "-l", f"batch.kubernetes.io/job-name={name}"
    )["items"]
    return items


def conditions(job: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (c["type"], c["status"], c.get("reason", ""))
        for c in job.get("status", {}).get("conditions", [])
    ]


def exit_code(pod: dict[str, Any]) -> int:
    (status,) = pod["status"]["containerStatuses"]
    return int(status["state"]["terminated"].get("exitCode", 0))


def test_completions_5_parallelism_2_with_one_failing_attempt(
    tinykube_up: UpCluster, tmp_path: Path
) -> None:
    marker = tmp_path / "failed-once"
    # mkdir is atomic: exactly one pod creates the marker, and that one fails.
    script = f"if mkdir {marker} 2>/dev/null; then exit 1; fi; sleep 0.5; echo done"
    manifest = f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: five
spec:
  completions: 5
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 2
      containers:
      - name: work
        image: busybox
        command: [sh, -c, "{script}"]
"""
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=manifest))
    ok(tinykube_up.kubectl("wait", "--for=condition=complete", "job/five", WAIT))
    job = get_json(tinykube_up, "job", "five")
    status = job["status"]
    assert (status["succeeded"], status["failed"]) == (5, 1)
    assert status.get("active", 0) == 0
    assert not status.get("uncountedTerminatedPods")
    assert conditions(job) == [
        ("SuccessCriteriaMet", "True", "CompletionsReached"),
        ("Complete", "True", "CompletionsReached"),
    ]
    assert status["completionTime"] >= status["startTime"]
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    pods = job_pods(tinykube_up, "five")
    phases = sorted(p["status"]["phase"] for p in pods)
    assert phases == ["Failed"] + ["Succeeded"] * 5
    for pod in pods:
        assert "finalizers" not in pod["metadata"], "every pod was counted and let go"
        (ref,) = pod["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("Job", "five", uid)
        assert exit_code(pod) == (1 if pod["status"]["phase"] == "Failed" else 0)
    (failed,) = [p for p in pods if p["status"]["phase"] == "Failed"]
    (state,) = failed["status"]["containerStatuses"]
    assert state["state"]["terminated"]["reason"] == "Error"

    wide = ok(tinykube_up.kubectl("get", "jobs", "five", "-o", "wide")).splitlines()
    assert wide[0].split() == [
        "NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE", "CONTAINERS", "IMAGES", "SELECTOR",
    ]  # fmt: skip
    cells = wide[1].split()
    assert cells[:3] == ["five", "Complete", "5/5"]
    assert cells[5:] == ["work", "busybox", f"batch.kubernetes.io/controller-uid={uid}"]

    described = ok(tinykube_up.kubectl("describe", "job", "five"))
    for line in (
        "Name:             five",
        "Parallelism:      2",
        "Completions:      5",
        "Completion Mode:  NonIndexed",
        "Pods Statuses:    0 Active (0 Ready) / 5 Succeeded / 1 Failed",
    ):
        assert line in described, described
    assert "SuccessfulCreate" in described and "Completed" in described, described

    events = get_json(tinykube_up, "events", "--field-selector", "involvedObject.name=five")
    reasons = [e["reason"] for e in events["items"]]
    assert "Completed" in reasons and "SuccessfulCreate" in reasons


def test_an_indexed_job_sees_its_completion_index(tinykube_up: UpCluster) -> None:
    manifest = """
apiVersion: batch/v1
kind: Job
metadata:
  name: indexed
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: work
        image: busybox
        command: [sh, -c, 'echo "index=$JOB_COMPLETION_INDEX"']
"""
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=manifest))
    ok(tinykube_up.kubectl("wait", "--for=condition=complete", "job/indexed", WAIT))
    job = get_json(tinykube_up, "job", "indexed")
    assert job["status"]["completedIndexes"] == "0-2"
    assert job["status"]["succeeded"] == 3
    pods = job_pods(tinykube_up, "indexed")
    seen = set()
    for pod in pods:
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == index
        assert pod["metadata"]["name"].startswith(f"indexed-{index}-")
        assert pod["spec"]["hostname"] == f"indexed-{index}"
        logs = ok(tinykube_up.kubectl("logs", pod["metadata"]["name"]))
        assert logs.strip() == f"index={index}"
        seen.add(index)
    assert seen == {"0", "1", "2"}
    assert "Completed Indexes:  0-2" in ok(tinykube_up.kubectl("describe", "job", "indexed"))


def test_pod_failure_policy_fail_job_on_exit_code_42(tinykube_up: UpCluster) -> None:
    manifest = """
apiVersion: batch/v1
kind: Job
metadata:
  name: fortytwo
spec:
  completions: 2
  parallelism: 1
  backoffLimit: 6
  podFailurePolicy:
    rules:
    - action: FailJob
      onExitCodes:
        containerName: main
        operator: In
        values: [42]
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: [sh, -c, "exit 42"]
"""
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=manifest))
    ok(tinykube_up.kubectl("wait", "--for=condition=failed", "job/fortytwo", WAIT))
    job = get_json(tinykube_up, "job", "fortytwo")
    assert conditions(job) == [
        ("FailureTarget", "True", "PodFailurePolicy"),
        ("Failed", "True", "PodFailurePolicy"),
    ]
    (pod,) = job_pods(tinykube_up, "fortytwo")  # no retry: the policy failed the Job at once
    assert pod["status"]["phase"] == "Failed"
    assert exit_code(pod) == 42
    message = job["status"]["conditions"][1]["message"]
    assert message == (
        f"Container main for pod default/{pod['metadata']['name']} failed with exit code 42 "
        "matching FailJob rule at index 0"
    )
    assert job["status"]["failed"] == 1
    row = ok(tinykube_up.kubectl("get", "job", "fortytwo")).splitlines()[1].split()
    assert row[:3] == ["fortytwo", "Failed", "0/2"]


def test_backoff_limit_per_index_fails_only_the_failing_index(tinykube_up: UpCluster) -> None:
    manifest = """
apiVersion: batch/v1
kind: Job
metadata:
  name: perindex
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  backoffLimitPerIndex: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: [sh, -c, 'if [ "$JOB_COMPLETION_INDEX" = 1 ]; then exit 3; fi']
"""
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=manifest))
    # Index 1 fails, is retried once after its 10 s back-off, fails again and is given up on.
    ok(tinykube_up.kubectl("wait", "--for=condition=failed", "job/perindex", WAIT))
    job = get_json(tinykube_up, "job", "perindex")
    assert job["spec"]["backoffLimit"] == 2**31 - 1  # the default with backoffLimitPerIndex
    status = job["status"]
    assert (status["completedIndexes"], status["failedIndexes"]) == ("0,2", "1")
    assert (status["succeeded"], status["failed"]) == (2, 2)
    assert conditions(job) == [
        ("FailureTarget", "True", "FailedIndexes"),
        ("Failed", "True", "FailedIndexes"),
    ]
    assert job["status"]["conditions"][1]["message"] == "Job has failed indexes"
    pods = job_pods(tinykube_up, "perindex")
    index_of = "batch.kubernetes.io/job-completion-index"
    count_of = "batch.kubernetes.io/job-index-failure-count"
    attempts = sorted(
        (p["metadata"]["annotations"][index_of], p["metadata"]["annotations"][count_of])
        for p in pods
    )
    assert attempts == [("0", "0"), ("1", "0"), ("1", "1"), ("2", "0")]
    for pod in pods:
        assert "finalizers" not in pod["metadata"], "every pod was counted and let go"
        failed = pod["metadata"]["annotations"][index_of] == "1"
        assert pod["status"]["phase"] == ("Failed" if failed else "Succeeded")
    events = get_json(tinykube_up, "events", "--field-selector", "involvedObject.name=perindex")
    assert ("Warning", "FailedIndexes", "Job has failed indexes") in [
        (e["type"], e["reason"], e["message"]) for e in events["items"]
    ]
    row = ok(tinykube_up.kubectl("get", "job", "perindex")).splitlines()[1].split()
    assert row[:3] == ["perindex", "Failed", "2/3"]


def test_create_job_logs_wait_and_delete(tinykube_up: UpCluster) -> None:
    ok(
        tinykube_up.kubectl(
            "create", "job", "hello", "--image=busybox", "--", "sh", "-c", "echo hello from a job"
        )
    )
    ok(tinykube_up.kubectl("wait", "--for=condition=complete", "job/hello", WAIT))
    assert ok(tinykube_up.kubectl("logs", "job/hello")).strip() == "hello from a job"
    row = ok(tinykube_up.kubectl("get", "jobs")).splitlines()
    assert any(r.split()[:3] == ["hello", "Complete", "1/1"] for r in row[1:]), row
    (pod,) = job_pods(tinykube_up, "hello")
    out = ok(tinykube_up.kubectl("delete", "job", "hello"))
    assert out.strip() == 'job.batch "hello" deleted from default namespace'

    def gone() -> bool:
        names = [p["metadata"]["name"] for p in job_pods(tinykube_up, "hello")]
        return pod["metadata"]["name"] not in names

    until(gone, "the deleted Job's pod to go (kubectl deletes in the background)", limit=LIMIT)


def test_ttl_after_finished_deletes_the_job_and_its_pods(tinykube_up: UpCluster) -> None:
    manifest = """
apiVersion: batch/v1
kind: Job
metadata:
  name: shortlived
spec:
  ttlSecondsAfterFinished: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox
        command: [sh, -c, "true"]
"""
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=manifest))

    def job_gone() -> bool:
        result = tinykube_up.kubectl("get", "job", "shortlived")
        return result.code != 0 and "NotFound" in result.err

    until(job_gone, "the finished Job to be deleted 1 s after it finished", limit=LIMIT)
    until(lambda: not job_pods(tinykube_up, "shortlived"), "its pods to go with it", limit=LIMIT)


def test_delete_with_cascade_orphan_keeps_the_pods_and_lets_them_go(tinykube_up: UpCluster) -> None:
    manifest = """
apiVersion: batch/v1
kind: Job
metadata:
  name: keeper
spec:
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: busybox
        command: [sleep, "300"]
"""
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=manifest))
    (pod,) = until(lambda: job_pods(tinykube_up, "keeper"), "the Job's pod", limit=LIMIT)
    name = pod["metadata"]["name"]
    assert pod["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
    ok(tinykube_up.kubectl("delete", "job", "keeper", "--cascade=orphan"))

    def orphaned() -> dict[str, Any] | None:
        current: dict[str, Any] = get_json(tinykube_up, "pod", name)
        meta = current["metadata"]
        if "ownerReferences" in meta or "finalizers" in meta:
            return None
        return current

    # The garbage collector drops the owner reference; the Job controller its finalizer.
    orphan = until(orphaned, "the pod to be orphaned and let go by the Job controller", limit=LIMIT)
    assert orphan is not None
    assert "deletionTimestamp" not in orphan["metadata"]
    ok(tinykube_up.kubectl("delete", "pod", name, "--wait=false"))
