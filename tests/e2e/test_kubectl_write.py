"""The real kubectl's writing verbs against `tinykube up`, and its errors, as against Kubernetes.

apply (create, change, and a removed field gone through the last-applied annotation), create,
replace, delete (-f, --force, --wait), label, annotate, taint, cordon, scale, the three patch
types, edit, run and wait. Each test works on objects of its own names, so they share the
module's cluster in any order. Messages are kubectl's own against kube-apiserver's answers.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import assert_output, ok
from tests.e2e.waiting import until

pytestmark = pytest.mark.e2e


def pod_manifest(name: str, labels: str = "", annotations: str = "") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: {name}{labels}}}
{f"  annotations: {{{annotations}}}" if annotations else ""}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: busybox
    command: [sleep, "3600"]
"""


def run(cluster: UpCluster, name: str) -> None:
    ok(
        cluster.kubectl(
            "run", name, "--image=busybox", "--restart=Never", "--command", "--", "sleep", "3600"
        )
    )


def test_run_and_wait(tinykube_up: UpCluster) -> None:
    result = tinykube_up.kubectl(
        "run", "runner", "--image=busybox", "--restart=Never", "--command", "--", "sleep", "3600"
    )
    assert (result.code, result.out, result.err) == (0, "pod/runner created\n", "")
    waited = tinykube_up.kubectl("wait", "--for=condition=Ready", "pod/runner", "--timeout=50s")
    assert waited.out == "pod/runner condition met\n"
    pod = json.loads(ok(tinykube_up.kubectl("get", "pod", "runner", "-o", "json")))
    assert pod["metadata"]["labels"] == {"run": "runner"}
    assert pod["spec"]["containers"][0]["command"] == ["sleep", "3600"]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["dnsPolicy"] == "ClusterFirst"
    assert pod["status"]["podIPs"] == [{"ip": pod["status"]["podIP"]}]


def test_apply_create_change_and_remove(tinykube_up: UpCluster, tmp_path: Path) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(pod_manifest("applied", ", tier: one", "note: first"))
    assert ok(tinykube_up.kubectl("apply", "-f", str(path))) == "pod/applied created\n"
    assert ok(tinykube_up.kubectl("apply", "-f", str(path))) == "pod/applied unchanged\n"
    path.write_text(pod_manifest("applied", ", tier: two", "note: first"))
    assert ok(tinykube_up.kubectl("apply", "-f", str(path))) == "pod/applied configured\n"
    assert_output(
        ok(tinykube_up.kubectl("get", "pod", "applied", "--show-labels")),
        """
NAME      READY   STATUS    RESTARTS   AGE   LABELS
applied   <*>     <*>       0          <age>   app=applied,tier=two
""",
    )
    # A label added by another hand survives apply; the removed ones (in the last-applied
    # annotation, no longer in the file) are deleted.
    ok(tinykube_up.kubectl("label", "pod", "applied", "extra=kept"))
    path.write_text(pod_manifest("applied"))
    assert ok(tinykube_up.kubectl("apply", "-f", str(path))) == "pod/applied configured\n"
    meta = json.loads(ok(tinykube_up.kubectl("get", "pod", "applied", "-o", "json")))["metadata"]
    assert meta["labels"] == {"app": "applied", "extra": "kept"}
    assert "note" not in meta["annotations"]
    last = json.loads(meta["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last["metadata"] == {"annotations": {}, "labels": {"app": "applied"}, "name": "applied", "namespace": "default"}  # fmt: skip  # noqa: E501


def test_create_twice_is_already_exists(tinykube_up: UpCluster) -> None:
    manifest = pod_manifest("created")
    assert ok(tinykube_up.kubectl("create", "-f", "-", stdin=manifest)) == "pod/created created\n"
    again = tinykube_up.kubectl("create", "-f", "-", stdin=manifest)
    assert again.code == 1
    assert again.err == (
        'Error from server (AlreadyExists): error when creating "STDIN": pods "created" already '
        "exists\n"
    )


def test_replace_and_stale_replace_conflict(tinykube_up: UpCluster) -> None:
    ok(tinykube_up.kubectl("create", "-f", "-", stdin=pod_manifest("replaced")))
    # Once Ready the pod is settled: the scheduler's bind and the kubelet's status updates
    # would otherwise move its resourceVersion past the copy, and the first replace conflict.
    ok(tinykube_up.kubectl("wait", "--for=condition=Ready", "pod/replaced", "--timeout=60s"))
    stale = ok(tinykube_up.kubectl("get", "pod", "replaced", "-o", "yaml"))
    fresh = stale.replace("app: replaced", "app: replaced\n    version: two")
    assert ok(tinykube_up.kubectl("replace", "-f", "-", stdin=fresh)) == "pod/replaced replaced\n"
    labels = ok(tinykube_up.kubectl("get", "pod", "replaced", "-o", "jsonpath={.metadata.labels}"))
    assert json.loads(labels) == {"app": "replaced", "version": "two"}
    conflict = tinykube_up.kubectl("replace", "-f", "-", stdin=stale)
    assert conflict.code == 1
    assert conflict.err == (
        'Error from server (Conflict): error when replacing "STDIN": Operation cannot be '
        'fulfilled on pods "replaced": the object has been modified; please apply your changes '
        "to the latest version and try again\n"
    )


def test_invalid_names_the_field(tinykube_up: UpCluster) -> None:
    bad = pod_manifest("invalid").replace("name: main", "name: Main_1")
    for verb in ("create", "apply"):
        result = tinykube_up.kubectl(verb, "-f", "-", stdin=bad)
        assert result.code == 1
        assert result.err == (
            'The Pod "invalid" is invalid: spec.containers[0].name: Invalid value: "Main_1": a '
            "lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-',"
            " and must start and end with an alphanumeric character (e.g. 'my-name',  or "
            "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')\n"
        )
    unknown = tinykube_up.kubectl(
        "create", "-f", "-", stdin=pod_manifest("strict").replace("image:", "imag:")
    )
    assert unknown.code == 1
    assert unknown.err == (
        'Error from server (BadRequest): error when creating "STDIN": Pod in version "v1" '
        "cannot be handled as a Pod: strict decoding error: unknown field "
        '"spec.containers[0].imag"\n'
    )


def test_delete_files_with_one_missing(tinykube_up: UpCluster, tmp_path: Path) -> None:
    there = tmp_path / "there.yaml"
    there.write_text(pod_manifest("doomed-a") + "---" + pod_manifest("doomed-b"))
    missing = tmp_path / "missing.yaml"
    missing.write_text(pod_manifest("never-made"))
    ok(tinykube_up.kubectl("apply", "-f", str(there)))
    result = tinykube_up.kubectl("delete", "-f", str(there), "-f", str(missing), "--wait=false")
    assert result.code == 1
    assert result.out == (
        'pod "doomed-a" deleted from default namespace\n'
        'pod "doomed-b" deleted from default namespace\n'
    )
    assert result.err == (
        f'Error from server (NotFound): error when deleting "{missing}": pods "never-made" not '
        "found\n"
    )
    quiet = tinykube_up.kubectl("delete", "-f", str(missing), "--ignore-not-found")
    assert (quiet.code, quiet.out, quiet.err) == (0, "", "")


def test_delete_waits_until_gone(tinykube_up: UpCluster) -> None:
    run(tinykube_up, "waited")
    ok(tinykube_up.kubectl("wait", "--for=condition=Ready", "pod/waited", "--timeout=50s"))
    # --wait (the default) returns once the kubelet has stopped the container and the pod is
    # gone, not when the deletion is accepted.
    result = tinykube_up.kubectl("delete", "pod", "waited", "--wait=true", "--timeout=50s")
    assert result.out == 'pod "waited" deleted from default namespace\n'
    gone = tinykube_up.kubectl("get", "pod", "waited")
    assert gone.err == 'Error from server (NotFound): pods "waited" not found\n'


def test_force_delete(tinykube_up: UpCluster) -> None:
    run(tinykube_up, "forced")
    result = tinykube_up.kubectl("delete", "pod", "forced", "--grace-period=0", "--force")
    assert result.code == 0
    assert result.out == 'pod "forced" force deleted from default namespace\n'
    assert result.err == (
        "Warning: Immediate deletion does not wait for confirmation that the running resource "
        "has been terminated. The resource may continue to run on the cluster indefinitely.\n"
    )
    gone = tinykube_up.kubectl("get", "pod", "forced")
    assert gone.err == 'Error from server (NotFound): pods "forced" not found\n'


def test_label_annotate_and_patch(tinykube_up: UpCluster) -> None:
    ok(tinykube_up.kubectl("create", "-f", "-", stdin=pod_manifest("patched")))
    assert ok(tinykube_up.kubectl("label", "pod", "patched", "tier=web")) == "pod/patched labeled\n"
    taken = tinykube_up.kubectl("label", "pod", "patched", "tier=db")
    assert taken.err == "error: 'tier' already has a value (web), and --overwrite is false\n"
    assert ok(tinykube_up.kubectl("label", "pod", "patched", "tier-")) == "pod/patched unlabeled\n"
    assert ok(tinykube_up.kubectl("annotate", "pod", "patched", "owner=me")) == (
        "pod/patched annotated\n"
    )
    patches = [
        ("strategic", '{"metadata":{"labels":{"s":"1"}}}'),
        ("merge", '{"metadata":{"labels":{"m":"2"}}}'),
        ("json", '[{"op":"add","path":"/metadata/labels/j","value":"3"}]'),
    ]
    for kind, patch in patches:
        result = tinykube_up.kubectl("patch", "pod", "patched", f"--type={kind}", "-p", patch)
        assert result.out == "pod/patched patched\n", result.err
    again = tinykube_up.kubectl(
        "patch", "pod", "patched", "-p", '{"metadata":{"labels":{"s":"1"}}}'
    )
    assert again.out == "pod/patched patched (no change)\n"
    pod = json.loads(ok(tinykube_up.kubectl("get", "pod", "patched", "-o", "json")))
    assert pod["metadata"]["labels"] == {"app": "patched", "s": "1", "m": "2", "j": "3"}
    assert pod["metadata"]["annotations"] == {"owner": "me"}
    bad = tinykube_up.kubectl(
        "patch", "pod", "patched", "--type=json", "-p", '[{"op":"remove","path":"/metadata/nope"}]'
    )
    assert bad.code == 1
    assert "the server rejected our request due to an error in our request" in bad.err


def test_edit_with_an_editor_script(tinykube_up: UpCluster, tmp_path: Path) -> None:
    ok(tinykube_up.kubectl("create", "-f", "-", stdin=pod_manifest("edited")))
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\nsed -i "s/app: edited$/app: edited\\n    by: editor/" "$1"\n')
    editor.chmod(editor.stat().st_mode | stat.S_IXUSR)
    result = tinykube_up.kubectl("edit", "pod", "edited", env={"EDITOR": str(editor)})
    assert (result.code, result.out) == (0, "pod/edited edited\n"), result.err
    labels = ok(tinykube_up.kubectl("get", "pod", "edited", "-o", "jsonpath={.metadata.labels}"))
    assert json.loads(labels) == {"app": "edited", "by": "editor"}
    unchanged = tinykube_up.kubectl("edit", "pod", "edited", env={"EDITOR": "true"})
    assert unchanged.err == "Edit cancelled, no changes made.\n"


def test_scale_a_replicaset(tinykube_up: UpCluster) -> None:
    rs = """
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: scaled}
spec:
  replicas: 1
  selector: {matchLabels: {app: scaled}}
  template:
    metadata: {labels: {app: scaled}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - {name: main, image: busybox, command: [sleep, "3600"]}
"""
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=rs))
    out = ok(tinykube_up.kubectl("scale", "rs/scaled", "--replicas=3"))
    assert out == "replicaset.apps/scaled scaled\n"
    ok(
        tinykube_up.kubectl(
            "wait", "--for=jsonpath={.status.readyReplicas}=3", "rs/scaled", "--timeout=50s"
        )
    )
    assert_output(
        ok(tinykube_up.kubectl("get", "rs", "scaled")),
        """
NAME     DESIRED   CURRENT   READY   AGE
scaled   3         3         3       <age>
""",
    )
    stale = tinykube_up.kubectl("scale", "rs/scaled", "--replicas=1", "--current-replicas=2")
    assert stale.code == 1
    assert stale.err == "error: Expected replicas to be 2, was 3\n"
    # Strategic merge merges a template's containers by name: the image changes, the command
    # stays. (The ReplicaSet's pods keep their image: a template change reaches new pods only.)
    patch = '{"spec":{"template":{"spec":{"containers":[{"name":"main","image":"busybox:1.36"}]}}}}'
    assert ok(tinykube_up.kubectl("patch", "rs", "scaled", "-p", patch)) == (
        "replicaset.apps/scaled patched\n"
    )
    container = json.loads(
        ok(
            tinykube_up.kubectl(
                "get", "rs", "scaled", "-o", "jsonpath={.spec.template.spec.containers[0]}"
            )
        )
    )
    assert (container["image"], container["command"]) == ("busybox:1.36", ["sleep", "3600"])
    ok(tinykube_up.kubectl("scale", "rs/scaled", "--replicas=1"))
    ok(
        tinykube_up.kubectl(
            "wait", "--for=jsonpath={.status.replicas}=1", "rs/scaled", "--timeout=50s"
        )
    )


def test_taint_cordon_uncordon(tinykube_up: UpCluster) -> None:
    node = "node-2"
    out = ok(tinykube_up.kubectl("taint", "node", node, "dedicated=gpu:NoSchedule"))
    assert out == f"node/{node} tainted\n"
    taints = ok(tinykube_up.kubectl("get", "node", node, "-o", "jsonpath={.spec.taints}"))
    assert json.loads(taints) == [{"effect": "NoSchedule", "key": "dedicated", "value": "gpu"}]
    again = tinykube_up.kubectl("taint", "node", node, "dedicated=gpu:NoSchedule")
    assert again.err == (
        "error: node node-2 already has dedicated taint(s) with same effect(s) and --overwrite "
        "is false\n"
    )
    assert ok(tinykube_up.kubectl("cordon", node)) == f"node/{node} cordoned\n"
    assert ok(tinykube_up.kubectl("cordon", node)) == f"node/{node} already cordoned\n"
    assert_output(
        ok(tinykube_up.kubectl("get", "node", node)),
        """
NAME     STATUS                     ROLES    AGE   VERSION
node-2   Ready,SchedulingDisabled   <none>   <age>   tinykube-v0.1.0
""",
    )
    # The node lifecycle controller adds node.kubernetes.io/unschedulable:NoSchedule to a
    # cordoned node within its monitor period, as Kubernetes' does, and describe lists it.
    cordoned_taints = (
        "Taints:             dedicated=gpu:NoSchedule\n"
        "                    node.kubernetes.io/unschedulable:NoSchedule\n"
    )

    def describe_when_tainted() -> str:
        described = ok(tinykube_up.kubectl("describe", "node", node))
        return described if cordoned_taints in described else ""

    described = until(describe_when_tainted, "the unschedulable taint on a cordoned node")
    assert "Unschedulable:      true\n" in described
    assert ok(tinykube_up.kubectl("uncordon", node)) == f"node/{node} uncordoned\n"
    until(
        lambda: (
            "unschedulable"
            not in ok(tinykube_up.kubectl("get", "node", node, "-o", "jsonpath={.spec.taints}"))
        ),
        "the unschedulable taint gone after uncordon",
    )
    out = ok(tinykube_up.kubectl("taint", "node", node, "dedicated-"))
    assert out == f"node/{node} untainted\n"
    assert ok(tinykube_up.kubectl("get", "node", node, "-o", "jsonpath={.spec}")) == "{}"
