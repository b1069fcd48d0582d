"""Lifecycle hooks and termination messages under `tinykube up` (process runtime) with the
real kubectl: the apiserver's defaults, a postStart and a preStop hook, the message a
container leaves at $TINYKUBE_ROOT/dev/termination-log (docs/cri.md), and a failing postStart
hook's Events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]


def get_pod(cluster: UpCluster, name: str) -> dict[str, Any] | None:
    result = cluster.kubectl("get", "pod", name, "-o", "json")
    return json.loads(result.out) if result.code == 0 else None


def test_hooks_and_termination_message(tinykube_up: UpCluster, tmp_path: Any) -> None:
    out = tmp_path / "hooks"
    out.mkdir()
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lc-hooks"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 10,
            "containers": [
                {
                    "name": "app",
                    "image": "busybox",
                    "command": [
                        "sh",
                        "-c",
                        f"trap 'test -f {out}/prestop && echo after-hook > {out}/term; exit 0'"
                        " TERM; while true; do sleep 0.1; done",
                    ],
                    "lifecycle": {
                        "postStart": {"exec": {"command": ["sh", "-c", f"echo up > {out}/post"]}},
                        "preStop": {"exec": {"command": ["sh", "-c", f"echo bye > {out}/prestop"]}},
                    },
                }
            ],
        },
    }
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=json.dumps(manifest)))

    def running() -> bool:
        pod = get_pod(tinykube_up, "lc-hooks")
        return pod is not None and pod["status"].get("phase") == "Running"

    until(running, "the pod running", 120)
    assert (out / "post").read_text() == "up\n"
    pod = get_pod(tinykube_up, "lc-hooks")
    assert pod is not None
    container = pod["spec"]["containers"][0]
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "File"
    # Deleting the pod runs preStop, then SIGTERM: the trap sees what the hook left.
    ok(tinykube_up.kubectl("delete", "pod", "lc-hooks", "--wait=false"))

    until(lambda: (out / "term").exists(), "the container's SIGTERM after the hook", 60)
    assert (out / "term").read_text() == "after-hook\n"


def test_the_termination_message(tinykube_up: UpCluster) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lc-msg"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "app",
                    "image": "busybox",
                    "command": [
                        "sh",
                        "-c",
                        "printf 'disk full' > $TINYKUBE_ROOT/dev/termination-log; exit 3",
                    ],
                }
            ],
        },
    }
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=json.dumps(manifest)))

    def terminated() -> dict[str, Any] | None:
        pod = get_pod(tinykube_up, "lc-msg")
        for s in (pod or {}).get("status", {}).get("containerStatuses", []):
            if "terminated" in s["state"]:
                return dict(s["state"]["terminated"])
        return None

    state = until(terminated, "the container terminated", 120)
    assert state is not None
    assert (state["exitCode"], state["message"]) == (3, "disk full")
    ok(tinykube_up.kubectl("delete", "pod", "lc-msg", "--wait=false"))


def test_a_failing_post_start_hook(tinykube_up: UpCluster) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lc-badhook"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "app",
                    "image": "busybox",
                    "command": ["sleep", "3600"],
                    "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "exit 4"]}}},
                }
            ],
        },
    }
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=json.dumps(manifest)))

    def waiting() -> dict[str, Any] | None:
        pod = get_pod(tinykube_up, "lc-badhook")
        for s in (pod or {}).get("status", {}).get("containerStatuses", []):
            w = s["state"].get("waiting", {})
            if w.get("reason") in ("PostStartHookError", "CrashLoopBackOff"):
                return dict(s)
        return None

    until(waiting, "the container waiting after its failed hook", 120)
    events = json.loads(
        ok(
            tinykube_up.kubectl(
                "get", "events", "--field-selector", "involvedObject.name=lc-badhook", "-o", "json"
            )
        )
    )["items"]
    reasons = {(e["reason"], e["message"]) for e in events}
    assert ("FailedPostStartHook", "PostStartHook failed") in reasons, reasons
    assert ("Killing", "FailedPostStartHook") in reasons, reasons
    ok(tinykube_up.kubectl("delete", "pod", "lc-badhook", "--wait=false"))
