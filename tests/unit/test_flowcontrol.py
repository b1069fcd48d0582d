"""The in-flight limit's pure parts: how requests are classified and counted, and what each front
end reads a request as (apiserver/flowcontrol.py, apiserver/rest/inflight.py, grpcapi.py).
The queues are tested in tests/unit/test_flowcontrol_queues.py."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from apiserver.flowcontrol import (
    GLOBAL_DEFAULT,
    LEADER_ELECTION,
    NO_QUEUING,
    NODE_HIGH,
    Limiter,
    PriorityLevel,
    RequestInfo,
    classify,
    reserved_seats,
)
from apiserver.grpcapi import _request_info
from apiserver.metrics import Metrics
from apiserver.rest.inflight import request_info
from tinykube.v1 import lease_pb2, meta_pb2, node_pb2, pod_pb2

COORD = "coordination.k8s.io"


@pytest.mark.parametrize(
    ("info", "level"),
    [
        # Node heartbeats: the node's Lease (any verb) and its status.
        (RequestInfo("update", COORD, "leases", "", "kube-node-lease"), NODE_HIGH),
        (RequestInfo("get", COORD, "leases", "", "kube-node-lease"), NODE_HIGH),
        (RequestInfo("create", COORD, "leases", "", "kube-node-lease"), NODE_HIGH),
        (RequestInfo("patch", COORD, "leases", "", "kube-node-lease"), NODE_HIGH),
        (RequestInfo("update", "", "nodes", "status", ""), NODE_HIGH),
        (RequestInfo("patch", "", "nodes", "status", ""), NODE_HIGH),
        # Leader election: get, create, update of Leases elsewhere.
        (RequestInfo("update", COORD, "leases", "", "kube-system"), LEADER_ELECTION),
        (RequestInfo("get", COORD, "leases", "", "default"), LEADER_ELECTION),
        (RequestInfo("create", COORD, "leases", "", "kube-system"), LEADER_ELECTION),
        (RequestInfo("delete", COORD, "leases", "", "kube-system"), GLOBAL_DEFAULT),
        (RequestInfo("list", COORD, "leases", "", ""), GLOBAL_DEFAULT),
        # Everything else.
        (RequestInfo("create", "", "pods", "", "default"), GLOBAL_DEFAULT),
        (RequestInfo("create", "", "pods", "binding", "default"), GLOBAL_DEFAULT),
        (RequestInfo("update", "", "pods", "status", "kube-node-lease"), GLOBAL_DEFAULT),
        (RequestInfo("update", "", "nodes", "", ""), GLOBAL_DEFAULT),
        (RequestInfo("create", "", "nodes", "", ""), GLOBAL_DEFAULT),
        (RequestInfo("update", "apps", "replicasets", "status", "default"), GLOBAL_DEFAULT),
        (RequestInfo("update", "other.io", "leases", "", "kube-node-lease"), GLOBAL_DEFAULT),
        (RequestInfo("get", "", "", "", ""), GLOBAL_DEFAULT),  # a non-resource path
    ],
)
def test_classify(info: RequestInfo, level: PriorityLevel) -> None:
    assert classify(info) == level


@pytest.mark.parametrize(
    ("read_only", "mutating", "node_high", "leader_election"),
    # APF's nominal concurrency limits of its bootstrap levels at a server limit of 600.
    [(400, 200, 98, 25), (2, 1, 1, 1), (1, 0, 1, 1), (3000, 1000, 654, 164)],
)
def test_reserved_seats_are_apf_shares_of_the_total(
    read_only: int, mutating: int, node_high: int, leader_election: int
) -> None:
    limiter = Limiter(read_only, mutating)
    assert limiter.reserved[NODE_HIGH].limit == node_high
    assert limiter.reserved[LEADER_ELECTION].limit == leader_election
    assert reserved_seats(read_only + mutating, 40) == node_high


CREATE = RequestInfo("create", "", "pods", "", "default")
GET = RequestInfo("get", "", "pods", "", "default")
RENEW = RequestInfo("update", COORD, "leases", "", "kube-node-lease")
ELECT = RequestInfo("update", COORD, "leases", "", "kube-system")


@pytest.mark.parametrize(
    ("limits", "admitted", "then", "admits"),
    [
        # Each kind has its own limit.
        # (A Create is refused though the reserved seats are free: they are not its.)
        ((2, 1), [CREATE], CREATE, False),
        ((2, 1), [CREATE], GET, True),
        ((2, 1), [GET, GET], GET, False),
        ((2, 1), [GET, GET], CREATE, True),
        # 0 is no limit for that kind.
        ((0, 1), [GET] * 50, GET, True),
        ((1, 0), [CREATE] * 50, CREATE, True),
        # Renewals have seats of their own (1 at these limits) ...
        ((2, 1), [CREATE], RENEW, True),
        ((2, 1), [CREATE], ELECT, True),
        # ... and borrow a general seat of their kind when those are taken ...
        ((2, 1), [RENEW], RENEW, True),
        # ... but are refused when both are full.
        ((2, 1), [RENEW, RENEW], RENEW, False),
        ((2, 1), [CREATE, RENEW], RENEW, False),
    ],
)
def test_admit(
    limits: tuple[int, int], admitted: list[RequestInfo], then: RequestInfo, admits: bool
) -> None:
    limiter = Limiter(*limits)
    for info in admitted:
        assert limiter.admit(info) is not None
    assert (limiter.admit(then) is not None) is admits


def test_release_frees_the_seat_it_took_and_counts_go_back_to_zero() -> None:
    limiter = Limiter(1, 1)
    renew = limiter.admit(RENEW)
    borrowed = limiter.admit(RENEW)  # the mutating seat
    assert renew is not None and borrowed is not None
    assert limiter.admit(CREATE) is None
    limiter.release(borrowed)
    create = limiter.admit(CREATE)
    assert create is not None
    assert limiter.executing == [0, 2]
    limiter.release(renew)
    limiter.release(create)
    assert limiter.executing == [0, 0]
    assert [p.inflight for p in limiter.general] == [0, 0]
    assert limiter.reserved[NODE_HIGH].inflight == 0


def test_both_limits_zero_turn_the_limiter_off() -> None:
    assert not Limiter(0, 0).enabled
    assert Limiter(0, 1).enabled


async def test_metrics_show_executing_requests_and_rejections() -> None:
    metrics = Metrics()
    limiter = Limiter(1, 1, metrics=metrics, queues=NO_QUEUING)
    limiter.admit(CREATE)
    limiter.admit(GET)
    limiter.admit(RENEW)
    assert limiter.admit(CREATE) is None
    assert await limiter.acquire(CREATE, "peer", None) is None
    text = generate_latest(metrics.registry).decode()
    assert 'apiserver_current_inflight_requests{request_kind="mutating"} 2.0' in text
    assert 'apiserver_current_inflight_requests{request_kind="readOnly"} 1.0' in text
    assert (
        'apiserver_flowcontrol_current_executing_requests{flow_schema="system-node-high",'
        'priority_level="node-high"} 1.0'
    ) in text
    assert (
        'apiserver_flowcontrol_rejected_requests_total{flow_schema="global-default",'
        'priority_level="global-default",reason="concurrency-limit"} 1.0'
    ) in text


LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


@pytest.mark.parametrize(
    ("method", "path", "query", "info"),
    [
        (
            "GET",
            "/api/v1/namespaces/default/pods",
            {},
            RequestInfo("list", "", "pods", "", "default"),
        ),
        ("GET", "/api/v1/pods", {}, RequestInfo("list", "", "pods", "", "")),
        ("GET", "/api/v1/namespaces/default/pods/web", {}, GET),
        ("POST", "/api/v1/namespaces/default/pods", {}, CREATE),
        ("PUT", f"{LEASES}/n1", {}, RENEW),
        ("PATCH", "/api/v1/nodes/n1/status", {}, RequestInfo("patch", "", "nodes", "status", "")),
        ("PUT", "/api/v1/nodes/n1/status", {}, RequestInfo("update", "", "nodes", "status", "")),
        (
            "DELETE",
            "/api/v1/namespaces/default/pods",
            {},
            RequestInfo("deletecollection", "", "pods", "", "default"),
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods/web/binding",
            {},
            RequestInfo("create", "", "pods", "binding", "default"),
        ),
        (
            "GET",
            "/apis/apps/v1/replicasets",
            {"watch": "false"},
            RequestInfo("list", "apps", "replicasets", "", ""),
        ),
        # Non-resource requests: the HTTP method is the verb (kube's RequestInfoFactory).
        ("GET", "/version", {}, RequestInfo("get", "", "", "", "")),
        ("GET", "/api/v1", {}, RequestInfo("get", "", "", "", "")),
        ("GET", "/apis/apps/v1", {}, RequestInfo("get", "", "", "", "")),
        ("POST", "/openapi/v2", {}, RequestInfo("post", "", "", "", "")),
        # Not counted: watches, long-running subresources, health probes.
        ("GET", "/api/v1/namespaces/default/pods", {"watch": "true"}, None),
        ("GET", "/api/v1/pods", {"watch": "1"}, None),
        ("GET", "/api/v1/watch/pods", {}, None),
        ("GET", "/api/v1/namespaces/default/pods/web/log", {"follow": "true"}, None),
        ("GET", "/api/v1/namespaces/default/pods/web/log", {}, None),
        ("POST", "/api/v1/namespaces/default/pods/web/exec", {}, None),
        ("GET", "/readyz", {}, None),
        ("GET", "/livez", {}, None),
        ("GET", "/healthz/etcd", {}, None),
    ],
)
def test_rest_request_info(
    method: str, path: str, query: dict[str, str], info: RequestInfo | None
) -> None:
    assert request_info(method, path, query) == info


def _lease(namespace: str) -> lease_pb2.Lease:
    return lease_pb2.Lease(metadata=meta_pb2.ObjectMeta(name="n1", namespace=namespace))


@pytest.mark.parametrize(
    ("method", "message", "info"),
    [
        (
            "/tinykube.v1.Leases/Update",
            lease_pb2.UpdateLeaseRequest(lease=_lease("kube-node-lease")),
            RENEW,
        ),
        (
            "/tinykube.v1.Leases/Create",
            lease_pb2.CreateLeaseRequest(lease=_lease("kube-system")),
            RequestInfo("create", COORD, "leases", "", "kube-system"),
        ),
        (
            "/tinykube.v1.Leases/Get",
            meta_pb2.GetRequest(namespace="kube-node-lease", name="n1"),
            RequestInfo("get", COORD, "leases", "", "kube-node-lease"),
        ),
        (
            "/tinykube.v1.Nodes/UpdateStatus",
            node_pb2.UpdateNodeRequest(),
            RequestInfo("update", "", "nodes", "status", ""),
        ),
        (
            "/tinykube.v1.Pods/Bind",
            pod_pb2.BindRequest(
                binding=pod_pb2.Binding(metadata=meta_pb2.ObjectMeta(namespace="a"))
            ),
            RequestInfo("create", "", "pods", "binding", "a"),
        ),
        (
            "/tinykube.v1.Pods/List",
            meta_pb2.ListRequest(namespace="default"),
            RequestInfo("list", "", "pods", "", "default"),
        ),
        (
            "/tinykube.v1.ReplicaSets/Delete",
            meta_pb2.DeleteRequest(namespace="x", name="rs"),
            RequestInfo("delete", "apps", "replicasets", "", "x"),
        ),
    ],
)
def test_grpc_request_info(method: str, message: object, info: RequestInfo) -> None:
    reader = _request_info(method)
    assert reader is not None
    assert reader(message) == info


@pytest.mark.parametrize(
    "method",
    [
        "/tinykube.v1.Pods/Watch",
        "/tinykube.v1.Pods/WatchBatch",
        "/grpc.health.v1.Health/Check",
        "/tinykube.v1.Nope/Get",
    ],
)
def test_grpc_streams_and_other_services_are_not_limited(method: str) -> None:
    assert _request_info(method) is None
