"""Services' sessionAffinityConfig and load balancer fields, pods' dnsConfig: kube's defaults
and validation messages (apiserver/validation.py's helpers, apiserver/registry.py's defaults)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from apiserver.registry import strategy_for
from apiserver.validation import validate_pod_dns_config
from tinykube.kinds import SERVICE
from tinykube.v1 import meta_pb2, pod_pb2, service_pb2

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def service(type_: str = "ClusterIP", **spec: object) -> service_pb2.Service:
    svc = service_pb2.Service(
        metadata=meta_pb2.ObjectMeta(name="web", namespace="default"),
        spec=service_pb2.ServiceSpec(type=type_, selector={"app": "web"}, **spec),  # type: ignore[arg-type]
    )
    svc.spec.ports.add(port=80)
    strategy_for(SERVICE).prepare_for_create(svc, NOW)
    return svc


def messages(svc: service_pb2.Service) -> list[str]:
    return [str(e) for e in strategy_for(SERVICE).validate_create(svc)]


def test_client_ip_affinity_defaults_its_timeout() -> None:
    svc = service(sessionAffinity="ClientIP")
    assert svc.spec.sessionAffinityConfig.clientIP.timeoutSeconds == 10800
    assert messages(svc) == []
    assert not service().spec.HasField("sessionAffinityConfig")


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [
        (86400, []),
        (1, []),
        (
            0,
            [
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0: must be "
                "greater than 0 and less than 86400"
            ],
        ),
        (
            86401,
            [
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 86401: must "
                "be greater than 0 and less than 86400"
            ],
        ),
    ],
)
def test_affinity_timeout_range(timeout: int, expected: list[str]) -> None:
    svc = service(sessionAffinity="ClientIP")
    svc.spec.sessionAffinityConfig.clientIP.timeoutSeconds = timeout
    assert messages(svc) == expected


def test_affinity_config_is_forbidden_without_client_ip() -> None:
    svc = service()
    svc.spec.sessionAffinityConfig.clientIP.timeoutSeconds = 60
    assert messages(svc) == [
        "spec.sessionAffinityConfig: Forbidden: must not be set when session affinity is None"
    ]


def test_load_balancer_defaults_and_type_only_fields() -> None:
    lb = service("LoadBalancer")
    assert lb.spec.allocateLoadBalancerNodePorts is True
    assert messages(lb) == []
    svc = service("ClusterIP", allocateLoadBalancerNodePorts=False, loadBalancerClass="a.io/b")
    assert messages(svc) == [
        "spec.allocateLoadBalancerNodePorts: Forbidden: may only be used when `type` is "
        "'LoadBalancer'",
        "spec.loadBalancerClass: Forbidden: may only be used when `type` is 'LoadBalancer'",
    ]
    bad = service("LoadBalancer", loadBalancerClass="not a class")
    assert messages(bad)[0].startswith('spec.loadBalancerClass: Invalid value: "not a class": ')


def test_load_balancer_class_may_not_change() -> None:
    old = service("LoadBalancer", loadBalancerClass="a.io/one")
    new = service("LoadBalancer", loadBalancerClass="a.io/two")
    assert [str(e) for e in strategy_for(SERVICE).validate_update(new, old)] == [
        'spec.loadBalancerClass: Invalid value: "a.io/two": may not change once set'
    ]
    unset = service("LoadBalancer")
    assert [str(e) for e in strategy_for(SERVICE).validate_update(unset, old)] == [
        "spec.loadBalancerClass: Invalid value: null: may not change once set"
    ]


def test_type_change_drops_node_ports_and_load_balancer_fields() -> None:
    old = service("LoadBalancer", loadBalancerClass="a.io/one")
    old.spec.ports[0].nodePort = 30080
    new = service_pb2.Service()
    new.CopyFrom(old)
    new.spec.type = "ClusterIP"
    strategy_for(SERVICE).prepare_for_update(new, old)
    assert new.spec.ports[0].nodePort == 0 and not new.spec.externalTrafficPolicy
    assert not new.spec.HasField("loadBalancerClass")
    assert not new.spec.HasField("allocateLoadBalancerNodePorts")
    assert [str(e) for e in strategy_for(SERVICE).validate_update(new, old)] == []
    assert messages(new) == []


def dns_spec(policy: str = "", **config: object) -> pod_pb2.PodSpec:
    spec = pod_pb2.PodSpec(dnsPolicy=policy)
    if config:
        spec.dnsConfig.CopyFrom(pod_pb2.PodDNSConfig(**config))  # type: ignore[arg-type]
    return spec


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (dns_spec("ClusterFirst"), []),
        (dns_spec("None", nameservers=["1.1.1.1"]), []),
        (
            dns_spec("None"),
            ["spec.dnsConfig: Required value: must provide `dnsConfig` when `dnsPolicy` is None"],
        ),
        (
            dns_spec("None", searches=["a.example"]),
            [
                "spec.dnsConfig.nameservers: Required value: must provide at least one DNS "
                "nameserver when `dnsPolicy` is None"
            ],
        ),
        (
            dns_spec(nameservers=["1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"]),
            [
                'spec.dnsConfig.nameservers: Invalid value: []string{"1.1.1.1", "1.0.0.1", '
                '"8.8.8.8", "8.8.4.4"}: must not have more than 3 nameservers'
            ],
        ),
        (
            dns_spec(nameservers=["dns.example"]),
            [
                'spec.dnsConfig.nameservers[0]: Invalid value: "dns.example": must be a valid IP '
                "address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
            ],
        ),
        (dns_spec(searches=["a.example."]), []),
        (
            dns_spec(searches=["Bad_Name"]),
            ['spec.dnsConfig.searches[0]: Invalid value: "Bad_Name": '],
        ),
        (
            dns_spec(options=[pod_pb2.PodDNSConfigOption(value="2")]),
            ["spec.dnsConfig.options[0]: Required value: Option.Name must not be empty"],
        ),
    ],
)
def test_pod_dns_config(spec: pod_pb2.PodSpec, expected: list[str]) -> None:
    got = [str(e) for e in validate_pod_dns_config("spec", spec)]
    assert len(got) == len(expected) and all(
        g.startswith(e) for g, e in zip(got, expected, strict=True)
    ), got


def test_pod_dns_search_limits() -> None:
    many = dns_spec(searches=[f"s{i}.example" for i in range(33)])
    assert next(str(e) for e in validate_pod_dns_config("spec", many)).endswith(
        "must not have more than 32 search paths"
    )
    long = dns_spec(searches=["a" * 60 + f".b{i}.example" for i in range(30)])
    assert next(str(e) for e in validate_pod_dns_config("spec", long)).endswith(
        "must not have more than 2048 characters (including spaces) in the search list"
    )


def test_load_balancer_to_external_name_drops_cluster_ip_and_node_ports() -> None:
    old = service("LoadBalancer", clusterIP="10.96.0.9")
    old.spec.ports[0].nodePort = 30080
    new = service_pb2.Service()
    new.CopyFrom(old)
    new.spec.type = "ExternalName"
    new.spec.externalName = "db.example.org"
    strategy_for(SERVICE).prepare_for_update(new, old)
    assert not new.spec.clusterIP and new.spec.ports[0].nodePort == 0
    assert (
        messages(new) == []
        and [str(e) for e in strategy_for(SERVICE).validate_update(new, old)] == []
    )


def test_load_balancer_status_ip_mode_default_and_validation() -> None:
    old = service("LoadBalancer")
    new = service_pb2.Service()
    new.CopyFrom(old)
    new.status.loadBalancer.ingress.add(ip="192.0.2.10")
    merged = strategy_for(SERVICE).prepare_for_status_update(new, old)
    assert merged.status.loadBalancer.ingress[0].ipMode == "VIP"  # type: ignore[attr-defined]
    bad = service("LoadBalancer")
    bad.status.loadBalancer.ingress.add(ip="nope")
    bad.status.loadBalancer.ingress.add(hostname="lb.example.org", ipMode="VIP")
    bad.status.loadBalancer.ingress.add(ip="192.0.2.11", ipMode="Direct")
    bad.status.loadBalancer.ingress.add(hostname="192.0.2.12")
    assert messages(bad) == [
        'status.loadBalancer.ingress[0].ip: Invalid value: "nope": must be a valid IP address',
        "status.loadBalancer.ingress[1].ipMode: Forbidden: may not be specified when `ip` is "
        "not set",
        'status.loadBalancer.ingress[2].ipMode: Unsupported value: "Direct": supported values: '
        '"Proxy", "VIP"',
        'status.loadBalancer.ingress[3].hostname: Invalid value: "192.0.2.12": must be a DNS '
        "name, not an IP address",
    ]


def test_load_balancer_ip_must_be_an_address() -> None:
    assert messages(service("LoadBalancer", loadBalancerIP="10.112.0.7")) == []
    assert messages(service("LoadBalancer", loadBalancerIP="lb.example")) == [
        'spec.loadBalancerIP: Invalid value: "lb.example": must be a valid IP address'
    ]
