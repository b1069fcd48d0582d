"""Create many pods from a template as fast as the apiserver takes them: the benchmark's creator.

Run by `bench/harness.py` as its own OS process (so creating pods does not compete with the
harness's watch for one event loop), or by hand:

    python bench/podcreator.py --apiserver 127.0.0.1:6443 --template pod.json \
        --namespace measure --prefix pod --count 1000 --concurrency 32

`--template` is a JSON file holding one Pod in Kubernetes JSON (lowerCamel fields); pods are named
`<prefix>-<index>` (index from `--start`). `--scheduler-name` overrides spec.schedulerName (the
harness uses a name no scheduler serves to measure Create alone). A fixed number of asyncio
workers share one channel, so at most `--concurrency` Creates are in flight; they go as unary
calls (as a Kubernetes client makes them), or with `--stream` as messages of one
Pods/CreateStream (each exactly a Create to the apiserver, at a fraction of a call's cost on
both ends; docs/api.md), falling back to calls where the apiserver does not serve the stream.
Prints one JSON line:
{"created", "errors", "seconds", "per_second", "first_error"} and exits 0 unless nothing was made.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from pathlib import Path

import grpc
from google.protobuf import json_format

from tinykube import aio
from tinykube.client import Client
from tinykube.v1 import pod_pb2


async def create_pods(
    apiserver: str,
    template: pod_pb2.Pod,
    *,
    namespace: str,
    prefix: str,
    count: int,
    start: int = 0,
    concurrency: int = 32,
    qps: float = 0.0,
    pipeline: bool = False,
) -> dict[str, object]:
    """Create `count` pods with `concurrency` Creates in flight; the summary as a dict.

    With `qps` > 0 the k-th Create is not sent before k/qps seconds after the start (an offered
    load, as the Kubernetes latency SLOs are stated), still with at most `concurrency` in flight.
    """
    errors = 0
    first_error = ""
    indexes = iter(range(start, start + count))
    created = 0

    async with Client(apiserver, timeout=60.0, pipeline=pipeline) as client:
        began = time.perf_counter()

        async def worker() -> None:
            nonlocal errors, first_error, created
            for i in indexes:
                if qps > 0:
                    due = began + (i - start) / qps
                    if (wait := due - time.perf_counter()) > 0:
                        await asyncio.sleep(wait)
                pod = pod_pb2.Pod()
                pod.CopyFrom(template)
                pod.metadata.name = f"{prefix}-{i:06d}"
                pod.metadata.namespace = namespace
                try:
                    await client.pods.create(pod)
                    created += 1
                except Exception as exc:  # counted and reported, the run goes on
                    errors += 1
                    if not first_error:
                        # gRPC's debug string says which side ended the call and why.
                        cause = exc.__cause__
                        debug = (
                            cause.debug_error_string()
                            if isinstance(cause, grpc.aio.AioRpcError)
                            else ""
                        )
                        first_error = f"{type(exc).__name__}: {exc} {debug}".strip()

        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
        seconds = time.perf_counter() - began
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "created": created,
        "errors": errors,
        "seconds": round(seconds, 3),
        "per_second": round(created / seconds, 1) if seconds > 0 else 0.0,
        "first_error": first_error,
        # The harness cannot read /proc of a process that has exited; it reports itself.
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--apiserver", required=True)
    p.add_argument("--template", required=True, help="JSON file with one Pod")
    p.add_argument("--namespace", required=True)
    p.add_argument("--prefix", default="pod")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--scheduler-name", default="")
    p.add_argument("--qps", type=float, default=0.0, help="offered Creates per second (0: max)")
    p.add_argument(
        "--stream", action="store_true", help="Creates as messages of one write stream, not calls"
    )
    a = p.parse_args(argv)
    template = json_format.ParseDict(json.loads(Path(a.template).read_text()), pod_pb2.Pod())
    if a.scheduler_name:
        template.spec.schedulerName = a.scheduler_name
    summary = aio.run(
        create_pods(
            a.apiserver,
            template,
            namespace=a.namespace,
            prefix=a.prefix,
            count=a.count,
            start=a.start,
            concurrency=a.concurrency,
            qps=a.qps,
            pipeline=a.stream,
        )
    )
    print(json.dumps(summary), flush=True)
    return 0 if summary["created"] or not a.count else 1


if __name__ == "__main__":
    sys.exit(main())
