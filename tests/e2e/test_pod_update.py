"""Updating a running pod with the real kubectl, as against Kubernetes: `kubectl set image`
restarts the container from the new image (restart count 1, Events Killing, Pulled, Created,
Started), a change kube forbids is 422 with kube's message, and a lowered
activeDeadlineSeconds fails the pod (DeadlineExceeded)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.waiting import until

pytestmark = pytest.mark.e2e

FORBIDDEN = (
    'The Pod "{name}" is invalid: spec: Forbidden: pod updates may not change fields other '
    "than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously "
    "negative)\n"
)


def pod_manifest(name: str, extra: str = "") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 5
{extra}  containers:
  - name: {name}
    image: busybox:1.36
    command: [sleep, "3600"]
"""


def start(cluster: UpCluster, name: str, extra: str = "") -> dict[str, Any]:
    ok(cluster.kubectl("create", "-f", "-", stdin=pod_manifest(name, extra)))
    ok(cluster.kubectl("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=60s"))
    pod: dict[str, Any] = json.loads(ok(cluster.kubectl("get", "pod", name, "-o", "json")))
    return pod


def get(cluster: UpCluster, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = json.loads(ok(cluster.kubectl("get", "pod", name, "-o", "json")))
    return pod


def events(cluster: UpCluster, name: str) -> list[dict[str, Any]]:
    listed = ok(
        cluster.kubectl(
            "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json"
        )
    )
    items: list[dict[str, Any]] = json.loads(listed)["items"]
    return items


def test_set_image_restarts_the_container(tinykube_up: UpCluster) -> None:
    before = start(tinykube_up, "web")
    first_id = before["status"]["containerStatuses"][0]["containerID"]
    out = ok(tinykube_up.kubectl("set", "image", "pod/web", "web=busybox:1.37"))
    assert out == "pod/web image updated\n"

    def restarted() -> dict[str, Any]:
        pod = get(tinykube_up, "web")
        statuses = pod["status"].get("containerStatuses") or [{}]
        cs: dict[str, Any] = statuses[0]
        done = cs.get("restartCount") == 1 and cs.get("ready") and "running" in cs["state"]
        return pod if done else {}

    pod = until(restarted, "the container restarted from the new image")
    cs = pod["status"]["containerStatuses"][0]
    assert pod["spec"]["containers"][0]["image"] == "busybox:1.37"
    assert cs["image"] == "busybox:1.37"
    assert cs["containerID"] != first_id
    assert cs["lastState"]["terminated"]["exitCode"] == 143
    assert cs["lastState"]["terminated"]["reason"] == "Error"
    assert pod["status"]["phase"] == "Running"
    assert pod["metadata"]["generation"] == 2

    table = ok(tinykube_up.kubectl("get", "pod", "web")).splitlines()
    assert table[1].split()[:4] == ["web", "1/1", "Running", "1"]

    killing = "Container web definition changed, will be restarted"
    pulled = 'Container image "busybox:1.37" already present on machine'

    def all_events() -> dict[str, dict[str, Any]]:
        by_message = {e["message"]: e for e in events(tinykube_up, "web")}
        wanted = (killing, pulled, "Created container: web", "Started container web")
        if not all(m in by_message for m in wanted):
            return {}
        if by_message["Started container web"].get("count") != 2:
            return {}
        return by_message

    by_message = until(all_events, "the restart's events")
    assert by_message[killing]["reason"] == "Killing"
    assert by_message[pulled]["reason"] == "Pulled"
    assert by_message["Created container: web"]["count"] == 2
    # In the order the kubelet did them (Event times are whole seconds: not decreasing).
    times = [
        by_message[killing]["lastTimestamp"],
        by_message[pulled]["firstTimestamp"],
        by_message["Created container: web"]["lastTimestamp"],
        by_message["Started container web"]["lastTimestamp"],
    ]
    assert times == sorted(times), times
    first_start = by_message["Started container web"]["firstTimestamp"]
    assert first_start <= by_message[killing]["lastTimestamp"]

    described = ok(tinykube_up.kubectl("describe", "pod", "web"))
    assert "    Image:         busybox:1.37\n" in described
    assert "    Restart Count:  1\n" in described
    assert "    Last State:     Terminated\n      Reason:       Error\n" in described
    # Events of one second are listed in the server's order, by name (tinykube's Event names
    # are hashes, kube's a timestamp): look for each, the order was checked above.
    shown = described.split("Events:\n", 1)[1]
    assert f"kubelet             {killing}\n" in shown
    assert f"kubelet             {pulled}\n" in shown
    assert "kubelet             Started container web\n" in shown


def test_patch_of_a_forbidden_field_is_invalid(tinykube_up: UpCluster) -> None:
    start(tinykube_up, "frozen")
    patch = '{"spec":{"containers":[{"name":"frozen","command":["sleep","60"]}]}}'
    refused = tinykube_up.kubectl("patch", "pod", "frozen", "-p", patch, "-v=6")
    assert refused.code == 1
    assert "422 Unprocessable Entity" in refused.err
    message = refused.err[refused.err.index('The Pod "frozen"') :]
    assert message.startswith(FORBIDDEN.format(name="frozen")), message
    # The diff of the specs follows, as kube's go-cmp diff.
    assert "  core.PodSpec{\n" in message
    assert '- \t\t\tCommand: {"sleep", "3600"},\n+ \t\t\tCommand: {"sleep", "60"},\n' in message

    refused = tinykube_up.kubectl("patch", "pod", "frozen", "-p", '{"spec":{"nodeName":"x"}}')
    assert refused.code == 1
    assert refused.err.startswith('The Pod "frozen" is invalid: spec: Forbidden: pod updates')

    added = tinykube_up.kubectl(
        "patch",
        "pod",
        "frozen",
        "--type=json",
        "-p",
        '[{"op":"add","path":"/spec/containers/-","value":{"name":"b","image":"busybox"}}]',
    )
    assert added.err == (
        'The Pod "frozen" is invalid: spec.containers: Forbidden: pod updates may not add or '
        "remove containers\n"
    )
    # Tolerations may be added.
    toleration = '{"spec":{"tolerations":[{"key":"k","operator":"Exists","effect":"NoSchedule"}]}}'
    assert ok(tinykube_up.kubectl("patch", "pod", "frozen", "-p", toleration)) == (
        "pod/frozen patched\n"
    )


def test_lowered_active_deadline_fails_the_pod(tinykube_up: UpCluster) -> None:
    start(tinykube_up, "deadline", "  activeDeadlineSeconds: 3600\n")
    raised = tinykube_up.kubectl(
        "patch", "pod", "deadline", "-p", '{"spec":{"activeDeadlineSeconds":7200}}'
    )
    assert raised.err == (
        'The Pod "deadline" is invalid: spec.activeDeadlineSeconds: Invalid value: 7200: must be '
        "less than or equal to previous value\n"
    )
    lowered = tinykube_up.kubectl(
        "patch", "pod", "deadline", "-p", '{"spec":{"activeDeadlineSeconds":1}}'
    )
    assert lowered.out == "pod/deadline patched\n", lowered.err

    def failed() -> dict[str, Any]:
        pod = get(tinykube_up, "deadline")
        return pod if pod["status"].get("phase") == "Failed" else {}

    pod = until(failed, "the pod failed by its deadline")
    assert pod["status"]["reason"] == "DeadlineExceeded"
    assert pod["status"]["message"] == (
        "Pod was active on the node longer than the specified deadline"
    )
    assert "terminated" in pod["status"]["containerStatuses"][0]["state"]
    # kubectl's STATUS column shows the container's terminated reason over the pod's, as
    # against Kubernetes; describe shows the pod's.
    table = ok(tinykube_up.kubectl("get", "pod", "deadline")).splitlines()
    assert table[1].split()[:3] == ["deadline", "0/1", "Error"]
    described = ok(tinykube_up.kubectl("describe", "pod", "deadline"))
    assert "\nStatus:           Failed\nReason:           DeadlineExceeded\n" in described
    assert (
        "\nMessage:          Pod was active on the node longer than the specified deadline\n"
        in (described)
    )
    reasons = {e["reason"] for e in events(tinykube_up, "deadline")}
    assert {"DeadlineExceeded", "Killing"} <= reasons, reasons
