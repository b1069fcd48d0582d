"""EndpointSlices with `tinykube up` and the real kubectl, as against Kubernetes.

A Deployment of three behind a Service gets one slice of three ready endpoints (owned by the
Service, kube's labels); `kubectl get endpointslices` and
`kubectl describe svc` show them (kubectl v1.37 reads EndpointSlices for describe); a pod that
ignores SIGTERM shows `terminating: true, ready: false` while it goes; scaling to zero leaves the
placeholder slice with no endpoints; a selector-less Service with hand-made Endpoints gets a
mirrored slice; the Python client's DiscoveryV1Api lists them. Each test uses names of its own.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import UpCluster
from tests.e2e.kubectl_output import assert_output, ok
from tests.e2e.waiting import until

pytestmark = pytest.mark.e2e

SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"


def deployment(name: str, replicas: int, script: str = "exec sleep 3600", grace: int = 2) -> str:
    return json.dumps(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "terminationGracePeriodSeconds": grace,
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox",
                                "command": ["sh", "-c", script],
                            }
                        ],
                    },
                },
            },
        }
    )


def service(name: str, selector: bool = True) -> str:
    # No containerPorts: the process runtime's pods share their node's ports, and named
    # targetPorts are the unit tests' (tests/unit/controller/test_endpointslice.py).
    spec: dict[str, Any] = {"ports": [{"name": "web", "port": 80, "targetPort": 8080}]}
    if selector:
        spec["selector"] = {"app": name}
    else:
        spec["ports"] = [{"name": "pg", "port": 5432}]
    return json.dumps(
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}
    )


def slices_of(up: UpCluster, svc: str) -> list[dict[str, Any]]:
    listed = ok(up.kubectl("get", "endpointslices", "-l", f"{SERVICE_NAME}={svc}", "-o", "json"))
    items: list[dict[str, Any]] = json.loads(listed)["items"]
    return items


def endpoints_of(up: UpCluster, svc: str) -> list[dict[str, Any]]:
    return [e for s in slices_of(up, svc) for e in s.get("endpoints") or []]


def test_a_deployment_of_three_gets_one_slice_of_three_ready_endpoints(
    tinykube_up: UpCluster,
) -> None:
    up = tinykube_up
    ok(up.kubectl("create", "-f", "-", stdin=deployment("shop", 3)))
    ok(up.kubectl("create", "-f", "-", stdin=service("shop")))

    def three_ready() -> bool:
        eps = endpoints_of(up, "shop")
        return len(eps) == 3 and all(e["conditions"]["ready"] for e in eps)

    until(three_ready, "three ready endpoints")
    [eps] = slices_of(up, "shop")
    uid = ok(up.kubectl("get", "svc", "shop", "-o", "jsonpath={.metadata.uid}"))
    assert eps["apiVersion"] == "discovery.k8s.io/v1"
    assert eps["addressType"] == "IPv4"
    assert eps["metadata"]["generateName"] == "shop-"
    assert eps["metadata"]["labels"] == {
        SERVICE_NAME: "shop",
        MANAGED_BY: "endpointslice-controller.k8s.io",
    }
    assert eps["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "name": "shop",
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert eps["ports"] == [{"name": "web", "protocol": "TCP", "port": 8080}]
    pods = json.loads(ok(up.kubectl("get", "pods", "-l", "app=shop", "-o", "json")))["items"]
    by_pod = {e["targetRef"]["name"]: e for e in eps["endpoints"]}
    assert set(by_pod) == {p["metadata"]["name"] for p in pods}
    for p in pods:
        e = by_pod[p["metadata"]["name"]]
        assert e["addresses"] == [p["status"]["podIP"]]
        assert e["nodeName"] == p["spec"]["nodeName"]
        assert e["conditions"] == {"ready": True, "serving": True, "terminating": False}
        assert e["targetRef"] == {
            "kind": "Pod",
            "namespace": "default",
            "name": p["metadata"]["name"],
            "uid": p["metadata"]["uid"],
        }
    name = eps["metadata"]["name"]
    assert_output(
        ok(up.kubectl("get", "endpointslices", name)),
        f"""
NAME   ADDRESSTYPE   PORTS   ENDPOINTS   AGE
{name}   IPv4   8080   <ip>,<ip>,<ip>   <age>
""",
    )
    described = ok(up.kubectl("describe", "svc", "shop"))
    [line] = [x for x in described.splitlines() if x.startswith("Endpoints:")]
    shown = line.split()[1].split(",")
    assert sorted(shown) == sorted(f"{e['addresses'][0]}:8080" for e in eps["endpoints"])
    # tinykube's own describe prints the same, for the Service and for the slice.
    assert ok(up.cli("describe", "svc", "shop")) == described
    kubectl_slice = ok(up.kubectl("describe", "endpointslice", name))
    assert "  - Addresses:  " in kubectl_slice
    assert ok(up.cli("describe", "endpointslice", name)) == kubectl_slice


def test_scaling_to_zero_empties_the_slice(tinykube_up: UpCluster) -> None:
    up = tinykube_up
    ok(up.kubectl("create", "-f", "-", stdin=deployment("few", 2)))
    ok(up.kubectl("create", "-f", "-", stdin=service("few")))
    until(lambda: len(endpoints_of(up, "few")) == 2, "two endpoints")
    [before] = slices_of(up, "few")
    ok(up.kubectl("scale", "deployment", "few", "--replicas=0"))

    def emptied() -> bool:
        slices = slices_of(up, "few")
        return len(slices) == 1 and not slices[0].get("endpoints")

    until(emptied, "the slice to be emptied")
    [after] = slices_of(up, "few")
    assert after["metadata"]["name"] == before["metadata"]["name"]
    assert "ports" not in after or after["ports"] == []
    described = ok(up.kubectl("describe", "svc", "few"))
    # The placeholder has no ports: kubectl lists nothing (not "<none>": a slice exists).
    assert [x.rstrip() for x in described.splitlines() if x.startswith("Endpoints:")] == [
        "Endpoints:"
    ]


def test_a_terminating_pod_shows_terminating_and_not_ready(tinykube_up: UpCluster) -> None:
    up = tinykube_up
    stubborn = "trap '' TERM; sleep 3600 & wait; sleep 3600"
    ok(up.kubectl("create", "-f", "-", stdin=deployment("slow", 1, stubborn, grace=60)))
    ok(up.kubectl("create", "-f", "-", stdin=service("slow")))
    until(lambda: len(endpoints_of(up, "slow")) == 1, "one endpoint")
    pod = ok(
        up.kubectl("get", "pods", "-l", "app=slow", "-o", "jsonpath={.items[0].metadata.name}")
    )
    ok(up.kubectl("delete", "pod", pod, "--wait=false"))

    def terminating() -> dict[str, Any] | None:
        for e in endpoints_of(up, "slow"):
            if e["targetRef"]["name"] == pod and e["conditions"]["terminating"]:
                return e
        return None

    e = until(terminating, "the endpoint to show terminating")
    assert e is not None
    assert e["conditions"] == {"ready": False, "serving": True, "terminating": True}
    ok(up.kubectl("delete", "pod", pod, "--grace-period=0", "--force"))
    ok(up.kubectl("delete", "deployment", "slow"))


def test_a_selectorless_service_gets_its_endpoints_mirrored(tinykube_up: UpCluster) -> None:
    up = tinykube_up
    ok(up.kubectl("create", "-f", "-", stdin=service("db", selector=False)))
    endpoints = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "db", "labels": {"team": "data"}},
        "subsets": [
            {
                "addresses": [{"ip": "10.9.0.1"}, {"ip": "10.9.0.2"}],
                "notReadyAddresses": [{"ip": "10.9.0.3"}],
                "ports": [{"name": "pg", "port": 5432}],
            }
        ],
    }
    ok(up.kubectl("create", "-f", "-", stdin=json.dumps(endpoints)))
    until(lambda: len(slices_of(up, "db")) == 1, "the mirrored slice")
    [eps] = slices_of(up, "db")
    assert eps["metadata"]["labels"] == {
        "team": "data",
        SERVICE_NAME: "db",
        MANAGED_BY: "endpointslicemirroring-controller.k8s.io",
    }
    assert eps["metadata"]["ownerReferences"][0]["kind"] == "Endpoints"
    assert {e["addresses"][0]: e["conditions"] for e in eps["endpoints"]} == {
        "10.9.0.1": {"ready": True},
        "10.9.0.2": {"ready": True},
        "10.9.0.3": {"ready": False},
    }
    assert eps["ports"] == [{"name": "pg", "protocol": "TCP", "port": 5432}]


def test_bad_slices_are_refused_naming_the_field(tinykube_up: UpCluster) -> None:
    bad = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "bad"},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["not-an-ip"]}, {"addresses": []}],
        "ports": [{"name": "a", "port": 80, "protocol": "QUIC"}],
    }
    refused = tinykube_up.kubectl("create", "-f", "-", stdin=json.dumps(bad))
    assert refused.code == 1
    assert refused.err == (
        'The EndpointSlice "bad" is invalid: \n'
        '* endpoints[0].addresses[0]: Invalid value: "not-an-ip": must be a valid IPv4 address\n'
        "* endpoints[1].addresses: Required value: must contain at least 1 address\n"
        '* ports[0].protocol: Unsupported value: "QUIC": supported values: "SCTP", "TCP", '
        '"UDP"\n'
    )


def test_the_python_client_lists_slices(tinykube_up: UpCluster) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    ok(tinykube_up.kubectl("create", "-f", "-", stdin=deployment("py", 1)))
    ok(tinykube_up.kubectl("create", "-f", "-", stdin=service("py")))
    until(lambda: len(endpoints_of(tinykube_up, "py")) == 1, "one endpoint")
    api_client = kubernetes.config.new_client_from_config(str(tinykube_up.kubeconfig))
    try:
        listed = kubernetes.client.DiscoveryV1Api(api_client).list_namespaced_endpoint_slice(
            "default", label_selector=f"{SERVICE_NAME}=py"
        )
    finally:
        api_client.close()
    [eps] = listed.items
    assert eps.address_type == "IPv4"
    assert eps.endpoints[0].conditions.ready is True
    assert eps.ports[0].port == 8080


def test_deleting_the_service_deletes_its_slices_in_either_cascade(tinykube_up: UpCluster) -> None:
    up = tinykube_up
    ok(up.kubectl("create", "-f", "-", stdin=deployment("gone", 1)))
    for name, cascade in (("gone", "foreground"), ("gone-bg", "background")):
        svc = json.loads(service("gone"))
        svc["metadata"]["name"] = name
        ok(up.kubectl("create", "-f", "-", stdin=json.dumps(svc)))

        def has_endpoint(name: str = name) -> bool:
            return len(endpoints_of(up, name)) == 1

        def no_slices(name: str = name) -> bool:
            return slices_of(up, name) == []

        until(has_endpoint, f"{name}'s endpoint")
        # Foreground: the garbage collector deletes the slices (blockOwnerDeletion) first.
        deleted = up.kubectl("delete", "svc", name, f"--cascade={cascade}", timeout=90)
        assert deleted.code == 0, deleted.err
        until(no_slices, f"{name}'s slices to go")
