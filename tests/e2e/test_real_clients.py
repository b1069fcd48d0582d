"""Real clients, driven as their own documentation shows, against one `tinykube up` cluster.

- `@kubernetes/client-node` (JavaScript, on node 22 from npm): `makeInformer` over a
  namespace's pods sees adds, updates and deletes, and its typed APIs (CoreV1Api, AppsV1Api)
  read lists and a Node through the library's ObjectSerializer.
- kubernetes-asyncio: a typed watch stopped and resumed from its last resourceVersion loses
  and repeats nothing; a watch from a too old resourceVersion gets 410 and the caller relists.
- lightkube: typed Pods (create, get, list, watch, delete) and server-side apply with field
  managers (a change applied, a conflict refused with 409, `force=True` winning).
- The official Python client, typed, over every kind issue 22 lists: create, list, watch,
  patch and delete, each answer deserialized into the client's models.

test_client_oracles.py checks every object of a lived-in cluster against schemas and typed
deserializers; this module checks the clients' own code paths (informers, watch resumption,
apply, typed bodies) end to end.
"""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import ok
from tests.e2e.nodejs import client_node

pytestmark = pytest.mark.e2e

k8s = pytest.importorskip("kubernetes.client")
k8s_config = pytest.importorskip("kubernetes.config")
k8s_watch = pytest.importorskip("kubernetes.watch")

NS = "clients"
EVENT_WAIT = 90.0


# The apiserver compacts etcd every COMPACTION seconds (kube-apiserver's
# --etcd-compaction-interval, 5 minutes by default) to the revision it saw one interval before,
# and trims its watch caches there: a watch from before that answers 410 Gone.
COMPACTION = "30"


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[UpCluster]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TINYKUBE_COMPACTION_INTERVAL", COMPACTION)
        up: UpCluster = request.getfixturevalue("tinykube_up")
    ok(up.kubectl("create", "namespace", NS))
    yield up


@pytest.fixture(scope="module")
def first_revision(cluster: UpCluster, api_client: Any) -> str:
    """A resourceVersion from the module's start: compacted away a minute or two later."""
    return str(k8s.CoreV1Api(api_client).list_namespaced_pod(NS).metadata.resource_version)


@pytest.fixture(scope="module")
def api_client(cluster: UpCluster) -> Any:
    return k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))


def pod_manifest(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "clients", **labels}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "86400"]}],
        },
    }


# --- @kubernetes/client-node ------------------------------------------------------------------

INFORMER_JS = """\
import * as k8s from '@kubernetes/client-node';
import * as readline from 'node:readline';

const [kubeconfig, namespace, nodeName] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\\n');

const kc = new k8s.KubeConfig();
kc.loadFromFile(kubeconfig);
const core = kc.makeApiClient(k8s.CoreV1Api);
const apps = kc.makeApiClient(k8s.AppsV1Api);

// Typed calls: the ObjectSerializer turns the JSON into the library's models (Dates included).
const pods = await core.listNamespacedPod({ namespace });
out({ call: 'listNamespacedPod', kind: pods.kind, rv: pods.metadata.resourceVersion,
      names: pods.items.map((p) => p.metadata.name) });
const node = await core.readNode({ name: nodeName });
out({ call: 'readNode', name: node.metadata.name, bootID: node.status.nodeInfo.bootID,
      created: node.metadata.creationTimestamp instanceof Date,
      ready: node.status.conditions.find((c) => c.type === 'Ready').status,
      heartbeat: node.status.conditions[0].lastHeartbeatTime instanceof Date });
const deployments = await apps.listNamespacedDeployment({ namespace });
out({ call: 'listNamespacedDeployment', names: deployments.items.map((d) => d.metadata.name),
      replicas: deployments.items.map((d) => d.spec.replicas) });

// The generic object API (it finds the resource through discovery): a server-side apply.
const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
const applied = await objects.patch(
  { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'js-applied', namespace },
    data: { from: 'client-node' } },
  undefined, undefined, 'client-node', true, k8s.PatchStrategy.ServerSideApply);
out({ call: 'apply', kind: applied.kind, data: applied.data,
      managers: applied.metadata.managedFields.map((m) => [m.manager, m.operation]) });

const informer = k8s.makeInformer(kc, `/api/v1/namespaces/${namespace}/pods`,
  () => core.listNamespacedPod({ namespace }));
for (const verb of ['add', 'update', 'delete']) {
  informer.on(verb, (pod) => out({ event: verb, name: pod.metadata.name,
    rv: pod.metadata.resourceVersion, phase: pod.status?.phase ?? null,
    labels: pod.metadata.labels ?? {},
    deleting: pod.metadata.deletionTimestamp instanceof Date }));
}
informer.on('error', (err) => {
  out({ event: 'error', error: String(err) });
  // As the library's README example: restart the informer after an error.
  setTimeout(() => informer.start(), 1000);
});
await informer.start();
out({ event: 'started' });

// Commands on stdin: "list" prints the informer's cache.
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  if (line.trim() === 'list') {
    out({ cache: informer.list(namespace).map((p) => p.metadata.name).sort() });
  }
});
rl.on('close', async () => { await informer.stop(); process.exit(0); });
"""


class Lines:
    """A child's stdout as a queue of JSON objects, read by a thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip():
                try:
                    self.queue.put(json.loads(line))
                except json.JSONDecodeError:
                    self.queue.put({"unparsed": line})
        self.queue.put(None)

    def until(
        self, match: Callable[[dict[str, Any]], bool], timeout: float = EVENT_WAIT
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                item = self.queue.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no matching line within {timeout}s; saw:\n{self._dump()}")
            if item is None:
                stderr = self.process.stderr.read() if self.process.stderr else ""
                pytest.fail(f"the program exited:\n{self._dump()}\n{stderr}")
            self.seen.append(item)
            assert "unparsed" not in item, item
            if match(item):
                return item

    def _dump(self) -> str:
        return "\n".join(json.dumps(i) for i in self.seen[-40:])


def test_client_node_informer_and_typed_apis(
    cluster: UpCluster, api_client: Any, first_revision: str, tmp_path: Path
) -> None:
    nodejs = client_node()
    apps = k8s.AppsV1Api(api_client)
    core = k8s.CoreV1Api(api_client)
    apps.create_namespaced_deployment(
        NS,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "js-web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "js-web"}},
                "template": {
                    "metadata": {"labels": {"app": "js-web"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {"name": "c", "image": "busybox", "command": ["sleep", "86400"]}
                        ],
                    },
                },
            },
        },
    )
    node_name = core.list_node().items[0].metadata.name
    program = nodejs.program(tmp_path, "informer.mjs", INFORMER_JS)
    process = subprocess.Popen(
        [str(nodejs.node), str(program), str(cluster.kubeconfig), NS, node_name],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = Lines(process)
    try:
        listed = lines.until(lambda i: i.get("call") == "listNamespacedPod")
        assert listed["kind"] == "PodList" and listed["rv"]
        read = lines.until(lambda i: i.get("call") == "readNode")
        assert read == {
            "call": "readNode",
            "name": node_name,
            "bootID": read["bootID"],
            "created": True,
            "ready": "True",
            "heartbeat": True,
        }
        assert read["bootID"]
        deployments = lines.until(lambda i: i.get("call") == "listNamespacedDeployment")
        assert deployments["names"] == ["js-web"] and deployments["replicas"] == [1]
        applied = lines.until(lambda i: i.get("call") == "apply")
        assert applied == {
            "call": "apply",
            "kind": "ConfigMap",
            "data": {"from": "client-node"},
            "managers": [["client-node", "Apply"]],
        }
        lines.until(lambda i: i.get("event") == "started")

        # The informer's initial list already holds the deployment's pod (or will add it).
        core.create_namespaced_pod(NS, pod_manifest("js-a"))
        lines.until(lambda i: i.get("event") == "add" and i["name"] == "js-a")
        lines.until(
            lambda i: i.get("event") == "update" and i["name"] == "js-a" and i["phase"] == "Running"
        )
        core.patch_namespaced_pod("js-a", NS, {"metadata": {"labels": {"seen": "yes"}}})
        lines.until(
            lambda i: (
                i.get("event") == "update"
                and i["name"] == "js-a"
                and i["labels"].get("seen") == "yes"
            )
        )
        assert process.stdin is not None
        process.stdin.write("list\n")
        process.stdin.flush()
        cache = lines.until(lambda i: "cache" in i)["cache"]
        assert "js-a" in cache
        core.delete_namespaced_pod("js-a", NS)
        gone = lines.until(lambda i: i.get("event") == "delete" and i["name"] == "js-a")
        assert gone["name"] == "js-a"
        process.stdin.write("list\n")
        process.stdin.flush()
        cache = lines.until(lambda i: "cache" in i)["cache"]
        assert "js-a" not in cache
        assert any(name.startswith("js-web-") for name in cache), cache
        errors = [i for i in lines.seen if i.get("event") == "error"]
        assert not errors, errors
        process.stdin.close()
        assert process.wait(30) == 0, process.stderr.read() if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        apps.delete_namespaced_deployment("js-web", NS)


# --- kubernetes-asyncio -----------------------------------------------------------------------


def gated_pod(name: str) -> dict[str, Any]:
    """A pod that waits on a scheduling gate: it never runs, so its events are only ours."""
    pod = pod_manifest(name, watch="resume")
    pod["spec"]["schedulingGates"] = [{"name": "clients.tinykube.io/hold"}]
    return pod


def test_kubernetes_asyncio_watch_resumes_without_loss_or_repeat(
    cluster: UpCluster, first_revision: str
) -> None:
    aio = pytest.importorskip("kubernetes_asyncio.client")
    aio_config = pytest.importorskip("kubernetes_asyncio.config")
    aio_watch = pytest.importorskip("kubernetes_asyncio.watch")
    selector = "watch=resume"

    async def collect(
        core: Any, rv: str, stop: Callable[[list[tuple[str, str, str]]], bool]
    ) -> list[tuple[str, str, str]]:
        events: list[tuple[str, str, str]] = []
        w = aio_watch.Watch()
        async with asyncio.timeout(EVENT_WAIT):
            async for event in w.stream(
                core.list_namespaced_pod, NS, label_selector=selector, resource_version=rv
            ):
                obj = event["object"]
                assert isinstance(obj, aio.V1Pod), type(obj)
                events.append((event["type"], obj.metadata.name, obj.metadata.resource_version))
                if stop(events):
                    w.stop()
                    break
        await w.close()
        return events

    async def compacted(core: Any, rv: str) -> None:
        """Wait until the apiserver's compaction has passed `rv` (a watch from it is 410)."""
        deadline = time.monotonic() + 4 * int(COMPACTION) + EVENT_WAIT
        while time.monotonic() < deadline:
            w = aio_watch.Watch()
            try:
                # With timeout_seconds the library does not retry a 410 itself.
                async for _ in w.stream(
                    core.list_namespaced_pod,
                    NS,
                    label_selector="none=yet",
                    resource_version=rv,
                    timeout_seconds=1,
                ):
                    pass
            except aio.ApiException as exc:
                if exc.status == 410:
                    return
                raise
            finally:
                await w.close()
        pytest.fail(f"resourceVersion {rv} was never compacted")

    async def run() -> None:
        async with await aio_config.new_client_from_config(
            config_file=str(cluster.kubeconfig)
        ) as api_client:
            core = aio.CoreV1Api(api_client)
            start = (await core.list_namespaced_pod(NS, label_selector=selector)).metadata
            for i in range(4):
                await core.create_namespaced_pod(NS, gated_pod(f"aio-{i}"))
            for i in range(4):
                await core.patch_namespaced_pod(
                    f"aio-{i}", NS, {"metadata": {"labels": {"step": "2"}}}
                )
            for i in range(2):
                await core.delete_namespaced_pod(f"aio-{i}", NS, grace_period_seconds=0)
            marker = await core.create_namespaced_pod(NS, gated_pod("aio-marker"))
            last = int(marker.metadata.resource_version)

            def reached(events: list[tuple[str, str, str]]) -> bool:
                return int(events[-1][2]) >= last

            # The whole history from the list's resourceVersion, in one watch.
            whole = await collect(core, start.resource_version, reached)
            # The same in two: stopped after five events, resumed from the fifth's version.
            first = await collect(core, start.resource_version, lambda e: len(e) == 5)
            rest = await collect(core, first[-1][2], reached)
            assert first + rest == whole
            versions = [int(rv) for _, _, rv in whole]
            assert versions == sorted(set(versions)), "repeated or out of order"
            types = [t for t, _, _ in whole]
            assert types.count("ADDED") == 5 and "MODIFIED" in types
            assert {n for t, n, _ in whole if t == "DELETED"} == {"aio-0", "aio-1"}

            # A resourceVersion compacted away: the stream carries a 410 ERROR event, the
            # library retries once from the same version (watch.py's retry_410), raises
            # ApiException(410), and its caller relists and watches from the list.
            await compacted(core, first_revision)
            w = aio_watch.Watch()
            with pytest.raises(aio.ApiException) as expired:
                async with asyncio.timeout(EVENT_WAIT):
                    async for _ in w.stream(
                        core.list_namespaced_pod, NS, resource_version=first_revision
                    ):
                        pass
            await w.close()
            assert expired.value.status == 410
            assert "too old resource version" in str(expired.value.reason)
            relisted = await core.list_namespaced_pod(NS, label_selector=selector)
            assert {p.metadata.name for p in relisted.items} == {"aio-2", "aio-3", "aio-marker"}
            await core.patch_namespaced_pod("aio-2", NS, {"metadata": {"labels": {"step": "3"}}})
            after = await collect(
                core,
                relisted.metadata.resource_version,
                lambda e: e[-1][0] == "MODIFIED" and e[-1][1] == "aio-2",
            )
            assert [(t, n) for t, n, _ in after] == [("MODIFIED", "aio-2")]
            await core.delete_collection_namespaced_pod(
                NS, label_selector=selector, grace_period_seconds=0
            )

    asyncio.run(run())


# --- lightkube --------------------------------------------------------------------------------


def test_lightkube_typed_pods_and_server_side_apply(cluster: UpCluster) -> None:
    lightkube = pytest.importorskip("lightkube")
    from lightkube.models.apps_v1 import DeploymentSpec
    from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec
    from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
    from lightkube.resources.apps_v1 import Deployment
    from lightkube.resources.core_v1 import Pod

    client = lightkube.Client(
        config=lightkube.KubeConfig.from_file(str(cluster.kubeconfig)), namespace=NS
    )
    pod = Pod(
        metadata=ObjectMeta(name="lk-pod", labels={"client": "lightkube"}),
        spec=PodSpec(
            terminationGracePeriodSeconds=1,
            containers=[Container(name="c", image="busybox", command=["sleep", "86400"])],
        ),
    )
    created = client.create(pod)
    assert isinstance(created, Pod) and created.metadata is not None
    assert created.metadata.uid
    got = client.get(Pod, "lk-pod")
    assert got.metadata is not None and got.metadata.uid == created.metadata.uid
    assert [p.metadata.name for p in client.list(Pod, labels={"client": "lightkube"})] == ["lk-pod"]
    running = None
    for kind, obj in client.watch(
        Pod, fields={"metadata.name": "lk-pod"}, resource_version=created.metadata.resourceVersion
    ):
        assert isinstance(obj, Pod) and kind in ("ADDED", "MODIFIED")
        if obj.status and obj.status.phase == "Running":
            running = obj
            break
    assert running is not None and running.status is not None and running.metadata is not None
    assert running.status.containerStatuses and running.status.containerStatuses[0].imageID
    # kube's pod field selectors, as controllers and kubectl plugins use them.
    ip = running.status.podIP
    assert ip
    selected = client.list(
        Pod,
        fields={
            "status.podIP": ip,
            "spec.serviceAccountName": "default",
            "spec.hostNetwork": "false",
        },
    )
    assert [p.metadata.name for p in selected] == ["lk-pod"]
    client.delete(Pod, "lk-pod")
    for kind, obj in client.watch(
        Pod, fields={"metadata.name": "lk-pod"}, resource_version=running.metadata.resourceVersion
    ):
        if kind == "DELETED":
            assert obj.metadata.name == "lk-pod"
            break

    def deployment(replicas: int, image: str) -> Deployment:
        return Deployment(
            metadata=ObjectMeta(name="lk-web", namespace=NS),
            spec=DeploymentSpec(
                replicas=replicas,
                selector=LabelSelector(matchLabels={"app": "lk-web"}),
                template=PodTemplateSpec(
                    metadata=ObjectMeta(labels={"app": "lk-web"}),
                    spec=PodSpec(
                        terminationGracePeriodSeconds=1,
                        containers=[Container(name="c", image=image, command=["sleep", "86400"])],
                    ),
                ),
            ),
        )

    first = client.apply(deployment(1, "busybox"), field_manager="lk-owner")
    assert isinstance(first, Deployment) and first.spec is not None
    assert first.spec.replicas == 1
    second = client.apply(deployment(2, "busybox:1.36"), field_manager="lk-owner")
    assert second.spec is not None and second.spec.replicas == 2
    assert second.spec.template.spec is not None
    assert second.spec.template.spec.containers[0].image == "busybox:1.36"
    assert second.metadata.generation == 2
    managers = {m.manager: m.operation for m in second.metadata.managedFields or []}
    assert managers.get("lk-owner") == "Apply"

    # Another manager setting the same field with another value: 409 naming the conflict...
    with pytest.raises(lightkube.ApiError) as conflict:
        client.apply(deployment(3, "busybox:1.36"), field_manager="lk-other")
    assert conflict.value.status.code == 409
    assert 'conflict with "lk-owner": .spec.replicas' in (conflict.value.status.message or "")
    # ...unless it forces, and then it owns the field.
    forced = client.apply(deployment(3, "busybox:1.36"), field_manager="lk-other", force=True)
    assert forced.spec is not None and forced.spec.replicas == 3
    client.delete(Deployment, "lk-web")


# --- the official Python client, typed, kind by kind ------------------------------------------


def _meta(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "labels": {"typed": "table"}, **extra}


POD_TEMPLATE = {
    "metadata": {"labels": {"app": "typed"}},
    "spec": {
        "terminationGracePeriodSeconds": 1,
        "nodeSelector": {"typed": "nowhere"},
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "86400"]}],
    },
}
SELECTOR = {"matchLabels": {"app": "typed"}}

# (API class, method suffix, namespaced, model, body): create, read, list, watch, patch, scale
# (where the kind has the subresource) and delete through `<verb>_[namespaced_]<suffix>`.
KINDS: list[tuple[str, str, bool, str, dict[str, Any]]] = [
    (
        "CoreV1Api",
        "node",
        False,
        "V1Node",
        {"metadata": _meta("typed-node"), "spec": {"unschedulable": True}},
    ),
    (
        "CoreV1Api",
        "pod",
        True,
        "V1Pod",
        {"metadata": _meta("typed-pod"), "spec": POD_TEMPLATE["spec"]},
    ),
    (
        "AppsV1Api",
        "deployment",
        True,
        "V1Deployment",
        {
            "metadata": _meta("typed-deploy"),
            "spec": {"replicas": 0, "selector": SELECTOR, "template": POD_TEMPLATE},
        },
    ),
    (
        "AppsV1Api",
        "replica_set",
        True,
        "V1ReplicaSet",
        {
            "metadata": _meta("typed-rs"),
            "spec": {"replicas": 0, "selector": SELECTOR, "template": POD_TEMPLATE},
        },
    ),
    (
        "AppsV1Api",
        "daemon_set",
        True,
        "V1DaemonSet",
        {"metadata": _meta("typed-ds"), "spec": {"selector": SELECTOR, "template": POD_TEMPLATE}},
    ),
    (
        "BatchV1Api",
        "job",
        True,
        "V1Job",
        {
            "metadata": _meta("typed-job"),
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {**POD_TEMPLATE["spec"], "restartPolicy": "Never"},  # type: ignore[dict-item]
                },
            },
        },
    ),
    (
        "CoreV1Api",
        "service",
        True,
        "V1Service",
        {
            "metadata": _meta("typed-svc"),
            "spec": {"selector": {"app": "typed"}, "ports": [{"port": 80}]},
        },
    ),
    (
        "DiscoveryV1Api",
        "endpoint_slice",
        True,
        "V1EndpointSlice",
        {
            "metadata": _meta("typed-slice"),
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.9.9.9"], "conditions": {"ready": True}}],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        },
    ),
    (
        "CoreV1Api",
        "config_map",
        True,
        "V1ConfigMap",
        {"metadata": _meta("typed-cm"), "data": {"a": "1"}},
    ),
    (
        "CoreV1Api",
        "secret",
        True,
        "V1Secret",
        {"metadata": _meta("typed-secret"), "stringData": {"a": "1"}},
    ),
    ("CoreV1Api", "service_account", True, "V1ServiceAccount", {"metadata": _meta("typed-sa")}),
    ("CoreV1Api", "namespace", False, "V1Namespace", {"metadata": _meta("typed-ns")}),
    (
        "CoreV1Api",
        "event",
        True,
        "CoreV1Event",
        {
            "metadata": _meta("typed-event"),
            "involvedObject": {"kind": "Pod", "name": "somewhere", "namespace": NS},
            "reason": "Typed",
            "message": "written by the typed client",
            "type": "Normal",
            "source": {"component": "clients-test"},
            "count": 1,
        },
    ),
    (
        "EventsV1Api",
        "event",
        True,
        "EventsV1Event",
        {
            "metadata": _meta("typed-event-v1"),
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "clients.tinykube.io/test",
            "reportingInstance": "clients-test",
            "action": "Testing",
            "reason": "Typed",
            "note": "written by the typed client",
            "type": "Normal",
            "regarding": {"kind": "Pod", "name": "somewhere", "namespace": NS},
        },
    ),
    (
        "SchedulingV1Api",
        "priority_class",
        False,
        "V1PriorityClass",
        {"metadata": _meta("typed-pc"), "value": 7},
    ),
    (
        "PolicyV1Api",
        "pod_disruption_budget",
        True,
        "V1PodDisruptionBudget",
        {"metadata": _meta("typed-pdb"), "spec": {"minAvailable": 1, "selector": SELECTOR}},
    ),
    (
        "RbacAuthorizationV1Api",
        "role",
        True,
        "V1Role",
        {
            "metadata": _meta("typed-role"),
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
    ),
    (
        "RbacAuthorizationV1Api",
        "role_binding",
        True,
        "V1RoleBinding",
        {
            "metadata": _meta("typed-rb"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "typed-role",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "typed-sa", "namespace": NS}],
        },
    ),
    (
        "RbacAuthorizationV1Api",
        "cluster_role",
        False,
        "V1ClusterRole",
        {
            "metadata": _meta("typed-cr"),
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
        },
    ),
    (
        "RbacAuthorizationV1Api",
        "cluster_role_binding",
        False,
        "V1ClusterRoleBinding",
        {
            "metadata": _meta("typed-crb"),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "typed-cr",
            },
            "subjects": [
                {"kind": "User", "name": "typed-user", "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    ),
]


def test_python_client_typed_over_every_kind(cluster: UpCluster, api_client: Any) -> None:
    failures: list[str] = []
    for api_name, suffix, namespaced, model, body in KINDS:
        try:
            _typed_round(api_client, api_name, suffix, namespaced, model, body)
            if model == "V1Service":
                _wait_service_slices_collected(api_client, body["metadata"]["name"])
        except Exception as exc:  # every kind is tried; the failures are reported together
            failures.append(f"{model}: {type(exc).__name__}: {exc}")
    assert not failures, "\n\n".join(failures)
    # What may I do here? (`kubectl auth can-i --list`): the admin's cluster-admin rules.
    review = k8s.AuthorizationV1Api(api_client).create_self_subject_rules_review(
        k8s.V1SelfSubjectRulesReview(spec=k8s.V1SelfSubjectRulesReviewSpec(namespace=NS))
    )
    assert review.status.incomplete is False
    assert any(r.verbs == ["*"] and r.resources == ["*"] for r in review.status.resource_rules)


def _wait_service_slices_collected(api_client: Any, service: str) -> None:
    """The EndpointSlice controller copies a Service's labels (`typed=table` here) onto the
    slices it makes for it, and the garbage collector deletes them once the Service is gone,
    some time after the Service's delete returned (as in kube). The EndpointSlice round lists
    `typed=table` expecting nothing, so it must wait for that collection; waiting here also
    checks that it happens."""
    discovery = k8s.DiscoveryV1Api(api_client)
    selector = f"kubernetes.io/service-name={service}"
    deadline = time.monotonic() + EVENT_WAIT
    while discovery.list_namespaced_endpoint_slice(NS, label_selector=selector).items:
        assert time.monotonic() < deadline, f"the EndpointSlices of Service {service} remain"
        time.sleep(0.2)


def _typed_round(
    api_client: Any, api_name: str, suffix: str, namespaced: bool, model: str, body: dict[str, Any]
) -> None:
    api = getattr(k8s, api_name)(api_client)
    cls = getattr(k8s, model)
    scope = "namespaced_" if namespaced else ""
    args: tuple[str, ...] = (NS,) if namespaced else ()
    name = body["metadata"]["name"]

    # A typed body: the client's model, built by its own deserializer from the manifest.
    typed_body = api_client.deserialize(json.dumps(body), model, "application/json")
    listed = getattr(api, f"list_{scope}{suffix}")(*args, label_selector="typed=table")
    assert listed.items == [], listed.items
    before = listed.metadata.resource_version
    created = getattr(api, f"create_{scope}{suffix}")(*args, typed_body)
    assert isinstance(created, cls) and created.metadata.uid
    read = getattr(api, f"read_{scope}{suffix}")(name, *args)
    assert isinstance(read, cls) and read.metadata.uid == created.metadata.uid
    listed = getattr(api, f"list_{scope}{suffix}")(*args, label_selector="typed=table")
    assert [i.metadata.name for i in listed.items] == [name]
    assert all(isinstance(i, cls) for i in listed.items)
    patched = getattr(api, f"patch_{scope}{suffix}")(
        name, *args, {"metadata": {"annotations": {"patched": "yes"}}}
    )
    assert isinstance(patched, cls) and patched.metadata.annotations["patched"] == "yes"
    if hasattr(api, f"patch_{scope}{suffix}_scale"):
        scale = getattr(api, f"patch_{scope}{suffix}_scale")(name, *args, {"spec": {"replicas": 1}})
        assert isinstance(scale, k8s.V1Scale) and scale.spec.replicas == 1
        scale = getattr(api, f"read_{scope}{suffix}_scale")(name, *args)
        assert scale.spec.replicas == 1 and scale.metadata.name == name
        assert getattr(api, f"read_{scope}{suffix}")(name, *args).spec.replicas == 1
    deleted = getattr(api, f"delete_{scope}{suffix}")(name, *args, grace_period_seconds=0)
    if isinstance(deleted, cls):
        # The client reads this kind's delete answer as the object (kube's ReturnDeletedObject:
        # pods, services, service accounts; namespaces while they finalize).
        assert deleted.metadata.name == name and deleted.metadata.uid == created.metadata.uid
    elif deleted.get("kind") == "Status":
        # The client leaves a Status untyped (its delete methods return `object`).
        assert deleted["status"] == "Success" and deleted["details"]["name"] == name, deleted
    else:
        # An object still finalizing (a Namespace) comes back as itself.
        assert deleted["metadata"]["deletionTimestamp"], deleted

    # A typed watch from before the create replays it all: ADDED, MODIFIED, ..., DELETED.
    seen: list[str] = []
    watcher = k8s_watch.Watch()
    for event in watcher.stream(
        getattr(api, f"list_{scope}{suffix}"),
        *args,
        resource_version=before,
        field_selector=f"metadata.name={name}",
        timeout_seconds=int(EVENT_WAIT),
    ):
        assert isinstance(event["object"], cls), type(event["object"])
        assert event["object"].metadata.name == name
        seen.append(event["type"])
        if event["type"] == "DELETED":
            watcher.stop()
    assert seen[0] == "ADDED" and "MODIFIED" in seen and seen[-1] == "DELETED", seen
