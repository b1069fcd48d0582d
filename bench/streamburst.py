"""A burst of Lease renewals on one connection's write streams, against the apiserver's bound on
the messages of one connection handed to handlers at once (`--max-stream-messages-per-connection`).

    python bench/streamburst.py --nodes 2500 --bounds 0,16,50,100,300 --rounds 3

A process of hollow kubelets renews each node's Lease on a Leases/UpdateStream of that node's
own, all on one channel. When they fire together (start-up, or after a stall), every renewal
reaches the apiserver's handler at once. This starts an etcd and, for each bound in turn
(interleaved over `--rounds`), a plaintext apiserver with that bound and the given in-flight
limits; creates the Leases; then sends one renewal per node at once (the kubelet's message
timeout metadata, 10 s) and waits for every answer. Per burst: the seconds until the last
answer, the answers by code, and the apiserver's CPU seconds for the burst (from /proc).
Prints one JSON line per burst and writes them all to `--out`. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

import grpc  # noqa: E402

from tinykube.health import wait_healthy  # noqa: E402
from tinykube.localetcd import EtcdServer, free_port  # noqa: E402
from tinykube.serving import CHANNEL_OPTIONS  # noqa: E402
from tinykube.v1 import lease_pb2, lease_pb2_grpc  # noqa: E402
from tinykube.writestream import MESSAGE_TIMEOUT_KEY  # noqa: E402

NAMESPACE = "kube-node-lease"
_CODES = {c.value[0]: c.name for c in grpc.StatusCode}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _alive(process: subprocess.Popen[bytes]) -> bool:
    return process.poll() is None


def _lease(name: str) -> lease_pb2.Lease:
    lease = lease_pb2.Lease(apiVersion="coordination.k8s.io/v1", kind="Lease")
    lease.metadata.name, lease.metadata.namespace = name, NAMESPACE
    lease.spec.holderIdentity = name
    lease.spec.leaseDurationSeconds = 40
    return lease


async def _burst(address: str, nodes: int, pid: int) -> dict[str, Any]:
    async with grpc.aio.insecure_channel(address, options=list(CHANNEL_OPTIONS)) as channel:
        stub = lease_pb2_grpc.LeasesStub(channel)
        leases: dict[str, lease_pb2.Lease] = {}

        async def create(names: list[str]) -> None:
            for name in names:
                while True:
                    try:
                        leases[name] = await stub.Create(
                            lease_pb2.CreateLeaseRequest(lease=_lease(name)), timeout=30
                        )
                        break
                    except grpc.aio.AioRpcError as exc:
                        if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                            raise
                        await asyncio.sleep(0.2)

        names = [f"hollow-{k}" for k in range(nodes)]
        await asyncio.gather(*(create(names[k::16]) for k in range(16)))
        streams = [
            channel.stream_stream(
                "/tinykube.v1.Leases/UpdateStream",
                request_serializer=lease_pb2.UpdateLeaseRequest.SerializeToString,
                response_deserializer=lease_pb2.LeaseWriteResult.FromString,
            )(metadata=((MESSAGE_TIMEOUT_KEY, "10000"),))
            for _ in names
        ]

        def renewal(name: str) -> lease_pb2.UpdateLeaseRequest:
            lease = lease_pb2.Lease()
            lease.CopyFrom(leases[name])
            lease.spec.renewTime.GetCurrentTime()
            return lease_pb2.UpdateLeaseRequest(lease=lease)

        requests = [renewal(n) for n in names]
        await asyncio.sleep(1.0)  # the streams are open on the server
        cpu = _cpu_seconds(pid)
        began = time.monotonic()
        await asyncio.gather(*(s.write(r) for s, r in zip(streams, requests, strict=True)))
        answers: list[Any] = list(await asyncio.gather(*(s.read() for s in streams)))
        seconds = time.monotonic() - began
        cpu = _cpu_seconds(pid) - cpu
        for s in streams:
            await s.done_writing()
        codes = Counter(_CODES.get(a.code, str(a.code)) for a in answers)
        return {
            "seconds": round(seconds, 3),
            "apiserver_cpu_seconds": round(cpu, 3),
            "codes": dict(codes),
            "renewed_per_second": round(codes.get("OK", 0) / seconds, 1),
        }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, default=2500)
    p.add_argument("--bounds", default="0,16,50,100,300", help="0: no bound")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--max-requests-inflight", type=int, default=400)
    p.add_argument("--max-mutating-requests-inflight", type=int, default=200)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tinykube-streamburst-"))
    etcd = EtcdServer(str(work / "etcd"), die_with_parent=True)
    etcd.start()
    results = []
    try:
        for rnd in range(a.rounds):
            for bound in (int(b) for b in a.bounds.split(",")):
                port = free_port()
                cmd = [sys.executable, "-m", "apiserver", "--insecure"]
                cmd += ["--etcd-servers", etcd.url, "--etcd-prefix", f"/burst-{rnd}-{bound}"]
                cmd += ["--bind-address", f"127.0.0.1:{port}", "--rest-port", "-1"]
                cmd += ["--compaction-interval", "0"]
                cmd += ["--max-requests-inflight", str(a.max_requests_inflight)]
                cmd += ["--max-mutating-requests-inflight", str(a.max_mutating_requests_inflight)]
                cmd += ["--max-stream-messages-per-connection", str(bound)]
                env = {**os.environ, "PYTHONPATH": str(HERE)}
                with open(work / f"apiserver-{rnd}-{bound}.log", "wb") as log:
                    api = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=log, stderr=log)
                try:
                    wait_healthy(f"127.0.0.1:{port}", 120, alive=functools.partial(_alive, api))
                    result = asyncio.run(_burst(f"127.0.0.1:{port}", a.nodes, api.pid))
                finally:
                    api.terminate()
                    api.wait(30)
                result = {
                    "bound": bound,
                    "round": rnd,
                    "nodes": a.nodes,
                    "max_requests_inflight": a.max_requests_inflight,
                    "max_mutating_requests_inflight": a.max_mutating_requests_inflight,
                    "load_average": os.getloadavg(),
                    **result,
                }
                print(json.dumps(result), flush=True)
                results.append(result)
    finally:
        etcd.stop()
        shutil.rmtree(work, ignore_errors=True)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
