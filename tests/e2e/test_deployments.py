"""Deployments through the real kubectl against `tinykube up`, as against Kubernetes.

`create deployment`, `get deploy -o wide`, `describe`, `scale`, `set image`, and `rollout status |
history | undo [--to-revision] | pause | resume | restart` (kubectl does undo, restart and set
image client-side with JSON and strategic merge patches), then deletion through the garbage
collector. One Deployment walks through the verbs in order, as a user would. A second one is
rolled to a command that cannot start: it stalls within maxUnavailable and maxSurge until its
progress deadline, and `rollout undo` recovers it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import assert_output, ok
from tests.e2e.waiting import until

pytestmark = pytest.mark.e2e


def _json(cluster: UpCluster, *args: str) -> Any:
    return json.loads(ok(cluster.kubectl("get", *args, "-o", "json")))


def _replica_sets(cluster: UpCluster) -> dict[str, dict[str, Any]]:
    items = _json(cluster, "rs", "-l", "app=web")["items"]
    return {rs["metadata"]["name"]: rs for rs in items}


def _revisions(cluster: UpCluster) -> dict[str, tuple[int, int]]:
    """ReplicaSet name -> (revision, spec.replicas)."""
    return {
        name: (
            int(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]),
            rs["spec"].get("replicas", 0),
        )
        for name, rs in _replica_sets(cluster).items()
    }


def _rolled_out(cluster: UpCluster) -> None:
    out = ok(cluster.kubectl("rollout", "status", "deployment/web", "--timeout=60s", timeout=90))
    assert out.endswith('deployment "web" successfully rolled out\n'), out


def test_deployment_verbs(tinykube_up: UpCluster) -> None:
    k = tinykube_up.kubectl
    out = ok(
        k("create", "deployment", "web", "--image=busybox", "--replicas=3", "--", "sleep", "3600")
    )
    assert out == "deployment.apps/web created\n"
    _rolled_out(tinykube_up)
    ((rs1, (rev, size)),) = _revisions(tinykube_up).items()
    assert (rev, size) == (1, 3)
    template_hash = rs1.removeprefix("web-")
    assert_output(
        ok(k("get", "deploy", "-o", "wide")),
        """
NAME   READY   UP-TO-DATE   AVAILABLE   AGE   CONTAINERS   IMAGES    SELECTOR
web    3/3     3            3           <age>   busybox      busybox   app=web
""",
    )
    pods = _json(tinykube_up, "pods", "-l", "app=web")["items"]
    assert len(pods) == 3
    assert {p["metadata"]["labels"]["pod-template-hash"] for p in pods} == {template_hash}

    # scale (the scale subresource, merge patch)
    assert ok(k("scale", "deploy", "web", "--replicas=4")) == "deployment.apps/web scaled\n"
    _rolled_out(tinykube_up)
    assert _revisions(tinykube_up) == {rs1: (1, 4)}

    # set image (strategic merge patch of the template): a second ReplicaSet, revision 2
    out = ok(k("set", "image", "deploy/web", "busybox=busybox:1.37"))
    assert out == "deployment.apps/web image updated\n"
    _rolled_out(tinykube_up)
    revisions = _revisions(tinykube_up)
    (rs2,) = set(revisions) - {rs1}
    assert revisions == {rs1: (1, 0), rs2: (2, 4)}
    assert_output(
        ok(k("rollout", "history", "deployment/web")),
        """
deployment.apps/web
REVISION  CHANGE-CAUSE
1         <none>
2         <none>
""",
    )

    # undo (a JSON patch with revision 1's template): the first ReplicaSet comes back as rev 3
    assert ok(k("rollout", "undo", "deployment/web")) == "deployment.apps/web rolled back\n"
    _rolled_out(tinykube_up)
    assert _revisions(tinykube_up) == {rs1: (3, 4), rs2: (2, 0)}
    rs1_annotations = _replica_sets(tinykube_up)[rs1]["metadata"]["annotations"]
    assert rs1_annotations["deployment.kubernetes.io/revision-history"] == "1"
    out = ok(k("rollout", "undo", "deployment/web", "--to-revision=2"))
    assert out == "deployment.apps/web rolled back\n"
    _rolled_out(tinykube_up)
    assert _revisions(tinykube_up) == {rs1: (3, 0), rs2: (4, 4)}
    err = k("rollout", "undo", "deployment/web", "--to-revision=9")
    assert err.code == 1 and "unable to find specified revision 9 in history" in err.err

    # pause: a template change makes no ReplicaSet; resume rolls it out
    assert ok(k("rollout", "pause", "deployment/web")) == "deployment.apps/web paused\n"
    ok(k("set", "image", "deploy/web", "busybox=busybox:1.36"))
    deployment = _json(tinykube_up, "deploy", "web")
    progressing = {c["type"]: c for c in deployment["status"]["conditions"]}["Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("Unknown", "DeploymentPaused")
    assert set(_revisions(tinykube_up)) == {rs1, rs2}
    err = k("rollout", "undo", "deployment/web")
    assert err.code == 1 and "you cannot rollback a paused deployment" in err.err
    assert ok(k("rollout", "resume", "deployment/web")) == "deployment.apps/web resumed\n"
    _rolled_out(tinykube_up)
    assert len(_revisions(tinykube_up)) == 3

    # restart (a strategic merge patch of the template's restartedAt annotation)
    assert ok(k("rollout", "restart", "deployment/web")) == "deployment.apps/web restarted\n"
    _rolled_out(tinykube_up)
    revisions = _revisions(tinykube_up)
    assert len(revisions) == 4 and max(revisions.values()) == (6, 4)

    described = ok(k("describe", "deploy", "web"))
    for line in (
        "Name:                   web",
        "Selector:               app=web",
        "Replicas:               4 desired | 4 updated | 4 total | 4 available | 0 unavailable",
        "StrategyType:           RollingUpdate",
        "RollingUpdateStrategy:  25% max unavailable, 25% max surge",
        "  Available      True    MinimumReplicasAvailable",
        "  Progressing    True    NewReplicaSetAvailable",
    ):
        assert line in described, described
    assert "Normal  ScalingReplicaSet" in described and "deployment-controller" in described
    assert "Scaled up replica set web-" in described

    # delete: the garbage collector takes the ReplicaSets and their pods
    out = ok(k("delete", "deployment", "web"))
    assert out == 'deployment.apps "web" deleted from default namespace\n'
    until(
        lambda: (
            not _replica_sets(tinykube_up)
            and not _json(tinykube_up, "pods", "-l", "app=web")["items"]
        ),
        "the ReplicaSets and pods of the deleted Deployment to go",
    )


STALLING = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: stall}
spec:
  replicas: 4
  progressDeadlineSeconds: 8
  selector: {matchLabels: {app: stall}}
  strategy: {rollingUpdate: {maxSurge: 1, maxUnavailable: 1}}
  template:
    metadata: {labels: {app: stall}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - {name: main, image: busybox, command: [sleep, "3600"]}
"""


def test_a_rollout_that_never_becomes_ready_stalls_and_undo_recovers(
    tinykube_up: UpCluster,
) -> None:
    """Pods whose command cannot start never become Ready: the rollout stops at maxUnavailable
    and maxSurge, `rollout status` reports the deadline, and `rollout undo` brings it back."""
    k = tinykube_up.kubectl
    ok(k("apply", "-f", "-", stdin=STALLING))
    out = ok(k("rollout", "status", "deployment/stall", "--timeout=60s", timeout=90))
    assert out.endswith('deployment "stall" successfully rolled out\n')
    command = "/spec/template/spec/containers/0/command"
    patch = f'[{{"op": "replace", "path": "{command}", "value": ["no-such-command"]}}]'
    ok(k("patch", "deployment", "stall", "--type=json", "-p", patch))
    failed = k("rollout", "status", "deployment/stall", "--timeout=60s", timeout=90)
    assert failed.code == 1, failed
    assert failed.err == 'error: deployment "stall" exceeded its progress deadline\n'
    d = _json(tinykube_up, "deploy", "stall")
    progressing = {c["type"]: c for c in d["status"]["conditions"]}["Progressing"]
    assert (progressing["status"], progressing["reason"]) == ("False", "ProgressDeadlineExceeded")
    # Never below replicas - maxUnavailable available, never above replicas + maxSurge pods.
    rss = _json(tinykube_up, "rs", "-l", "app=stall")["items"]
    assert d["status"].get("availableReplicas") == 3, (d["status"], [r["status"] for r in rss])
    sizes = sorted(
        rs["spec"]["replicas"] for rs in _json(tinykube_up, "rs", "-l", "app=stall")["items"]
    )
    assert sizes == [2, 3]
    assert ok(k("rollout", "undo", "deployment/stall")) == "deployment.apps/stall rolled back\n"
    out = ok(k("rollout", "status", "deployment/stall", "--timeout=60s", timeout=90))
    assert out.endswith('deployment "stall" successfully rolled out\n')
    d = _json(tinykube_up, "deploy", "stall")
    assert d["status"]["availableReplicas"] == 4 and d["status"]["updatedReplicas"] == 4
    ok(k("delete", "deployment", "stall"))
