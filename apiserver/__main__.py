"""`python -m apiserver`: flags (with TINYKUBE_* environment fallbacks) -> Settings -> APIServer.

Runs until SIGINT/SIGTERM, then stops gracefully: health goes NOT_SERVING, in-flight RPCs get
`--shutdown-grace` seconds, watches end, and the etcd connection is closed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from apiserver.allocator import parse_ip_range, parse_port_range
from apiserver.app import APIServer
from apiserver.settings import Settings
from tinykube import aio
from tinykube.serving import configure_logging, run_until_signalled

_DEFAULTS = Settings()


def _env(name: str, default: object) -> str:
    return os.environ.get(f"TINYKUBE_{name}", str(default))


def parse_args(argv: Sequence[str] | None = None) -> tuple[Settings, str]:
    p = argparse.ArgumentParser(
        prog="python -m apiserver",
        description="tinykube apiserver: a typed gRPC API over etcd, and Kubernetes' REST API.",
    )
    p.add_argument(
        "--etcd-servers",
        default=_env("ETCD_SERVERS", _DEFAULTS.etcd_endpoints),
        help="etcd endpoints, host:port[,host:port] (env TINYKUBE_ETCD_SERVERS)",
    )
    p.add_argument(
        "--etcd-prefix",
        default=_env("ETCD_PREFIX", _DEFAULTS.etcd_prefix),
        help="key prefix of every object in etcd (env TINYKUBE_ETCD_PREFIX)",
    )
    p.add_argument(
        "--bind-address",
        default=_env("BIND_ADDRESS", _DEFAULTS.bind_address),
        help="gRPC listen address host:port (env TINYKUBE_BIND_ADDRESS)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help="shorthand for --bind-address 0.0.0.0:PORT",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=int(_env("METRICS_PORT", _DEFAULTS.metrics_port)),
        help="Prometheus /metrics HTTP port, 0 disables (env TINYKUBE_METRICS_PORT)",
    )
    p.add_argument(
        "--rest-port",
        type=int,
        default=int(_env("REST_PORT", _DEFAULTS.rest_port)),
        help="Kubernetes REST API port (kubectl's default is localhost:8080); 0 picks a free "
        "port, -1 disables it (env TINYKUBE_REST_PORT)",
    )
    p.add_argument(
        "--watch-cache-size",
        type=int,
        default=int(_env("WATCH_CACHE_SIZE", _DEFAULTS.watch_cache_size)),
        help="events kept per kind for watch resumption (env TINYKUBE_WATCH_CACHE_SIZE)",
    )
    p.add_argument(
        "--watcher-queue-size",
        type=int,
        default=int(_env("WATCHER_QUEUE_SIZE", _DEFAULTS.watcher_queue_size)),
        help="events one watcher may lag behind before it is cut off",
    )
    p.add_argument(
        "--compaction-interval",
        type=float,
        default=float(_env("COMPACTION_INTERVAL", _DEFAULTS.compaction_interval_seconds)),
        help="seconds between etcd compactions, 0 disables (env TINYKUBE_COMPACTION_INTERVAL)",
    )
    p.add_argument(
        "--watch-cache-bytes",
        type=int,
        default=int(_env("WATCH_CACHE_BYTES", _DEFAULTS.watch_cache_bytes)),
        help="serialized object bytes kept per kind in the watch cache's event window, oldest "
        "evicted first; 0 bounds it by --watch-cache-size only (env TINYKUBE_WATCH_CACHE_BYTES)",
    )
    p.add_argument(
        "--max-request-bytes",
        type=int,
        default=int(_env("MAX_REQUEST_BYTES", _DEFAULTS.max_request_bytes)),
        help="largest accepted request (env TINYKUBE_MAX_REQUEST_BYTES)",
    )
    p.add_argument(
        "--max-object-bytes",
        type=int,
        default=int(_env("MAX_OBJECT_BYTES", _DEFAULTS.max_object_bytes)),
        help="largest object as stored in etcd, at most etcd's own --max-request-bytes "
        "(env TINYKUBE_MAX_OBJECT_BYTES)",
    )
    p.add_argument(
        "--max-requests-inflight",
        type=int,
        default=int(_env("MAX_REQUESTS_INFLIGHT", _DEFAULTS.max_requests_inflight)),
        help="read-only requests executing at once, over it 429 / RESOURCE_EXHAUSTED; "
        "watches not counted; 0: no limit (env TINYKUBE_MAX_REQUESTS_INFLIGHT)",
    )
    p.add_argument(
        "--max-mutating-requests-inflight",
        type=int,
        default=int(
            _env("MAX_MUTATING_REQUESTS_INFLIGHT", _DEFAULTS.max_mutating_requests_inflight)
        ),
        help="mutating requests executing at once, as --max-requests-inflight "
        "(env TINYKUBE_MAX_MUTATING_REQUESTS_INFLIGHT)",
    )
    p.add_argument(
        "--etcd-timeout",
        type=float,
        default=float(_env("ETCD_TIMEOUT", _DEFAULTS.etcd_request_timeout_seconds)),
        help="deadline of each etcd request in seconds",
    )
    p.add_argument(
        "--etcd-batch-writes",
        choices=("true", "false"),
        default=_env("ETCD_BATCH_WRITES", str(_DEFAULTS.etcd_batch_writes).lower()),
        help="concurrent single-key writes share one etcd txn (false: one txn per write)",
    )
    p.add_argument(
        "--watch-batch-window",
        type=float,
        default=float(_env("WATCH_BATCH_WINDOW", _DEFAULTS.watch_batch_window_seconds)),
        help="seconds: WatchBatch sends a busy watcher at most one message per window "
        "(an idle watcher's event goes out at once); 0: no waiting",
    )
    p.add_argument(
        "--shutdown-grace",
        type=float,
        default=float(_env("SHUTDOWN_GRACE", _DEFAULTS.shutdown_grace_seconds)),
        help="seconds in-flight requests get on SIGTERM",
    )
    p.add_argument(
        "--service-cluster-ip-range",
        default=_env("SERVICE_CLUSTER_IP_RANGE", _DEFAULTS.service_cluster_ip_range),
        help="CIDR inside 127.0.0.0/8 that Services' cluster IPs come from",
    )
    p.add_argument(
        "--service-node-port-range",
        default=_env("SERVICE_NODE_PORT_RANGE", _DEFAULTS.service_node_port_range),
        help="LOW-HIGH range NodePort services' node ports come from",
    )
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))
    args = p.parse_args(argv)
    try:
        parse_ip_range(args.service_cluster_ip_range)
        parse_port_range(args.service_node_port_range)
    except ValueError as exc:
        p.error(str(exc))
    for flag in ("max_requests_inflight", "max_mutating_requests_inflight"):
        if getattr(args, flag) < 0:
            p.error(f"--{flag.replace('_', '-')} can not be negative value")
    bind = args.bind_address if args.port is None else f"0.0.0.0:{args.port}"
    settings = Settings(
        etcd_endpoints=args.etcd_servers,
        etcd_prefix=args.etcd_prefix,
        bind_address=bind,
        metrics_port=args.metrics_port,
        rest_port=args.rest_port,
        watch_cache_size=args.watch_cache_size,
        watch_cache_bytes=args.watch_cache_bytes,
        watcher_queue_size=args.watcher_queue_size,
        compaction_interval_seconds=args.compaction_interval,
        max_request_bytes=args.max_request_bytes,
        max_object_bytes=args.max_object_bytes,
        max_requests_inflight=args.max_requests_inflight,
        max_mutating_requests_inflight=args.max_mutating_requests_inflight,
        etcd_request_timeout_seconds=args.etcd_timeout,
        shutdown_grace_seconds=args.shutdown_grace,
        watch_batch_window_seconds=args.watch_batch_window,
        etcd_batch_writes=args.etcd_batch_writes.lower() == "true",
        service_cluster_ip_range=args.service_cluster_ip_range,
        service_node_port_range=args.service_node_port_range,
    )
    return settings, str(args.log_level)


async def run(settings: Settings) -> None:
    server = APIServer(settings)
    if settings.metrics_port > 0:
        from prometheus_client import start_http_server

        start_http_server(settings.metrics_port, registry=server.metrics.registry)
    await server.start()
    print(f"apiserver listening on {server.address}", flush=True)
    if server.rest is not None:
        print(f"apiserver REST API on http://{server.rest_address}", flush=True)
    await run_until_signalled(server.stop)


def main(argv: Sequence[str] | None = None) -> int:
    settings, level = parse_args(argv)
    configure_logging(level)
    aio.run(run(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
