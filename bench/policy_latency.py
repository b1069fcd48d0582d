"""What ValidatingAdmissionPolicies add to a pod Create's latency, over the REST API.

    python bench/policy_latency.py --count 200 --rounds 3

Starts a fresh etcd (tinykube.localetcd) and an in-process apiserver (REST, insecure), then
times sequential pod Creates in three phases, `--count` each per round, the phases alternating
for `--rounds` rounds: no policy at all; one bound policy whose rules name Deployments only
(it does not match a pod); that one plus a bound policy matching pods whose two validations
and one variable pass (`variables.containers.size() <= 10`, `object.metadata.name != ''`).
Prints one JSON line per phase (median and p90 milliseconds), and the in-process cost of the
plugin's `wants` check for a pod with the non-matching policy only (microseconds, no I/O);
nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import aiohttp
from createlatency import creates, report

from apiserver.app import APIServer
from apiserver.settings import Settings
from apiserver.webhooks import WebhookRequest
from tinykube.localetcd import EtcdServer

GROUP = "/apis/admissionregistration.k8s.io/v1"


def _policy(name: str, group: str, resource: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": [resource],
                    }
                ]
            },
            "variables": [{"name": "containers", "expression": "object.spec.containers"}],
            "validations": [
                {"expression": "variables.containers.size() <= 10"},
                {"expression": "object.metadata.name != ''"},
            ],
        },
    }


def _binding(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> None:
    async with session.post(
        url, data=json.dumps(body), headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 201, await r.text()


async def _bind(session: aiohttp.ClientSession, base: str, policy: dict[str, Any]) -> None:
    # A policy write is answered once this apiserver's plugin sees it.
    await _post(session, f"{base}{GROUP}/validatingadmissionpolicies", policy)
    await _post(
        session,
        f"{base}{GROUP}/validatingadmissionpolicybindings",
        _binding(policy["metadata"]["name"]),
    )


async def _unbind(session: aiohttp.ClientSession, base: str, name: str) -> None:
    for path in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
        async with session.delete(f"{base}{GROUP}/{path}/{name}") as r:
            assert r.status == 200, await r.text()


async def main(count: int, rounds: int) -> None:
    etcd = EtcdServer()
    etcd.start()
    try:
        settings = Settings(
            etcd_endpoints=etcd.endpoint,
            etcd_prefix="/policy-bench",
            bind_address="127.0.0.1:0",
            metrics_port=0,
            rest_port=0,
        )
        server = APIServer(settings)
        await server.start()
        policies = server.admission.policies
        assert policies is not None
        base = f"http://{server.rest_address}"
        other = _policy("deployments-only", "apps", "deployments")
        pods = _policy("pods-checked", "", "pods")
        phases: dict[str, list[float]] = {"none": [], "non-matching": [], "matching": []}
        async with aiohttp.ClientSession() as session:
            await creates(session, base, "warm", 20)
            for round_ in range(rounds):
                phases["none"] += await creates(session, base, f"none{round_}", count)
                await _bind(session, base, other)
                phases["non-matching"] += await creates(session, base, f"other{round_}", count)
                if round_ == 0:
                    req = WebhookRequest(
                        group="", version="v1", kind="Pod", resource="pods", subresource="",
                        namespace="default", name="x", operation="CREATE", object=None,
                        old_object=None,
                    )  # fmt: skip
                    loops = 100_000
                    start = time.perf_counter()
                    for _ in range(loops):
                        policies.active() and policies.wants(req)
                    per = (time.perf_counter() - start) / loops * 1e6
                    print(
                        json.dumps({"phase": "wants() non-matching", "us_per_call": round(per, 3)})
                    )
                await _bind(session, base, pods)
                phases["matching"] += await creates(session, base, f"match{round_}", count)
                await _unbind(session, base, "pods-checked")
                await _unbind(session, base, "deployments-only")
                while policies.active():  # noqa: ASYNC110 (the cache, no event)
                    await asyncio.sleep(0.01)
        report("no policy", phases["none"])
        report("one non-matching policy", phases["non-matching"])
        report("one non-matching and one matching policy", phases["matching"])
        await server.stop()
    finally:
        etcd.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--count", type=int, default=200, help="creates per phase and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.count, args.rounds))
