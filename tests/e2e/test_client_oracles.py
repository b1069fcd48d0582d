"""Every object of a lived-in cluster, read by two independent oracles of Kubernetes' JSON.

One `tinykube up` cluster runs a bit of everything (Deployments, a DaemonSet, a Job that
completes and one that fails, a crash-looping pod, Services, ConfigMaps, Secrets, a PDB,
PriorityClasses, RBAC objects, a Namespace; the cluster adds Events, Leases, ServiceAccounts
and its Node). Then every kind the REST API serves (found by discovery, not from a list here)
is listed, and every item is checked by

- Kubernetes' own JSON schemas (kubernetes-validate, 1.37, strict: no unknown fields either),
- the official Python client's typed deserializer (`kubernetes` 37: pydantic models that
  refuse an object without a field Kubernetes' OpenAPI requires),

and, as users hit the same failures there, by kubernetes-asyncio's models and lightkube's.

Typed watches, patch and scale responses, logs and deletes through the Python client are
checked too: they are what failed for users (`V1NodeSystemInfo: required bootID`,
`V1ContainerStatus: required imageID, restartCount`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok

pytestmark = pytest.mark.e2e

kubernetes_validate = pytest.importorskip("kubernetes_validate")
k8s = pytest.importorskip("kubernetes.client")
k8s_config = pytest.importorskip("kubernetes.config")
k8s_watch = pytest.importorskip("kubernetes.watch")
k8s_asyncio = pytest.importorskip("kubernetes_asyncio.client")
lightkube_codecs = pytest.importorskip("lightkube.codecs")

KUBE_VERSION = "1.37.0"
NS = "oracles"
WAIT = "--timeout=90s"

MANIFEST = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: zero}}
value: 0
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: high}}
value: 1000
description: high
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {NS}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      priorityClassName: zero
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: python:3
        command: [sleep, "86400"]
        ports: [{{containerPort: 8080, name: http}}]
        env:
        - name: CPU
          valueFrom: {{resourceFieldRef: {{resource: limits.cpu}}}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent, namespace: {NS}}}
spec:
  selector: {{matchLabels: {{app: agent}}}}
  template:
    metadata: {{labels: {{app: agent}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {{name: agent, image: busybox, command: [sleep, "86400"]}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: ok, namespace: {NS}}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - {{name: work, image: busybox, command: ["true"]}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: bad, namespace: {NS}}}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - {{name: work, image: busybox, command: [sh, -c, "exit 3"]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: crasher, namespace: {NS}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {{name: crash, image: busybox, command: [sh, -c, "exit 1"]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: evictee, namespace: {NS}}}
spec:
  # Ignores SIGTERM, so it stays evicted-and-terminating for the whole grace period, which
  # outlasts the module on any machine (the cluster's stop ends it).
  terminationGracePeriodSeconds: 3600
  containers:
  - {{name: stays, image: busybox, command: [sh, -c, "trap '' TERM; sleep 86400"]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: unschedulable, namespace: {NS}}}
spec:
  nodeSelector: {{oracle: nowhere}}
  containers:
  - {{name: waits, image: busybox, command: [sleep, "86400"]}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {NS}}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: http}}]
---
apiVersion: v1
kind: Service
metadata: {{name: nodeport, namespace: {NS}}}
spec:
  type: NodePort
  selector: {{app: web}}
  ports: [{{port: 8080}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, namespace: {NS}}}
data: {{mode: fast}}
---
apiVersion: v1
kind: Secret
metadata: {{name: token, namespace: {NS}}}
stringData: {{token: s3cret}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: web, namespace: {NS}}}
spec:
  minAvailable: 1
  selector: {{matchLabels: {{app: web}}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: robot, namespace: {NS}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: reader, namespace: {NS}}}
rules:
- {{apiGroups: [""], resources: [pods], verbs: [get, list]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: reader, namespace: {NS}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}}
subjects:
- {{kind: ServiceAccount, name: robot, namespace: {NS}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: oracle-reader}}
rules:
- {{apiGroups: [""], resources: [nodes], verbs: [get]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: oracle-reader}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: oracle-reader}}
subjects:
- {{kind: User, name: someone, apiGroup: rbac.authorization.k8s.io}}
"""


@pytest.fixture(scope="module")
def cluster(tinykube_up: UpCluster) -> Iterator[UpCluster]:
    """The manifest applied, and every workload in the state it is there for."""
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=MANIFEST))
    n = f"--namespace={NS}"
    ok(tinykube_up.kubectl("wait", n, "--for=condition=Available", "deploy/web", WAIT, timeout=120))
    ok(tinykube_up.kubectl("wait", n, "--for=condition=Complete", "job/ok", WAIT, timeout=120))
    ok(tinykube_up.kubectl("wait", n, "--for=condition=Failed", "job/bad", WAIT, timeout=120))
    ok(tinykube_up.kubectl("rollout", "status", n, "ds/agent", WAIT, timeout=120))
    ok(
        tinykube_up.kubectl(
            "wait",
            n,
            "--for=jsonpath={.status.containerStatuses[0].state.waiting.reason}=CrashLoopBackOff",
            "pod/crasher",
            WAIT,
            timeout=120,
        )
    )
    ok(
        tinykube_up.kubectl(
            "wait",
            n,
            "--for=condition=PodScheduled=False",
            "pod/unschedulable",
            WAIT,
            timeout=120,
        )
    )
    ok(tinykube_up.kubectl("wait", n, "--for=condition=Ready", "pod/evictee", WAIT, timeout=120))
    evict(tinykube_up, "evictee")
    ok(
        tinykube_up.kubectl(
            "wait", n, "--for=condition=DisruptionTarget", "pod/evictee", WAIT, timeout=120
        )
    )
    yield tinykube_up


def evict(cluster: UpCluster, name: str) -> None:
    """Evict a pod through the Eviction API (what `kubectl drain` does)."""
    api = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    eviction = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=name, namespace=NS))
    api.create_namespaced_pod_eviction(name, NS, eviction)


@pytest.fixture(scope="module")
def api_client(cluster: UpCluster) -> Any:
    return k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))


class _Body:
    """What kubernetes-asyncio's deserialize reads of a response."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = json.dumps(data)


@pytest.fixture(scope="module")
def asyncio_client() -> Iterator[Any]:
    """A kubernetes-asyncio ApiClient (made on a loop of its own: it wants one running)."""
    loop = asyncio.new_event_loop()

    async def make() -> Any:
        return k8s_asyncio.ApiClient()

    client = loop.run_until_complete(make())
    try:
        yield client
    finally:
        loop.run_until_complete(client.close())
        loop.close()


def raw(cluster: UpCluster, path: str) -> Any:
    return json.loads(ok(cluster.kubectl("get", "--raw", path)))


def served_kinds(cluster: UpCluster) -> list[tuple[str, str, str]]:
    """(group/version path, resource, kind) of every listable top-level resource."""
    found = []
    versions = ["/api/v1"] + [
        f"/apis/{g['preferredVersion']['groupVersion']}" for g in raw(cluster, "/apis")["groups"]
    ]
    for base in versions:
        for res in raw(cluster, base)["resources"]:
            if "/" not in res["name"] and "list" in res.get("verbs", []):
                found.append((base, res["name"], res["kind"]))
    return found


def model_name(api_version: str, kind: str) -> str:
    """The Python client's model for a kind: V1Pod, V1PodList; core Events are CoreV1Event."""
    version = api_version.rsplit("/", 1)[-1]
    name = f"{version[0].upper()}{version[1:]}{kind}"
    if kind in ("Event", "EventList"):
        group = api_version.split("/")[0].split(".")[0] if "/" in api_version else "core"
        name = f"{group[0].upper()}{group[1:]}{name}"
    return name


def typed(api_client: Any, data: dict[str, Any], model: str) -> Any:
    return api_client.deserialize(json.dumps(data), model, "application/json")


def check_schema(data: dict[str, Any]) -> None:
    kubernetes_validate.validate(data, KUBE_VERSION, strict=True)


def test_every_object_of_every_kind_passes_every_oracle(
    cluster: UpCluster, api_client: Any, asyncio_client: Any
) -> None:
    kinds = served_kinds(cluster)
    assert {k for _, _, k in kinds} >= {
        "Pod",
        "Node",
        "Deployment",
        "DaemonSet",
        "Job",
        "Event",
        "Lease",
        "PodDisruptionBudget",
        "PriorityClass",
    }
    checked: dict[str, int] = {}
    failures: list[str] = []
    for base, resource, kind in kinds:
        listed = raw(cluster, f"{base}/{resource}")
        api_version = base.split("/", 2)[-1]
        if api_version == "events.k8s.io/v1":
            # Events recorded through core/v1 (the kubelet's and controllers', as in kube) have
            # no eventTime, and events.k8s.io/v1 shows them with `eventTime: null`, as
            # kube-apiserver does; its schema and the typed clients require one, and fail on
            # kube's own kubelet events the same way. Only events with one are checked.
            listed["items"] = [i for i in listed["items"] if i.get("eventTime")]
        try:
            typed(api_client, listed, model_name(api_version, f"{kind}List"))
        except Exception as exc:
            failures.append(f"{kind}List: {exc}")
        for item in listed["items"]:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            where = f"{kind} {item['metadata'].get('namespace', '')}/{item['metadata']['name']}"
            try:
                check_schema(item)
            except Exception as exc:
                failures.append(f"{where}: schema: {exc}")
            try:
                typed(api_client, item, model_name(api_version, kind))
            except Exception as exc:
                failures.append(f"{where}: python client: {exc}")
            try:
                asyncio_client.deserialize(_Body(item), model_name(api_version, kind))
            except Exception as exc:
                failures.append(f"{where}: kubernetes-asyncio: {exc}")
            try:
                lightkube_codecs.from_dict(item)
            except Exception as exc:
                failures.append(f"{where}: lightkube: {exc}")
            checked[kind] = checked.get(kind, 0) + 1
    assert not failures, "\n\n".join(failures)
    # Every state the manifest set up was there to be checked.
    for kind in ("Pod", "Node", "Deployment", "ReplicaSet", "Job", "Event", "Lease"):
        assert checked.get(kind), f"no {kind} was listed: {checked}"
    pods = raw(cluster, f"/api/v1/namespaces/{NS}/pods")["items"]
    phases = {p["status"].get("phase") for p in pods}
    assert {"Pending", "Running", "Succeeded", "Failed"} <= phases, phases
    evicted = next(p for p in pods if p["metadata"]["name"] == "evictee")
    assert "deletionTimestamp" in evicted["metadata"]
    assert "DisruptionTarget" in {c["type"] for c in evicted["status"]["conditions"]}


def test_a_running_and_a_crash_looping_pod_print_what_kubernetes_prints(
    cluster: UpCluster,
) -> None:
    crasher = raw(cluster, f"/api/v1/namespaces/{NS}/pods/crasher")
    (status,) = crasher["status"]["containerStatuses"]
    # Between back-offs the container runs for a moment, and is then started (no startup
    # probe), as in kube; otherwise it waits in CrashLoopBackOff and is not.
    assert status["ready"] is False and status["started"] is ("running" in status["state"])
    assert isinstance(status["restartCount"], int)
    assert status["imageID"].startswith("sha256:")
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert all("lastProbeTime" in c for c in crasher["status"]["conditions"])
    web = raw(cluster, f"/api/v1/namespaces/{NS}/pods?labelSelector=app%3Dweb")["items"][0]
    (running,) = web["status"]["containerStatuses"]
    assert running["restartCount"] == 0 and running["lastState"] == {}
    assert running["imageID"].startswith("sha256:") and running["imageID"] != status["imageID"]
    assert web["spec"]["containers"][0]["resources"] == {}
    node = raw(cluster, "/api/v1/nodes")["items"][0]
    info = node["status"]["nodeInfo"]
    assert info["kubeProxyVersion"] == ""
    assert info["bootID"] and info["systemUUID"]


def test_python_client_typed_calls(cluster: UpCluster, api_client: Any) -> None:
    core = k8s.CoreV1Api(api_client)
    apps = k8s.AppsV1Api(api_client)
    nodes = core.list_node()
    assert nodes.items and nodes.items[0].status.node_info.boot_id
    node_name = nodes.items[0].metadata.name
    patched_node = core.patch_node(node_name, {"metadata": {"labels": {"oracle": "yes"}}})
    assert patched_node.metadata.labels["oracle"] == "yes"

    pods = core.list_namespaced_pod(NS)
    assert pods.items
    assert all(
        cs.image_id is not None for p in pods.items for cs in p.status.container_statuses or []
    )

    # A typed watch from the list's resourceVersion: the pod created below arrives typed, as
    # do its status changes up to Running.
    rv = pods.metadata.resource_version
    body = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="typed", labels={"client": "python"}),
        spec=k8s.V1PodSpec(
            termination_grace_period_seconds=1,
            containers=[
                k8s.V1Container(
                    name="c", image="busybox", command=["sh", "-c", "echo hello; sleep 86400"]
                )
            ],
        ),
    )
    created = core.create_namespaced_pod(NS, body)
    assert created.metadata.uid
    watcher = k8s_watch.Watch()
    running = None
    for event in watcher.stream(
        core.list_namespaced_pod,
        NS,
        resource_version=rv,
        field_selector="metadata.name=typed",
        timeout_seconds=60,
    ):
        obj = event["object"]
        assert isinstance(obj, k8s.V1Pod)
        if obj.status.phase == "Running" and obj.status.container_statuses[0].ready:
            running = obj
            watcher.stop()
    assert running is not None, "the typed watch never saw the pod running"
    assert running.status.container_statuses[0].restart_count == 0

    patched = core.patch_namespaced_pod("typed", NS, {"metadata": {"labels": {"p": "1"}}})
    assert patched.metadata.labels["p"] == "1"
    assert patched.status.container_statuses[0].image_id

    # The container writes its line as it starts: poll for it (a condition, not a sleep).
    log = core.read_namespaced_pod_log("typed", NS)
    deadline = time.monotonic() + 30
    while log != "hello\n" and time.monotonic() < deadline:
        time.sleep(0.2)
        log = core.read_namespaced_pod_log("typed", NS)
    assert log == "hello\n"

    deployments = apps.list_namespaced_deployment(NS)
    assert [d.metadata.name for d in deployments.items] == ["web"]
    scale = apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 3}})
    assert scale.spec.replicas == 3
    deployment = apps.read_namespaced_deployment("web", NS)
    assert deployment.spec.replicas == 3
    applied = apps.patch_namespaced_deployment(
        "web", NS, {"metadata": {"annotations": {"oracle": "yes"}}}
    )
    assert applied.metadata.annotations["oracle"] == "yes"

    # A server-side apply's response, typed: a Service with its always-printed status.
    applied_svc = core.patch_namespaced_service(
        "applied",
        NS,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "applied", "namespace": NS},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 81}]},
        },
        field_manager="oracle",
        _content_type="application/apply-patch+yaml",
    )
    assert applied_svc.spec.ports[0].target_port == 81
    assert applied_svc.status.load_balancer is not None

    status = core.delete_namespaced_pod("typed", NS)
    assert status is not None
    # Gone before the next test watches the namespace's pods (a graceful deletion ends with a
    # DELETED event the kubelet's stop decides the time of).
    ok(cluster.kubectl("wait", f"--namespace={NS}", "--for=delete", "pod/typed", WAIT, timeout=120))
    for kind_list in (
        core.list_namespaced_service(NS),
        core.list_namespaced_config_map(NS),
        core.list_namespaced_secret(NS),
        core.list_namespaced_service_account(NS),
        core.list_namespaced_event(NS),
        apps.list_namespaced_daemon_set(NS),
        apps.list_namespaced_replica_set(NS),
        k8s.BatchV1Api(api_client).list_namespaced_job(NS),
        k8s.PolicyV1Api(api_client).list_namespaced_pod_disruption_budget(NS),
        k8s.SchedulingV1Api(api_client).list_priority_class(),
        k8s.RbacAuthorizationV1Api(api_client).list_namespaced_role(NS),
        k8s.RbacAuthorizationV1Api(api_client).list_cluster_role_binding(),
        k8s.CoordinationV1Api(api_client).list_namespaced_lease("kube-node-lease"),
    ):
        assert kind_list.items, type(kind_list).__name__


def get_as(api_client: Any, path: str, accept: str) -> Any:
    """GET `path` with an Accept header, through the Python client's own connection."""
    method, url, headers, body, _ = api_client.param_serialize(
        "GET", path, header_params={"Accept": accept}, auth_settings=["BearerToken"]
    )
    response = api_client.call_api(method, url, header_params=headers, body=body)
    response.read()
    assert response.status == 200, response.data
    return json.loads(response.data)


def test_table_rows_and_watch_events_carry_the_fields(cluster: UpCluster, api_client: Any) -> None:
    table = get_as(
        api_client,
        f"/api/v1/namespaces/{NS}/pods?includeObject=Object",
        "application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    assert table["kind"] == "Table" and table["rows"]
    for row in table["rows"]:
        pod = row["object"]
        check_schema(pod)
        typed(api_client, pod, "V1Pod")
    # A raw watch's events: each object as the list prints it.
    lines = ok(
        cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{NS}/pods?watch=1&timeoutSeconds=1")
    )
    events = [json.loads(line) for line in lines.splitlines() if line.strip()]
    # Every pod ADDED first; a pod that changes meanwhile (the crash-looping one) MODIFIED.
    assert events and events[0]["type"] == "ADDED"
    assert {e["type"] for e in events} <= {"ADDED", "MODIFIED"}
    for event in events:
        check_schema(event["object"])
        typed(api_client, event["object"], "V1Pod")


def test_lightkube_reads_watches_and_patches(cluster: UpCluster) -> None:
    lightkube = pytest.importorskip("lightkube")
    from lightkube.resources.apps_v1 import Deployment
    from lightkube.resources.core_v1 import Node, Pod

    client = lightkube.Client(config=lightkube.KubeConfig.from_file(str(cluster.kubeconfig)))
    assert all(node.status.nodeInfo.bootID for node in client.list(Node))
    pods = list(client.list(Pod, namespace=NS))
    assert {p.metadata.name for p in pods} >= {"crasher", "unschedulable"}
    for kind, pod in client.watch(Pod, namespace=NS, fields={"metadata.name": "crasher"}):
        assert kind == "ADDED" and pod.status.containerStatuses[0].imageID
        break
    patched = client.patch(Pod, "crasher", {"metadata": {"labels": {"lk": "1"}}}, namespace=NS)
    assert patched.metadata.labels["lk"] == "1"
    assert patched.status.containerStatuses[0].restartCount >= 0
    assert client.get(Deployment, "web", namespace=NS).status.replicas


def test_kubernetes_asyncio_reads_watches_and_patches(cluster: UpCluster) -> None:
    config = pytest.importorskip("kubernetes_asyncio.config")
    watch = pytest.importorskip("kubernetes_asyncio.watch")

    async def run() -> None:
        async with await config.new_client_from_config(
            config_file=str(cluster.kubeconfig)
        ) as api_client:
            core = k8s_asyncio.CoreV1Api(api_client)
            nodes = await core.list_node()
            assert all(n.status.node_info.system_uuid for n in nodes.items)
            pods = await core.list_namespaced_pod(NS)
            # A watch without a resourceVersion starts with every pod, typed.
            names: set[str] = set()
            w = watch.Watch()
            async for event in w.stream(core.list_namespaced_pod, NS, timeout_seconds=30):
                names.add(event["object"].metadata.name)
                if len(names) >= len(pods.items):
                    w.stop()
            assert names >= {p.metadata.name for p in pods.items}
            patched = await core.patch_namespaced_pod(
                "crasher", NS, {"metadata": {"labels": {"ka": "1"}}}
            )
            assert patched.metadata.labels["ka"] == "1"
            assert patched.status.container_statuses[0].image_id
            pod = await core.read_namespaced_pod("crasher", NS)
            assert pod.status.container_statuses[0].restart_count >= 0

    asyncio.run(run())
