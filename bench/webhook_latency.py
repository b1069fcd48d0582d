"""What one validating admission webhook adds to a pod Create's latency, over the REST API.

    python bench/webhook_latency.py --count 100 --rounds 3

Starts a fresh etcd (tinykube.localetcd), an in-process apiserver (REST, insecure) and an
in-process aiohttp HTTPS webhook server with its own CA that allows every request at once,
then times sequential pod Creates without any webhook configuration and with one
ValidatingWebhookConfiguration matching pods (failurePolicy Fail), `--count` of each per
round, the phases alternating for `--rounds` rounds. The
webhook server shares the apiserver's event loop and CPU, so the figure includes its own
work; on a loaded machine read it as an order of magnitude. Prints one JSON line per phase
(median and p90 milliseconds); nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import ssl
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from createlatency import creates, report

from apiserver.app import APIServer
from apiserver.settings import Settings
from tinykube.localetcd import EtcdServer
from tinykube.pki import PKI, CertSpec


async def _allow(request: web.Request) -> web.Response:
    review = await request.json()
    response = {"uid": review["request"]["uid"], "allowed": True}
    body = {"apiVersion": review["apiVersion"], "kind": "AdmissionReview", "response": response}
    return web.json_response(body)


def _config(port: int, ca: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bench"},
        "webhooks": [
            {
                "name": "allow.bench.example.com",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/allow",
                    "caBundle": base64.b64encode(ca).decode(),
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }
        ],
    }


async def _configure(
    session: aiohttp.ClientSession, base: str, config: dict[str, Any], present: bool
) -> None:
    path = base + "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    if present:
        async with session.post(
            path, data=json.dumps(config), headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == 201, await r.text()
    else:
        async with session.delete(path + "/bench") as r:
            assert r.status == 200, await r.text()


async def main(count: int, rounds: int) -> None:
    etcd = EtcdServer()
    etcd.start()
    tmp = Path(tempfile.mkdtemp(prefix="webhook-bench-"))
    try:
        pki = PKI(tmp / "pki")
        spec = CertSpec("webhook", "webhook", ip_addresses=("127.0.0.1",), server=True)
        paths = pki.ensure_all([spec])["webhook"]
        app = web.Application()
        app.router.add_post("/{tail:.*}", _allow)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(paths.cert, paths.key)
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = runner.addresses[0][1]
        settings = Settings(
            etcd_endpoints=etcd.endpoint,
            etcd_prefix="/webhook-bench",
            bind_address="127.0.0.1:0",
            metrics_port=0,
            rest_port=0,
        )
        server = APIServer(settings)
        await server.start()
        base = f"http://{server.rest_address}"
        async with aiohttp.ClientSession() as session:
            await creates(session, base, "warm", 20)
            config = _config(port, pki.ca_cert_path.read_bytes())
            plain: list[float] = []
            hooked: list[float] = []
            # Alternate the phases so that the machine's load drifts over both alike.
            for round_ in range(rounds):
                plain += await creates(session, base, f"plain{round_}", count)
                await _configure(session, base, config, True)
                while not server.webhooks.hooks(False):  # noqa: ASYNC110 (the cache, no event)
                    await asyncio.sleep(0.01)
                hooked += await creates(session, base, f"hooked{round_}", count)
                await _configure(session, base, config, False)
                while server.webhooks.hooks(False):  # noqa: ASYNC110 (the cache, no event)
                    await asyncio.sleep(0.01)
            report("no webhook", plain)
            report("one validating webhook", hooked)
        await server.stop()
        await runner.cleanup()
    finally:
        etcd.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--count", type=int, default=100, help="creates per phase and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.count, args.rounds))
