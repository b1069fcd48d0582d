"""The apiserver's settings: one immutable dataclass built in `__main__` and passed everywhere."""

from __future__ import annotations

from dataclasses import dataclass

# etcd client URL schemes of a unix domain socket (etcd's client and so kube-apiserver's
# --etcd-servers): `unixs` is TLS over the socket.
UNIX_SCHEMES = ("unix://", "unixs://")


def etcd_target(endpoint: str) -> str:
    """One --etcd-servers entry as a gRPC address: `host:port` for TCP (an http:// or https://
    scheme dropped), `unix:PATH` for a socket, in etcd's client's forms: `unix:///abs/path`,
    `unix://relative/path` (from the working directory), `unixs://` the same with TLS."""
    for scheme in UNIX_SCHEMES:
        if endpoint.startswith(scheme):
            path = endpoint[len(scheme) :]
            if not path:
                raise ValueError(f"etcd endpoint {endpoint!r} names no socket path")
            return "unix:" + path
    return endpoint.split("://", 1)[-1].rstrip("/")


def etcd_targets(endpoints: str) -> list[str]:
    """The comma-separated --etcd-servers as gRPC addresses. A socket is one etcd member's,
    on this host: it is the only endpoint (one channel target holds one socket)."""
    found = [etcd_target(e.strip()) for e in endpoints.split(",") if e.strip()]
    if len(found) > 1 and any(t.startswith("unix:") for t in found):
        raise ValueError(
            f"--etcd-servers {endpoints}: a unix socket endpoint must be the only one "
            "(list an etcd cluster's members by host:port)"
        )
    return found


@dataclass(frozen=True)
class Settings:
    # "host:port[,host:port]" (http:// or https:// URLs too), or one unix socket
    # ("unix:///path", "unixs:///path" with TLS): etcd client endpoints.
    etcd_endpoints: str = "127.0.0.1:2379"
    # Every key lives under this prefix; tests give each apiserver its own.
    etcd_prefix: str = "/registry"
    bind_address: str = "127.0.0.1:6443"
    # Prometheus /metrics over HTTP; 0 disables it.
    metrics_port: int = 0
    # Kubernetes' REST API (apiserver/rest) on this port at bind_address's host, so a bare
    # kubectl (which talks to localhost:8080) finds it. 0 picks a free port; -1 disables it.
    rest_port: int = 8080
    # A REST watch without timeoutSeconds ends after this long, jittered up to twice it
    # (kube-apiserver's --min-request-timeout, 1800 s): clients then re-watch.
    rest_watch_timeout_seconds: float = 1800.0
    # Events kept per kind in the watch cache's window; a watch from an older
    # resourceVersion gets OUT_OF_RANGE and the client relists.
    watch_cache_size: int = 10_000
    # ...and at most this many bytes per kind, oldest evicted first (0: no byte bound): each
    # event's serialized object and the event encodings made for its watchers (gRPC event bytes,
    # REST JSON lines). 64 MiB keeps the whole 10,000-event window for objects up to ~6.5 KiB
    # (a bound pod with status is 1-3 KiB), so only big objects are bounded by it; it holds
    # ~20-40 versions of an object at the 1.5 MiB limit; a full window's resident cost is about
    # the budget (the cache keeps no decoded message beside the bytes, apiserver/watchcache.py).
    watch_cache_bytes: int = 64 * 1024 * 1024
    # Events a single watcher may have queued before it is cut off as too slow...
    watcher_queue_size: int = 10_000
    # ...and serialized bytes (0: bounded by count only). A watcher over either bound is
    # dropped with an ERROR event (RESOURCE_EXHAUSTED), as kube's cacheWatcher is, and what it
    # had queued is freed at once. Watchers of one kind share the bytes of the events they
    # queue; this bounds what one slow client can keep alive after the window has let it go.
    watcher_queue_bytes: int = 8 * 1024 * 1024
    # A watch or response write that the client does not take within this many seconds ends
    # the connection (a socket nobody reads holds its buffers until then). 0: no deadline.
    write_timeout_seconds: float = 60.0
    # Go's ReadHeaderTimeout in kube-apiserver (32 s): a connection that has not sent a whole
    # request head (request line and headers) within this long is closed, and so is an idle
    # keep-alive connection.
    read_header_timeout_seconds: float = 32.0
    # kube-apiserver's --request-timeout (1 min): a request body that has not arrived whole
    # within this long is answered 400 and the connection closed.
    request_timeout_seconds: float = 60.0
    # One line per REST and gRPC request (kube-apiserver's httplog at -v=3): verb, URI, status,
    # latency, user agent, user, source address. Off by default (`--access-log` or `--v=3`).
    access_log: bool = False
    # kube-apiserver's --event-ttl: an Event vanishes this long after its last write (etcd
    # deletes it with its lease; watchers see it DELETED). 0 keeps Events until deleted.
    event_ttl_seconds: int = 3600
    # How often etcd is compacted; the previous interval's revisions are kept. 0 disables.
    compaction_interval_seconds: float = 300.0
    # kube-apiserver's request body limit (3 MiB, twice etcd's: JSON is bigger than the stored
    # protobuf): larger requests are rejected before they are decoded.
    max_request_bytes: int = 3 * 1024 * 1024
    # Largest object as stored: etcd's default --max-request-bytes (1.5 MiB). Over it is a 4xx
    # naming the size (413 over REST), where kube-apiserver passes etcd's 500 through.
    max_object_bytes: int = 1536 * 1024
    # kube-apiserver's --max-requests-inflight / --max-mutating-requests-inflight: read-only
    # (get, list) and mutating requests executing at once, watches and logs not counted; one
    # more is refused (429 / RESOURCE_EXHAUSTED, retry after 1 s). 0: that kind is unlimited.
    # Node heartbeats and leader election have seats of their own besides (flowcontrol.py).
    max_requests_inflight: int = 400
    max_mutating_requests_inflight: int = 200
    # Write-stream messages of one connection handed to handlers at once, over all its streams;
    # more wait unread (HTTP/2 flow control), as kube-apiserver's MAX_CONCURRENT_STREAMS holds a
    # connection's requests (flowcontrol.py `ConnectionSlots`). 0: no bound.
    max_stream_messages_per_connection: int = 100
    # Deadline of each etcd request, retries included; a dead etcd shows as UNAVAILABLE after
    # this long.
    etcd_request_timeout_seconds: float = 5.0
    # Deadline of one attempt of a write before it is sent again (a write forwarded to an etcd
    # leader that died is never answered; etcd elects a new one within about a second).
    etcd_write_attempt_timeout_seconds: float = 2.0
    # Concurrent single-key writes share one etcd txn (apiserver/txnbatch.py); False sends
    # every write as its own txn.
    etcd_batch_writes: bool = True
    # WatchBatch sends at most one message per window to a watcher: an event for an idle
    # watcher goes out at once, and while events keep coming the ones of the next window
    # share a message. 0 sends whatever is queued as soon as the previous write completes.
    watch_batch_window_seconds: float = 0.01
    # How often each watch cache asks etcd for progress (so a quiet kind's revision moves) and
    # looks for watchers due a BOOKMARK.
    bookmark_interval_seconds: float = 5.0
    # How often a watch that asks for bookmarks gets one (kube-apiserver's bookmarkFrequency:
    # a minute), and 2 s before the watch's own deadline if that comes first.
    bookmark_frequency_seconds: float = 60.0
    # How long a consistent List or a watch from a future revision waits for the cache.
    cache_wait_seconds: float = 3.0
    # Seconds the graceful shutdown lets in-flight RPCs finish.
    shutdown_grace_seconds: float = 5.0
    # How long the bootstrap RBAC policy may keep failing before the apiserver exits, as
    # kube-apiserver's post-start hook rbac/bootstrap-roles (polled every second for 30 s, then
    # fatal if etcd does not answer, done without the objects that failed if it does). Not a
    # flag (kube has none); tests shorten it.
    bootstrap_policy_timeout_seconds: float = 30.0
    # Default grace period of pods that do not set terminationGracePeriodSeconds.
    default_termination_grace_seconds: int = 30
    # Services' cluster IPs come from this CIDR (default inside 127.0.0.0/8: local on any Linux
    # host, for the user-space proxy; `tinykube up --runtime containerd` passes 10.96.0.0/12).
    service_cluster_ip_range: str = "127.100.0.0/16"
    # kube-apiserver's --advertise-address: the IP the `kubernetes` Service's endpoints name,
    # which pods reach through the Service's cluster IP. "" means bind_address's host. When it
    # is another address than that host (and the host is not a wildcard), the REST API is also
    # served on it, at the same port: pods in their own network namespaces cannot reach the
    # host's 127.0.0.1 (`up --runtime containerd` advertises an address on `lo`).
    advertise_address: str = ""
    # NodePort services' node ports come from this inclusive range.
    service_node_port_range: str = "30000-32767"

    # TLS (tinykube/tls.py): the serving certificate of both front ends, the CA client
    # certificates must chain to, the static token file, etcd's client certificate and CA,
    # the kubelet client certificate the log proxy presents and the CA kubelets' serving
    # certificates must chain to. `insecure`: plaintext everywhere (development only).
    insecure: bool = False
    tls_cert_file: str = ""
    tls_private_key_file: str = ""
    client_ca_file: str = ""
    token_auth_file: str = ""
    etcd_cafile: str = ""
    etcd_certfile: str = ""
    etcd_keyfile: str = ""
    kubelet_client_certificate: str = ""
    kubelet_client_key: str = ""
    kubelet_certificate_authority: str = ""
    # Service account tokens (apiserver/auth/tokens.py), kube-apiserver's flags: the public
    # keys tokens are verified with (files of PEM keys or certificates), the private key
    # TokenRequest signs with (no key: no TokenRequest), the issuers accepted (the first is
    # written in new tokens), the audiences the API accepts (empty: the issuers), the longest
    # lifetime a TokenRequest gets (0: no bound) and the jwks_uri the OIDC discovery document
    # names (empty: <issuer>/openid/v1/jwks).
    service_account_key_files: tuple[str, ...] = ()
    service_account_signing_key_file: str = ""
    service_account_issuers: tuple[str, ...] = ("https://kubernetes.default.svc.cluster.local",)
    api_audiences: tuple[str, ...] = ()
    service_account_max_token_expiration_seconds: int = 0
    service_account_jwks_uri: str = ""

    @property
    def audiences(self) -> tuple[str, ...]:
        """--api-audiences, defaulting to the service account issuers as kube's."""
        return self.api_audiences or self.service_account_issuers

    @property
    def endpoints(self) -> list[str]:
        """etcd's endpoints as gRPC addresses (`etcd_targets`): host:port, or unix:PATH."""
        return etcd_targets(self.etcd_endpoints)

    @property
    def etcd_tls(self) -> bool:
        """TLS to etcd: an https:// or unixs:// endpoint, or a CA to verify it with."""
        return bool(self.etcd_cafile) or any(
            scheme in self.etcd_endpoints for scheme in ("https://", "unixs://")
        )

    @property
    def prefix(self) -> str:
        """The key prefix without a trailing slash ("/registry")."""
        return "/" + self.etcd_prefix.strip("/") if self.etcd_prefix.strip("/") else ""
