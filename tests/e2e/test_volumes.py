"""Pod volumes under `tinykube up` (process runtime) with the real kubectl.

A configMap volume's file changes in the running container when the ConfigMap changes; a secret
volume's files have its defaultMode; an emptyDir is shared by two containers; every pod gets
kube's kube-api-access volume, whose token, CA and namespace let the official Python client,
run inside the pod, list pods. Process-runtime containers find their mounts under
$TINYKUBE_ROOT (docs/cri.md). Each test uses names of its own.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]


def apply(cluster: UpCluster, manifest: dict[str, object]) -> None:
    ok(cluster.kubectl("apply", "-f", "-", stdin=json.dumps(manifest)))


def logs(cluster: UpCluster, pod: str, container: str = "") -> str:
    args = ["logs", pod] + (["-c", container] if container else [])
    result = cluster.kubectl(*args)
    return result.out if result.code == 0 else ""


def pod(
    name: str, containers: list[dict[str, object]], volumes: list[dict[str, object]]
) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": containers, "volumes": volumes},
    }


def sh(name: str, script: str, mounts: list[dict[str, object]]) -> dict[str, object]:
    return {
        "name": name,
        "image": "busybox",
        "command": ["sh", "-c", script],
        "volumeMounts": mounts,
    }


def test_a_config_map_update_reaches_the_running_container(tinykube_up: UpCluster) -> None:
    ok(tinykube_up.kubectl("create", "configmap", "vol-cfg", "--from-literal=greeting=hello"))
    script = 'while true; do echo "seen=$(cat $TINYKUBE_ROOT/etc/cfg/greeting)"; sleep 0.3; done'
    apply(
        tinykube_up,
        pod(
            "vol-cm",
            [sh("main", script, [{"name": "cfg", "mountPath": "/etc/cfg", "readOnly": True}])],
            [{"name": "cfg", "configMap": {"name": "vol-cfg"}}],
        ),
    )
    until(lambda: "seen=hello" in logs(tinykube_up, "vol-cm"), "the ConfigMap's file")
    ok(
        tinykube_up.kubectl(
            "patch", "configmap", "vol-cfg", "-p", json.dumps({"data": {"greeting": "bye"}})
        )
    )
    until(lambda: "seen=bye" in logs(tinykube_up, "vol-cm"), "the updated file", limit=90)
    out = ok(tinykube_up.kubectl("get", "pod", "vol-cm", "-o", "json"))
    assert json.loads(out)["status"]["containerStatuses"][0]["restartCount"] == 0
    ok(tinykube_up.kubectl("delete", "pod", "vol-cm", "--wait=true"))


def test_a_secret_volume_has_its_default_mode(tinykube_up: UpCluster) -> None:
    ok(
        tinykube_up.kubectl(
            "create", "secret", "generic", "vol-sec", "--from-literal=password=s3cret"
        )
    )
    script = (
        'echo "mode=$(stat -L -c %a $TINYKUBE_ROOT/etc/sec/password) '
        'value=$(cat $TINYKUBE_ROOT/etc/sec/password)"; sleep 3600'
    )
    apply(
        tinykube_up,
        pod(
            "vol-secret",
            [sh("main", script, [{"name": "sec", "mountPath": "/etc/sec"}])],
            [{"name": "sec", "secret": {"secretName": "vol-sec", "defaultMode": 0o400}}],
        ),
    )
    until(lambda: "mode=400 value=s3cret" in logs(tinykube_up, "vol-secret"), "the secret's file")
    ok(tinykube_up.kubectl("delete", "pod", "vol-secret", "--wait=true"))


def test_an_empty_dir_is_shared_by_two_containers(tinykube_up: UpCluster) -> None:
    writer = sh(
        "writer",
        "echo from-writer > $TINYKUBE_ROOT/data/shared; sleep 3600",
        [{"name": "scratch", "mountPath": "/data"}],
    )
    reader = sh(
        "reader",
        "while true; do cat $TINYKUBE_ROOT/work/shared 2>/dev/null; sleep 0.3; done",
        [{"name": "scratch", "mountPath": "/work"}],
    )
    apply(tinykube_up, pod("vol-empty", [writer, reader], [{"name": "scratch", "emptyDir": {}}]))
    until(lambda: "from-writer" in logs(tinykube_up, "vol-empty", "reader"), "the shared file")
    ok(tinykube_up.kubectl("delete", "pod", "vol-empty", "--wait=true"))


def test_the_kubernetes_service_points_at_the_apiserver(tinykube_up: UpCluster) -> None:
    svc = json.loads(ok(tinykube_up.kubectl("get", "service", "kubernetes", "-o", "json")))
    assert svc["spec"]["clusterIP"] == "127.100.0.1"
    assert svc["spec"]["ports"][0]["name"] == "https" and svc["spec"]["ports"][0]["port"] == 443
    rest_port = int(tinykube_up.rest_url.rsplit(":", 1)[1])
    ep = json.loads(ok(tinykube_up.kubectl("get", "endpoints", "kubernetes", "-o", "json")))
    assert ep["subsets"][0]["ports"][0]["port"] == rest_port


def test_bad_mounts_are_refused_with_kubes_message(tinykube_up: UpCluster) -> None:
    bad = pod("vol-bad", [sh("main", "true", [{"name": "x", "mountPath": "/x"}])], [])
    result = tinykube_up.kubectl("apply", "-f", "-", stdin=json.dumps(bad))
    assert result.code != 0
    assert 'spec.containers[0].volumeMounts[0].name: Not found: "x"' in result.err


def _can_bind_443() -> bool:
    """Whether the proxy may listen on the kubernetes Service's port 443 (root, or a lowered
    net.ipv4.ip_unprivileged_port_start)."""
    start = Path("/proc/sys/net/ipv4/ip_unprivileged_port_start")
    return os.geteuid() == 0 or (start.exists() and int(start.read_text()) <= 443)


@pytest.mark.skipif(not _can_bind_443(), reason="the proxy cannot listen on port 443 unprivileged")
def test_the_python_client_lists_pods_in_cluster_with_its_token(tinykube_up: UpCluster) -> None:
    ok(
        tinykube_up.kubectl(
            "create", "rolebinding", "vol-view", "--clusterrole=view",
            "--serviceaccount=default:default",
        )
    )  # fmt: skip
    program = textwrap.dedent(
        """
        import os
        from kubernetes import client
        from kubernetes.config.incluster_config import InClusterConfigLoader
        sa = os.environ["TINYKUBE_ROOT"] + "/var/run/secrets/kubernetes.io/serviceaccount"
        print("api:", os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
        # load_incluster_config() with the token and CA where the process runtime has them.
        loader = InClusterConfigLoader(token_filename=sa + "/token", cert_filename=sa + "/ca.crt")
        loader.load_and_set()
        ns = open(sa + "/namespace").read()
        names = [p.metadata.name for p in client.CoreV1Api().list_namespaced_pod(ns).items]
        print("pods:", " ".join(sorted(names)), flush=True)
        """
    )
    manifest = pod("vol-incluster", [], [])
    manifest["spec"]["containers"] = [  # type: ignore[index]
        {
            "name": "main",
            "image": "python",
            "command": ["sh", "-c", f'{sys.executable} -c "$PROGRAM"; sleep 3600'],
            "env": [{"name": "PROGRAM", "value": program}],
        }
    ]
    apply(tinykube_up, manifest)

    def answer() -> str:
        out = logs(tinykube_up, "vol-incluster")
        return out if "pods:" in out or "Traceback" in out else ""

    got = until(answer, "the client's answer", limit=90)
    assert "api: 127.100.0.1 443" in got and "vol-incluster" in got, got
    spec = json.loads(ok(tinykube_up.kubectl("get", "pod", "vol-incluster", "-o", "json")))["spec"]
    assert spec["volumes"][0]["name"].startswith("kube-api-access-")
    ok(tinykube_up.kubectl("delete", "pod", "vol-incluster", "--wait=true"))
