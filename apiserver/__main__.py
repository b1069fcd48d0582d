"""`python -m apiserver`: flags (with TINYKUBE_* environment fallbacks) -> Settings -> APIServer.

Runs until SIGINT/SIGTERM, then stops gracefully: health goes NOT_SERVING, in-flight RPCs get
`--shutdown-grace` seconds, watches end, and the etcd connection is closed.
"""

from __future__ import annotations

import argparse
import ctypes
import ipaddress
import logging
import os
import sys
from collections.abc import Sequence

from apiserver.allocator import parse_ip_range, parse_port_range
from apiserver.app import APIServer, service_account_keys
from apiserver.auth.tokens import KeyFileError
from apiserver.memory import watch_cache_report
from apiserver.settings import Settings, etcd_targets
from tinykube import aio, memreport
from tinykube.serving import configure_logging, run_until_signalled
from tinykube.tls import INSECURE_WARNING

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
        help="etcd endpoints, host:port[,host:port] or one unix socket, unix:///path "
        "(unixs:///path: TLS over it) (env TINYKUBE_ETCD_SERVERS)",
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
        help="shorthand for --bind-address 127.0.0.1:PORT",
    )
    p.add_argument(
        "--advertise-address",
        default=_env("ADVERTISE_ADDRESS", _DEFAULTS.advertise_address),
        help="the IP the kubernetes Service's endpoints name (default: the --bind-address "
        "host); the REST API is served on it too (env TINYKUBE_ADVERTISE_ADDRESS)",
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
        "--watcher-queue-bytes",
        type=int,
        default=int(_env("WATCHER_QUEUE_BYTES", _DEFAULTS.watcher_queue_bytes)),
        help="serialized event bytes one watcher may lag behind before it is cut off; 0: "
        "bounded by --watcher-queue-size only (env TINYKUBE_WATCHER_QUEUE_BYTES)",
    )
    p.add_argument(
        "--write-timeout",
        type=float,
        default=float(_env("WRITE_TIMEOUT", _DEFAULTS.write_timeout_seconds)),
        help="seconds a client may leave a response or watch write untaken before its "
        "connection is closed; 0: no deadline (env TINYKUBE_WRITE_TIMEOUT)",
    )
    p.add_argument(
        "--read-header-timeout",
        type=float,
        default=float(_env("READ_HEADER_TIMEOUT", _DEFAULTS.read_header_timeout_seconds)),
        help="seconds a REST connection gets to send a request's head (and an idle one stays "
        "open), as Go's ReadHeaderTimeout (env TINYKUBE_READ_HEADER_TIMEOUT)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=float(_env("REQUEST_TIMEOUT", _DEFAULTS.request_timeout_seconds)),
        help="seconds a REST request body gets to arrive whole (kube-apiserver's "
        "--request-timeout) (env TINYKUBE_REQUEST_TIMEOUT)",
    )
    p.add_argument(
        "--access-log",
        action="store_true",
        default=_env("ACCESS_LOG", "").lower() in ("1", "true", "yes"),
        help="log one line per REST and gRPC request: verb, URI, status, latency, user agent, "
        "user, source address (env TINYKUBE_ACCESS_LOG)",
    )
    p.add_argument(
        "-v",
        "--v",
        type=int,
        default=int(_env("V", 0)),
        help="kube-apiserver's log verbosity: 3 or more turns the access log on, as "
        "kube-apiserver's httplog (env TINYKUBE_V)",
    )
    p.add_argument(
        "--compaction-interval",
        type=float,
        default=float(_env("COMPACTION_INTERVAL", _DEFAULTS.compaction_interval_seconds)),
        help="seconds between etcd compactions, 0 disables (env TINYKUBE_COMPACTION_INTERVAL)",
    )
    p.add_argument(
        "--event-ttl",
        default=_env("EVENT_TTL", f"{_DEFAULTS.event_ttl_seconds}s"),
        help="how long an Event is kept after its last write, a duration (1h, 90m, 3600s); "
        "0 keeps Events until deleted (env TINYKUBE_EVENT_TTL)",
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
        "--max-stream-messages-per-connection",
        type=int,
        default=int(
            _env(
                "MAX_STREAM_MESSAGES_PER_CONNECTION",
                _DEFAULTS.max_stream_messages_per_connection,
            )
        ),
        help="write-stream messages of one client connection run at once, over all its "
        "streams; more wait unread in HTTP/2 flow control; 0: no bound "
        "(env TINYKUBE_MAX_STREAM_MESSAGES_PER_CONNECTION)",
    )
    p.add_argument(
        "--etcd-timeout",
        type=float,
        default=float(_env("ETCD_TIMEOUT", _DEFAULTS.etcd_request_timeout_seconds)),
        help="deadline of each etcd request in seconds, retries included",
    )
    p.add_argument(
        "--etcd-write-attempt-timeout",
        type=float,
        default=float(
            _env("ETCD_WRITE_ATTEMPT_TIMEOUT", _DEFAULTS.etcd_write_attempt_timeout_seconds)
        ),
        help="seconds one etcd write attempt may take before it is sent again (guarded txns "
        "are safe to resend): how long writes stall when the etcd leader dies",
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
        help="IPv4 CIDR Services' cluster IPs come from (default inside 127.0.0.0/8 for the "
        "user-space proxy; 10.96.0.0/12 under the proxy's nftables mode)",
    )
    p.add_argument(
        "--service-node-port-range",
        default=_env("SERVICE_NODE_PORT_RANGE", _DEFAULTS.service_node_port_range),
        help="LOW-HIGH range NodePort services' node ports come from",
    )
    _tls_flags(p)
    _service_account_flags(p)
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))
    args = p.parse_args(argv)
    try:
        parse_ip_range(args.service_cluster_ip_range)
        parse_port_range(args.service_node_port_range)
        etcd_targets(args.etcd_servers)
    except ValueError as exc:
        p.error(str(exc))
    if args.advertise_address:
        try:
            advertised = ipaddress.ip_address(args.advertise_address)
        except ValueError:
            p.error(f"--advertise-address {args.advertise_address!r} is not an IP address")
        if advertised.is_unspecified:
            p.error(f"--advertise-address {args.advertise_address}: must be a unicast address")
    for flag in (
        "max_requests_inflight",
        "max_mutating_requests_inflight",
        "max_stream_messages_per_connection",
    ):
        if getattr(args, flag) < 0:
            p.error(f"--{flag.replace('_', '-')} can not be negative value")
    bind = args.bind_address if args.port is None else f"127.0.0.1:{args.port}"
    settings = Settings(
        etcd_endpoints=args.etcd_servers,
        etcd_prefix=args.etcd_prefix,
        bind_address=bind,
        advertise_address=args.advertise_address,
        metrics_port=args.metrics_port,
        rest_port=args.rest_port,
        watch_cache_size=args.watch_cache_size,
        watch_cache_bytes=args.watch_cache_bytes,
        watcher_queue_size=args.watcher_queue_size,
        watcher_queue_bytes=args.watcher_queue_bytes,
        write_timeout_seconds=args.write_timeout,
        read_header_timeout_seconds=args.read_header_timeout,
        request_timeout_seconds=args.request_timeout,
        access_log=args.access_log or args.v >= 3,
        compaction_interval_seconds=args.compaction_interval,
        event_ttl_seconds=_duration_seconds(p, "--event-ttl", args.event_ttl),
        max_request_bytes=args.max_request_bytes,
        max_object_bytes=args.max_object_bytes,
        max_requests_inflight=args.max_requests_inflight,
        max_mutating_requests_inflight=args.max_mutating_requests_inflight,
        max_stream_messages_per_connection=args.max_stream_messages_per_connection,
        etcd_request_timeout_seconds=args.etcd_timeout,
        etcd_write_attempt_timeout_seconds=args.etcd_write_attempt_timeout,
        shutdown_grace_seconds=args.shutdown_grace,
        watch_batch_window_seconds=args.watch_batch_window,
        etcd_batch_writes=args.etcd_batch_writes.lower() == "true",
        service_cluster_ip_range=args.service_cluster_ip_range,
        service_node_port_range=args.service_node_port_range,
        insecure=args.insecure,
        tls_cert_file=args.tls_cert_file,
        tls_private_key_file=args.tls_private_key_file,
        client_ca_file=args.client_ca_file,
        token_auth_file=args.token_auth_file,
        etcd_cafile=args.etcd_cafile,
        etcd_certfile=args.etcd_certfile,
        etcd_keyfile=args.etcd_keyfile,
        kubelet_client_certificate=args.kubelet_client_certificate,
        kubelet_client_key=args.kubelet_client_key,
        kubelet_certificate_authority=args.kubelet_certificate_authority,
        service_account_key_files=tuple(_list(args.service_account_key_file)),
        service_account_signing_key_file=args.service_account_signing_key_file,
        service_account_issuers=tuple(_list(args.service_account_issuer))
        or ("https://kubernetes.default.svc.cluster.local",),
        api_audiences=tuple(_list(args.api_audiences)),
        service_account_max_token_expiration_seconds=_duration_seconds(
            p, "--service-account-max-token-expiration", args.service_account_max_token_expiration
        ),
        service_account_jwks_uri=args.service_account_jwks_uri,
    )
    try:
        # Read now: a missing or unusable key is a flag error, not a traceback at start.
        service_account_keys(settings)
    except KeyFileError as exc:
        p.error(str(exc))
    if not settings.insecure and not (settings.tls_cert_file and settings.tls_private_key_file):
        p.error(
            "--tls-cert-file and --tls-private-key-file are required (`tinykube up` writes "
            "them); pass --insecure for plaintext development mode"
        )
    return settings, str(args.log_level)


def _tls_flags(p: argparse.ArgumentParser) -> None:
    """kube-apiserver's flags for TLS, client authentication, etcd's and the kubelets' TLS."""
    for flag, env, what in (
        ("--tls-cert-file", "TLS_CERT_FILE", "serving certificate of the gRPC and REST ports"),
        ("--tls-private-key-file", "TLS_PRIVATE_KEY_FILE", "its private key"),
        (
            "--client-ca-file",
            "CLIENT_CA_FILE",
            "CA of the client certificates that authenticate users (CN user, O groups); "
            "gRPC requires one, REST asks for one",
        ),
        (
            "--token-auth-file",
            "TOKEN_AUTH_FILE",
            'bearer tokens, CSV: token,user,uid,"group1,group2"',
        ),
        ("--etcd-cafile", "ETCD_CAFILE", "CA that etcd's serving certificate is signed by"),
        ("--etcd-certfile", "ETCD_CERTFILE", "client certificate presented to etcd"),
        ("--etcd-keyfile", "ETCD_KEYFILE", "its private key"),
        (
            "--kubelet-client-certificate",
            "KUBELET_CLIENT_CERTIFICATE",
            "client certificate presented to kubelets (pod logs)",
        ),
        ("--kubelet-client-key", "KUBELET_CLIENT_KEY", "its private key"),
        (
            "--kubelet-certificate-authority",
            "KUBELET_CERTIFICATE_AUTHORITY",
            "CA that kubelets' serving certificates are signed by",
        ),
    ):
        p.add_argument(flag, default=_env(env, ""), help=f"{what} (env TINYKUBE_{env})")
    p.add_argument(
        "--insecure",
        action="store_true",
        default=_env("INSECURE", "").lower() in ("1", "true", "yes"),
        help="development only: plaintext gRPC, REST and etcd links, every request anonymous "
        "(logs a warning at start)",
    )


def _list(values: Sequence[str]) -> list[str]:
    """A repeatable, comma-separable flag's values (kube's StringSlice)."""
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _duration_seconds(p: argparse.ArgumentParser, flag: str, text: str) -> int:
    """A Go duration ("24h", "90m", "3600s", "1h30m") or plain seconds, as whole seconds."""
    text = text.strip()
    if not text or text == "0":
        return 0
    if text.isdigit():
        return int(text)
    units = {"h": 3600, "m": 60, "s": 1}
    total, number = 0.0, ""
    for ch in text:
        if ch.isdigit() or ch == ".":
            number += ch
        elif ch in units and number:
            total += float(number) * units[ch]
            number = ""
        else:
            p.error(f"{flag}: invalid duration {text!r} (e.g. 24h, 90m, 3600s)")
    if number:
        p.error(f"{flag}: invalid duration {text!r} (e.g. 24h, 90m, 3600s)")
    return int(total)


def _service_account_flags(p: argparse.ArgumentParser) -> None:
    """kube-apiserver's service account token flags."""
    p.add_argument(
        "--service-account-key-file",
        action="append",
        default=_list([_env("SERVICE_ACCOUNT_KEY_FILE", "")]),
        help="PEM public keys (or certificates, or private keys) service account tokens are "
        "verified with; repeatable (env TINYKUBE_SERVICE_ACCOUNT_KEY_FILE)",
    )
    p.add_argument(
        "--service-account-signing-key-file",
        default=_env("SERVICE_ACCOUNT_SIGNING_KEY_FILE", ""),
        help="PEM private key (RSA or EC P-256) TokenRequest signs tokens with "
        "(env TINYKUBE_SERVICE_ACCOUNT_SIGNING_KEY_FILE)",
    )
    p.add_argument(
        "--service-account-issuer",
        action="append",
        default=[],
        help="issuer (iss) of service account tokens; repeatable, the first signs "
        "(default https://kubernetes.default.svc.cluster.local)",
    )
    p.add_argument(
        "--api-audiences",
        action="append",
        default=[],
        help="audiences the API accepts in tokens, comma-separated (default: the issuers)",
    )
    p.add_argument(
        "--service-account-max-token-expiration",
        default=_env("SERVICE_ACCOUNT_MAX_TOKEN_EXPIRATION", "0"),
        help="longest lifetime a TokenRequest gets (Go duration, e.g. 24h; 0: no bound)",
    )
    p.add_argument(
        "--service-account-jwks-uri",
        default="",
        help="jwks_uri of /.well-known/openid-configuration (default <issuer>/openid/v1/jwks)",
    )


# kube-apiserver's exit code when a post-start hook fails (klog.Fatalf exits 255).
FATAL_EXIT_CODE = 255


async def run(settings: Settings) -> int:
    """Serve until SIGINT or SIGTERM (0), or until the apiserver cannot go on (FATAL_EXIT_CODE,
    after its error is logged: the bootstrap RBAC policy could not be put in place)."""
    if settings.insecure:
        logging.getLogger("apiserver").warning("%s", INSECURE_WARNING)
    server = APIServer(settings)
    if settings.metrics_port > 0:
        from prometheus_client import start_http_server

        host = settings.bind_address.rsplit(":", 1)[0].strip("[]") or "127.0.0.1"
        start_http_server(settings.metrics_port, addr=host, registry=server.metrics.registry)
    await server.start()
    memreport.install(lambda: {"watch_caches": watch_cache_report(server.caches)})
    print(f"apiserver listening on {server.address}", flush=True)
    if server.rest is not None:
        print(f"apiserver REST API on {server.rest_url}", flush=True)
    await run_until_signalled(server.stop, failed=server.fatal)
    if server.fatal_error:  # (logged when it happened)
        return FATAL_EXIT_CODE
    return 0


# glibc's mallopt parameter: allocations at least this big get their own mapping.
_M_MMAP_THRESHOLD = -3


def give_memory_back() -> None:
    """Make glibc give big blocks back to the OS when they are freed.

    The apiserver's big allocations are object versions and watch messages (up to 1.5 MiB
    each). glibc serves blocks over 128 KiB with mmap, but raises that threshold dynamically up
    to 32 MiB each time such a block is freed, after which they come from the heap and, with
    the small objects around them, are never returned: 50 slow watchers' queues freed left the
    RSS they had grown to. Fixing the threshold keeps every big block its own mapping, unmapped
    when freed. A no-op where the C library is not glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    settings, level = parse_args(argv)
    configure_logging(level)
    give_memory_back()
    return aio.run(run(settings))


if __name__ == "__main__":
    sys.exit(main())
