"""Per-request cost enforcement adds: authentication, attributes, the Node,RBAC chain, and
NodeRestriction, as the gRPC and REST front ends run them (apiserver/auth/filters.py).

No cluster: the Enforcer of a real apiserver over bench.authz's chain (bootstrap policy,
`--bindings` RoleBindings, `--pods` pods on `--nodes` nodes) and a PKI made in a temporary
directory. gRPC cases call the front end's `_guarded` wrapper (without the in-flight limit)
around a handler that does nothing, with a context whose auth_context() holds the caller's
certificate as grpc gives it;
`auth_context()` itself is timed on a real TLS call (an in-process grpc.aio server, loopback).
Microseconds per call (best of `--repeat` rounds of `--number`), JSON on stdout:

- scheduler Pods/Bind, kubelet Pods/UpdateStatus (plus NodeRestriction's check of the write),
  kubelet Leases/Update of its Lease, controller manager Leases/Update of its leader Lease,
- a kubelet's REST GET of its pods (the certificate memoized per connection),
- grpc's `context.auth_context()` on a real TLS connection.

    .venv/bin/python bench/enforcement.py [--number 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
import timeit
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from authz import build
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from apiserver.auth.authn import Authenticator
from apiserver.auth.filters import Enforcer, admit_node_write
from apiserver.grpcapi import _guarded
from apiserver.requestcontext import RequestContext
from apiserver.rest.attributes import rest_attributes
from tinykube.pki import PKI, cluster_specs
from tinykube.tls import Credentials, ServingTLS
from tinykube.v1 import lease_pb2, meta_pb2, pod_pb2


class CertContext:
    """The two things the enforcer reads of a grpc.aio context."""

    def __init__(self, pem: bytes) -> None:
        self._auth = {"x509_pem_cert": [pem], "transport_security_type": [b"ssl"]}

    def auth_context(self) -> dict[str, list[bytes]]:
        # grpc builds a fresh dict and fresh bytes on every call; so does this.
        return {k: [bytes(bytearray(v)) for v in vs] for k, vs in self._auth.items()}

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("user-agent", "grpc-python"), ("x-field-manager", "kubelet"))


class FakeSSL:
    def __init__(self, der: bytes) -> None:
        self.der = der

    def getpeercert(self, binary_form: bool = False) -> bytes:
        return self.der


class FakeTransport:
    def __init__(self, der: bytes) -> None:
        self.ssl = FakeSSL(der)

    def get_extra_info(self, name: str) -> Any:
        return self.ssl if name == "ssl_object" else None


async def _nothing(request: Any, context: Any, identity: Any = None) -> None:
    return None


def _drive(call: Callable[[], Awaitable[None]], number: int, repeat: int) -> float:
    """Best per-call µs of awaiting `call()` `number` times (a coroutine that never suspends
    is driven by send(None), as the event loop would, without the loop's own cost)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            coro: Any = call()
            with contextlib.suppress(StopIteration):
                coro.send(None)
        best = min(best, time.perf_counter() - start)
    return best / number * 1e6


async def _real_auth_context_us(pki: PKI, number: int) -> float:
    api = pki.paths("apiserver")
    tls = ServingTLS(str(api.cert), str(api.key), str(pki.ca_cert_path))
    server = grpc.aio.server()
    port = server.add_secure_port("127.0.0.1:0", tls.grpc_credentials())
    took: list[float] = []

    async def probe(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        start = time.perf_counter()
        for _ in range(number):
            context.auth_context()
        took.append((time.perf_counter() - start) / number * 1e6)
        return b""

    handler = grpc.method_handlers_generic_handler(
        "bench.Probe",
        {"Get": grpc.unary_unary_rpc_method_handler(probe, bytes, bytes)},
    )
    server.add_generic_rpc_handlers((handler,))
    await server.start()
    paths = pki.paths("kubelet-node-1")
    creds = Credentials(
        ca=pki.ca_cert_path.read_bytes(),
        cert=paths.cert.read_bytes(),
        key=paths.key.read_bytes(),
    )
    try:
        async with creds.channel(f"127.0.0.1:{port}") as channel:
            call: Any = channel.unary_unary("/bench.Probe/Get")
            for _ in range(3):
                await call(b"", timeout=30)
    finally:
        await server.stop(0)
    return min(took)


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--number", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--bindings", type=int, default=1000)
    p.add_argument("--pods", type=int, default=10_000)
    p.add_argument("--nodes", type=int, default=1000)
    args = p.parse_args()
    n, r = args.number, args.repeat

    with tempfile.TemporaryDirectory() as tmp:
        pki = PKI(Path(tmp) / "pki")
        pki.ensure_all(cluster_specs(["node-1"]))
        chain = build(args.bindings, args.pods, args.nodes)
        chain_pods: Any = chain.authorizers[0]
        chain_pods.pods.pods[("default", "pod-1")] = "node-1"
        enforcer = Enforcer(Authenticator(), chain)

        def pem(name: str) -> bytes:
            return pki.paths(name).cert.read_bytes()

        bind = pod_pb2.BindRequest(
            binding=pod_pb2.Binding(
                metadata=meta_pb2.ObjectMeta(name="pod-1", namespace="default"),
                target=meta_pb2.ObjectReference(kind="Node", name="node-1"),
            )
        )
        status = pod_pb2.UpdatePodRequest(
            pod=pod_pb2.Pod(metadata=meta_pb2.ObjectMeta(name="pod-1", namespace="default"))
        )
        status.pod.spec.nodeName = "node-1"
        renew = lease_pb2.UpdateLeaseRequest(
            lease=lease_pb2.Lease(
                metadata=meta_pb2.ObjectMeta(name="node-1", namespace="kube-node-lease")
            )
        )
        leader = lease_pb2.UpdateLeaseRequest(
            lease=lease_pb2.Lease(
                metadata=meta_pb2.ObjectMeta(
                    name="tinykube-controller-manager", namespace="kube-system"
                )
            )
        )

        async def node_write(request: Any, context: Any, identity: Any = None) -> None:
            # What the resource layer adds for a node's write: NodeRestriction on old and new,
            # when the request has an identity (the enforced call; the bare one has none, as a
            # handler on an --insecure apiserver, and the resource layer then checks nothing).
            if identity is not None:
                admit_node_write(
                    identity,
                    "update",
                    "pods",
                    "",
                    "status",
                    "default",
                    "pod-1",
                    status.pod,
                    status.pod,
                )

        cases: dict[str, tuple[str, Any, str, Callable[..., Awaitable[None]]]] = {
            "scheduler bind": ("/tinykube.v1.Pods/Bind", bind, "scheduler", _nothing),
            "kubelet pod status update": (
                "/tinykube.v1.Pods/UpdateStatus",
                status,
                "kubelet-node-1",
                node_write,
            ),
            "kubelet lease renewal": (
                "/tinykube.v1.Leases/Update",
                renew,
                "kubelet-node-1",
                _nothing,
            ),
            "controller manager leader lease": (
                "/tinykube.v1.Leases/Update",
                leader,
                "controller-manager",
                _nothing,
            ),
        }
        out: dict[str, Any] = {"unit": "microseconds per request", "cases": {}}
        for name, (method, request, cert, inner) in cases.items():
            wrapped = _guarded(inner, method, enforcer, None)
            context = CertContext(pem(cert))
            bare = _drive(lambda i=inner, c=context, q=request: i(q, c), n, r)  # type: ignore[misc]
            full = _drive(lambda w=wrapped, c=context, q=request: w(q, c), n, r)  # type: ignore[misc]
            out["cases"][name] = round(full - bare, 2)

        der = x509.load_pem_x509_certificate(pem("kubelet-node-1")).public_bytes(Encoding.DER)
        transport = FakeTransport(der)
        query = {"fieldSelector": "spec.nodeName=node-1"}

        def rest_get() -> None:
            identity = enforcer.rest_identity(transport, "/api/v1/pods", {})
            enforcer.check(identity, rest_attributes("GET", "/api/v1/pods", query))
            RequestContext(identity=identity)  # what the REST front end passes the store

        rest_us = min(timeit.repeat(rest_get, number=n, repeat=r)) / n * 1e6
        out["cases"]["kubelet REST list of its pods"] = round(rest_us, 2)
        out["cases"]["grpc auth_context() on a TLS call"] = round(
            asyncio.run(_real_auth_context_us(pki, n)), 2
        )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
