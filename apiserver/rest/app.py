"""The REST front end's HTTP server: aiohttp in the apiserver's event loop, one router.

`RestServer(services, ...)` serves Kubernetes' paths: /version, discovery (legacy and
aggregated), /healthz /livez /readyz, /metrics, /openapi/v2 and /openapi/v3, and every
resource under /api/v1 and /apis/<group>/<version> (`handlers.ResourceHandlers` does the
verbs). One catch-all route parses paths itself, so unknown paths, resources and methods get
kube-apiserver's exact Status answers; one middleware turns every error into a Status (never
a traceback), and an outer one holds requests to the apiserver's in-flight limit
(apiserver/rest/inflight.py). aiohttp cancels a handler whose client went away, which is how
idle watches end; a client that leaves mid-response is logged at DEBUG only.

Hostile and slow clients meet kube-apiserver's bounds: the TLS port looks at each connection's
first byte and answers plain HTTP with Go's 400 (`_TlsSite`); a request head must arrive within
`read_header_timeout_seconds` (Go's ReadHeaderTimeout, by aiohttp's keep-alive timer) and a
body within `request_timeout_seconds` (handlers.read_body); a big answer, like a watch's
writes, must be taken within `write_timeout_seconds` or the connection is dropped. With
`access_log` an outermost middleware writes kube's httplog line per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import platform
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from apiserver.accesslog import LogLimiter, access_log, go_duration
from apiserver.auth.authn import StaleTokenError
from apiserver.auth.authorizer import ALL_UNAUTHENTICATED, ANONYMOUS, Authorizer, Identity
from apiserver.auth.filters import Enforcer
from apiserver.auth.review import self_subject_access_review, self_subject_rules_review
from apiserver.flowcontrol import Limiter
from apiserver.metrics import Metrics
from apiserver.resources import ResourceStore
from apiserver.rest import codec as codecs
from apiserver.rest import kubeproto
from apiserver.rest.attributes import rest_attributes
from apiserver.rest.authapi import AuthAPI
from apiserver.rest.codec import AS_PROTOBUF, PROTOBUF, KindCodec, dumps, negotiate
from apiserver.rest.discovery import (
    AGGREGATED_TYPE,
    AUTH_REVIEWS,
    GIT_VERSION,
    RESOURCES,
    SELF_SUBJECT_ACCESS_REVIEW,
    SELF_SUBJECT_RULES_REVIEW,
    Discovery,
    stored_resource,
    version_info,
    wants_aggregated,
)
from apiserver.rest.handlers import (
    IDENTITY,
    PROXY_PATH,
    WARNINGS,
    ResourceHandlers,
    Target,
    read_body,
    store_key,
)
from apiserver.rest.inflight import inflight_middleware
from apiserver.rest.openapi import OpenAPI
from apiserver.rest.status import (
    Resource as StatusResource,
)
from apiserver.rest.status import (
    RestError,
    cause_of,
    method_not_allowed,
    not_found_path,
    status_of,
)
from apiserver.settings import Settings
from tinykube import fieldfacts
from tinykube.clock import Clock
from tinykube.errors import InvalidError, TinykubeError
from tinykube.tls import PLAINTEXT, Credentials

log = logging.getLogger(__name__)

# What a request is about, for the Status of an error raised while serving it.
# What client-go asks /openapi/v2 for, and the type kube-apiserver answers it with.
OPENAPI_V2_PROTOBUF_ACCEPT = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
OPENAPI_V2_PROTOBUF_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"

_NAMESPACE_SUBRESOURCES = ("status", "finalize")
_RESOURCE = web.RequestKey("tinykube_resource", StatusResource)
# Who the request acts as, once the enforcer has authenticated it.
_IDENTITY = IDENTITY
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Named health checks: name -> "is it passing".
HealthChecks = Callable[[], Mapping[str, bool]]
# kube's readyz check that fails once the apiserver has begun to shut down (/readyz only).
SHUTDOWN_CHECK = "shutdown"
# Who sent a request. Until authentication exists every request is anonymous.
Identify = Callable[[web.Request], Identity]
ANONYMOUS_IDENTITY = Identity(ANONYMOUS, (ALL_UNAUTHENTICATED,))


def anonymous(request: web.Request) -> Identity:
    return ANONYMOUS_IDENTITY


# Answers smaller than this go out through the socket's buffers without waiting for the client.
_BUFFERED_BYTES = 64 * 1024
# kube-apiserver (Go's net/http) reads up to 1 MiB of request line and headers
# (http.DefaultMaxHeaderBytes); aiohttp's 8 KiB default refused long label selectors.
MAX_HEADER_BYTES = 1 << 20


class _ServerLog(logging.Logger):
    """aiohttp's server logger, except that a request that is not valid HTTP (a line past the
    limit, a malformed header) is one warning line per minute instead of a traceback each time,
    so a client cannot flood the log with garbage. Other records go on as aiohttp's would."""

    def __init__(self, limiter: LogLimiter) -> None:
        super().__init__("aiohttp.server")
        self.parent = logging.getLogger("aiohttp")
        self.limiter = limiter

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            held = self.limiter.allow()
            if held is not None:
                self.warning(
                    "malformed HTTP request: %s (%d more not logged)",
                    str(exc_info).splitlines()[0],
                    held,
                )
            return
        super().exception(msg, *args, exc_info=exc_info, **kwargs)


class RestServer:
    """Kubernetes' REST API over the kinds' `ResourceStore`s."""

    def __init__(
        self,
        services: Mapping[str, ResourceStore],
        *,
        settings: Settings,
        clock: Clock,
        metrics: Metrics,
        health: HealthChecks,
        limiter: Limiter | None = None,
        authorizer: Authorizer | None = None,
        identify: Identify = anonymous,
        ssl_context: ssl.SSLContext | None = None,
        kubelet_credentials: Credentials = PLAINTEXT,
        enforcer: Enforcer | None = None,
        auth_api: AuthAPI | None = None,
    ) -> None:
        self.settings = settings
        # SelfSubjectAccessReviews ask it; None: the review API answers 404.
        self.authorizer = authorizer
        self.identify = identify
        # TokenRequest, TokenReview, SubjectAccessReviews, OIDC discovery (None: 404).
        self.auth_api = auth_api
        self.metrics = metrics
        self.health = health
        self.discovery = Discovery()
        self.openapi = OpenAPI(self.discovery.schemas, fieldfacts.patch_meta, version=GIT_VERSION)
        self.handlers = ResourceHandlers(
            services, settings=settings, clock=clock, kubelet_credentials=kubelet_credentials
        )
        # HTTPS with the apiserver's serving certificate (None: plaintext, --insecure)
        self.ssl_context = ssl_context
        # A refused request skips everything, error handling included.
        limited = [inflight_middleware(limiter)] if limiter is not None and limiter.enabled else []
        # Authentication and authorization come first, as kube-apiserver's filters: a refused
        # request takes no in-flight seat. None (--insecure): nothing is checked.
        self.enforcer = enforcer
        enforced = [self._enforce] if enforcer is not None else []
        logged = [self._access] if settings.access_log else []
        self.app = web.Application(
            middlewares=[*logged, *enforced, *limited, self._errors, self._write_deadline],
            client_max_size=settings.max_request_bytes + 1,
        )
        self.app.router.add_route("*", "/{path:.*}", self._route)
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._address = ""
        self._build_date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    # ---- lifecycle --------------------------------------------------------------------------

    async def start(self, host: str, port: int) -> int:
        """Listen on host:port (0: any free port); returns the bound port."""
        runner = web.AppRunner(
            self.app,
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=1.0,
            max_line_size=MAX_HEADER_BYTES,
            max_field_size=MAX_HEADER_BYTES,
            logger=_ServerLog(LogLimiter(60.0)),
            # Go's ReadHeaderTimeout: aiohttp's keep-alive timer runs from the connection's
            # start, so a request head that never ends (an HTTP/0.9 line) is closed by it.
            keepalive_timeout=self.settings.read_header_timeout_seconds,
            # Request bodies are decoded by handlers.read_body (bounded, a Status on failure).
            auto_decompress=False,
            lingering_time=2.0,
        )
        await runner.setup()
        site: web.BaseSite
        if self.ssl_context is None:
            site = web.TCPSite(runner, host, port, reuse_address=True)
        else:
            site = _TlsSite(
                runner, host, port, self.ssl_context, self.settings.read_header_timeout_seconds
            )
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        addresses = runner.addresses
        self.port = int(addresses[0][1]) if addresses else port
        shown = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
        self._address = f"{shown}:{self.port}"
        return self.port

    async def listen_also(self, host: str, port: int) -> None:
        """Serve the same API on host:port as well (after `start`): the apiserver's
        --advertise-address when it is not the address it binds."""
        assert self._runner is not None, "listen_also before start"
        site: web.BaseSite
        if self.ssl_context is None:
            site = web.TCPSite(self._runner, host, port, reuse_address=True)
        else:
            site = _TlsSite(
                self._runner,
                host,
                port,
                self.ssl_context,
                self.settings.read_header_timeout_seconds,
            )
        await site.start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---- authentication and authorization -----------------------------------------------------

    @web.middleware
    async def _enforce(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        enforcer = self.enforcer
        assert enforcer is not None
        try:
            try:
                identity = enforcer.rest_identity(request.transport, request.path, request.headers)
            except StaleTokenError:
                # A token minted a moment ago, maybe by another apiserver, for objects this
                # one's caches have not seen yet: let them catch up, then decide.
                await enforcer.authenticator.settle()
                identity = enforcer.rest_identity(
                    request.transport, request.path, request.headers, settled=True
                )
            attrs = rest_attributes(request.method, request.path, request.query)
            enforcer.check(identity, attrs)
        except TinykubeError as exc:
            return self._error_response(exc, None, request)
        request[_IDENTITY] = identity
        return await handler(request)

    def requester(self, request: web.Request) -> Identity:
        """Who `request` acts as: the enforcer's answer, else `identify`'s (--insecure)."""
        identity = request.get(_IDENTITY)
        return identity if identity is not None else self.identify(request)

    # ---- access log -------------------------------------------------------------------------

    @web.middleware
    async def _access(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """One line per request once it ends, as kube-apiserver's httplog at -v=3."""
        start = time.perf_counter()
        status = 0
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = 499  # the client went away before the answer (nginx's word for it)
            raise
        finally:
            identity = request.get(_IDENTITY)
            access_log.info(
                'HTTP verb="%s" URI="%s" latency="%s" userAgent="%s" user="%s" srcIP="%s" resp=%d',
                _verb(request),
                _quoted(request.path_qs),
                go_duration(time.perf_counter() - start),
                _quoted(request.headers.get("User-Agent", "")),
                _quoted(identity.name if identity is not None else ""),
                _peer(request.transport),
                status,
            )

    # ---- slow readers -----------------------------------------------------------------------

    @web.middleware
    async def _write_deadline(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Send a big answer here, within the write deadline: aiohttp would write it after the
        handler with no bound, and a client that never reads would hold it (a LIST of
        megabytes) and its connection forever. Small answers fit the socket's buffers."""
        response = await handler(request)
        seconds = self.settings.write_timeout_seconds
        body = response.body if isinstance(response, web.Response) else None
        if seconds <= 0 or response.prepared or not isinstance(body, bytes):
            return response
        if len(body) < _BUFFERED_BYTES:
            return response
        await response.prepare(request)
        try:
            async with asyncio.timeout(seconds):
                await response.write_eof()
        except TimeoutError:
            log.debug(
                "REST %s %s: the client took nothing for %gs", request.method, request.path, seconds
            )
            if request.transport is not None:
                request.transport.abort()
        return response

    # ---- errors -----------------------------------------------------------------------------

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status == 413:
                err: BaseException = RestError(
                    413,
                    "RequestEntityTooLarge",
                    f"Request entity too large: limit is {self.settings.max_request_bytes}",
                )
            elif exc.status == 404:
                err = not_found_path()
            elif exc.status == 405:
                err = method_not_allowed()
            else:
                raise
            return self._error_response(err, None, request)
        except Exception as exc:
            if isinstance(exc, ConnectionError) and _client_gone(request):
                # The client went away mid-response (a watcher's Ctrl-C): normal life.
                log.debug("REST %s %s: client went away: %s", request.method, request.path, exc)
                return web.Response(status=499)  # nobody reads it; aiohttp drops it quietly
            resource = request.get(_RESOURCE)
            if not isinstance(exc, RestError | TinykubeError):
                log.exception("REST %s %s failed", request.method, request.path)
            return self._error_response(exc, resource, request)

    def _error_response(
        self, exc: BaseException, resource: StatusResource | None, request: web.Request
    ) -> web.Response:
        code, body, headers = status_of(exc, resource)
        # A Status in protobuf for a client that asks for protobuf first, as kube-apiserver.
        fmt = negotiate(request.headers.get("Accept", ""), table=False) or ""
        encoded = kubeproto.encode(body) if fmt.startswith(AS_PROTOBUF) else None
        if encoded is not None:
            resp = web.Response(
                status=code, body=encoded, headers={"Content-Type": PROTOBUF, **headers}
            )
        else:
            resp = web.Response(
                status=code,
                body=dumps(body),
                headers={"Content-Type": "application/json", **headers},
            )
        # Admission webhooks' warnings reach the client with a refusal too.
        for text in request.get(WARNINGS, ()):
            resp.headers.add("Warning", '299 - "' + text.replace('"', '\\"') + '"')
        return resp

    # ---- routing ----------------------------------------------------------------------------

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if len(path) > 1:
            path = path.rstrip("/")
        parts = [p for p in path.split("/") if p]
        if not parts:
            return self._json({"paths": self._paths()})
        head = parts[0]
        if head in ("api", "apis"):
            return await self._api(request, parts)
        if request.method not in ("GET", "HEAD"):
            raise method_not_allowed()
        if parts == ["version"]:
            return self._json(
                version_info(f"{platform.system().lower()}/{_arch()}", self._build_date)
            )
        if head in ("healthz", "livez", "readyz"):
            # One check by its name, which may hold slashes (poststarthook/rbac/bootstrap-roles).
            return self._health(request, head, "/".join(parts[1:]) or None)
        if parts == ["metrics"]:
            return web.Response(
                body=generate_latest(self.metrics.registry),
                headers={"Content-Type": CONTENT_TYPE_LATEST},
            )
        if head == "openapi":
            return self._openapi(request, parts)
        if head in (".well-known", "openid") and self.auth_api is not None:
            return self.auth_api.discovery(request, path)
        raise not_found_path()

    def set_custom_resources(self, stores: Mapping[str, ResourceStore]) -> None:
        """Serve these custom kinds (apiserver/crd/serving.py) besides the built-in ones: their
        discovery entries and codecs (the handlers share the apiserver's store table)."""
        self.discovery = Discovery(
            RESOURCES + tuple(stored_resource(s.info) for s in stores.values())
        )
        for kind, store in stores.items():
            self.handlers.codecs[kind] = KindCodec(
                store.info, getattr(store.strategy, "unknown_fields", None)
            )
        self.openapi.set_custom_kinds(
            [(s.info, getattr(s.strategy, "schema", {})) for s in stores.values()]
        )

    def _paths(self) -> list[str]:
        paths = ["/api", "/apis", "/healthz", "/livez", "/metrics", "/readyz", "/version"]
        paths += ["/openapi/v2", "/openapi/v3"]
        if self.auth_api is not None:
            paths += self.auth_api.discovery_paths
        for gv in self.discovery.group_versions:
            paths.append("/" + gv.path)
            if gv.group:
                paths.append(f"/apis/{gv.group}")
        return sorted(set(paths))

    def _json(self, data: Any, content_type: str = "application/json") -> web.Response:
        return web.Response(body=dumps(data), headers={"Content-Type": content_type})

    async def _api(self, request: web.Request, parts: list[str]) -> web.StreamResponse:
        discovery = self.discovery
        core = parts[0] == "api"
        if core:
            if len(parts) == 1 or parts[1] != "v1":
                if len(parts) == 1:
                    return self._discovery_root(request, core=True)
                raise not_found_path()
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 1:
                return self._discovery_root(request, core=False)
            if len(parts) == 2:
                self._only_get(request)
                doc = discovery.api_group(parts[1])
                if doc is None:
                    raise not_found_path()
                return self._json(doc)
            group, version, rest = parts[1], parts[2], parts[3:]
        gv = discovery.lookup(group, version)
        if gv is None:
            raise not_found_path()
        if not rest:
            self._only_get(request)
            return self._json(discovery.resource_list(gv))
        namespace: str | None = None
        # /api/v1/namespaces/x/status and .../finalize are the namespace's own subresources,
        # not a resource named "status" in namespace x.
        own = core and len(rest) == 3 and rest[2] in _NAMESPACE_SUBRESOURCES
        if rest[0] == "namespaces" and len(rest) >= 3 and not own:
            namespace, rest = rest[1], rest[2:]
        # nodes/NAME/proxy/<path>: the path goes to the kubelet (apiserver/nodeproxy.py).
        proxied = core and len(rest) > 3 and rest[0] == "nodes" and rest[2] == "proxy"
        if len(rest) > 3 and not proxied:
            raise not_found_path()
        if proxied:
            request[PROXY_PATH] = "/".join(rest[3:])
            rest = rest[:3]
        resource = gv.resource(rest[0])
        if resource is None:
            raise not_found_path()
        if resource is SELF_SUBJECT_ACCESS_REVIEW or resource is SELF_SUBJECT_RULES_REVIEW:
            rules = resource is SELF_SUBJECT_RULES_REVIEW
            return await self._access_review(request, rest, rules=rules)
        if resource in AUTH_REVIEWS:
            if self.auth_api is None:
                raise not_found_path()
            return await self.auth_api.review(request, resource, namespace, rest, self.requester)
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub == "token" and resource.kind == "ServiceAccount" and namespace and name:
            if self.auth_api is None:
                raise not_found_path()
            return await self.auth_api.token(request, namespace, name, request.get(_IDENTITY))
        if namespace is not None and not resource.namespaced:
            raise not_found_path()
        if resource.namespaced and namespace is None and name is not None:
            raise not_found_path()
        if sub is not None and resource.subresource(sub) is None:
            raise not_found_path()
        target = Target(resource, namespace, name, sub)
        request[_RESOURCE] = StatusResource(resource.view or resource.info, name or "", sub or "")
        response = await self.handlers.handle(request, target)
        if resource.info is None or not resource.info.custom:
            return response
        service = self.handlers.services.get(store_key(resource.info))
        warning = getattr(service, "deprecation_warning", "")
        if warning and not response.prepared:
            response.headers.add("Warning", '299 - "' + warning.replace('"', '\\"') + '"')
        return response

    async def _access_review(
        self, request: web.Request, rest: list[str], *, rules: bool = False
    ) -> web.Response:
        """POST selfsubjectaccessreviews (or, `rules`, selfsubjectrulesreviews): answered for
        the requester, never stored (201)."""
        if self.authorizer is None or len(rest) != 1:
            raise not_found_path()
        if request.method != "POST":
            raise method_not_allowed()
        body = await read_body(
            request, self.settings.max_request_bytes, self.settings.request_timeout_seconds
        )
        media = codecs.content_type_of(request.headers.get("Content-Type", "")) or codecs.JSON
        if media == codecs.PROTOBUF:
            if rules:
                review = kubeproto.self_subject_rules_review(body)
            else:
                review = kubeproto.self_subject_access_review(body)
        else:
            review = codecs.parse_object_body(body, media)
        answer_for = self_subject_rules_review if rules else self_subject_access_review
        try:
            answer = answer_for(self.authorizer, self.requester(request), review)
        except InvalidError as exc:
            details = {
                "group": "authorization.k8s.io",
                "kind": "SelfSubjectRulesReview" if rules else "SelfSubjectAccessReview",
                "causes": [cause_of(c) for c in exc.causes],
            }
            raise RestError(422, "Invalid", exc.message, details) from None
        return web.Response(
            status=201, body=dumps(answer), headers={"Content-Type": "application/json"}
        )

    def _only_get(self, request: web.Request) -> None:
        if request.method not in ("GET", "HEAD"):
            raise method_not_allowed()

    def _discovery_root(self, request: web.Request, *, core: bool) -> web.Response:
        self._only_get(request)
        if wants_aggregated(request.headers.get("Accept", "")):
            response = self._json(self.discovery.aggregated(core), AGGREGATED_TYPE)
        elif core:
            response = self._json(self.discovery.api_versions(self._address))
        else:
            response = self._json(self.discovery.api_group_list())
        response.headers["Vary"] = "Accept"
        return response

    # ---- health, OpenAPI --------------------------------------------------------------------

    def _health(self, request: web.Request, endpoint: str, only: str | None) -> web.Response:
        checks = {"ping": True, **self.health()}
        if endpoint == "healthz":
            checks.pop(SHUTDOWN_CHECK, None)  # kube's readyz alone has it
        elif endpoint == "livez":
            # Liveness is about this process; a sick etcd must not get the apiserver killed,
            # nor must a bootstrap policy etcd has not taken yet (readiness waits for that).
            checks = {"ping": True}
        if only is not None:
            if only not in checks:
                raise not_found_path()
            ok = checks[only]
            return web.Response(
                status=200 if ok else 500,
                text="ok" if ok else f"internal server error: {only} check failed",
            )
        ok = all(checks.values())
        if "verbose" in request.query or not ok:
            lines = [
                f"[+]{name} ok" if passed else f"[-]{name} failed: reason withheld"
                for name, passed in checks.items()
            ]
            lines.append(f"{endpoint} check {'passed' if ok else 'failed'}")
            return web.Response(status=200 if ok else 500, text="\n".join(lines) + "\n")
        return web.Response(text="ok")

    def _openapi(self, request: web.Request, parts: list[str]) -> web.Response:
        if parts == ["openapi", "v2"]:
            # client-go asks for the protobuf form only and decodes it as protobuf.
            if OPENAPI_V2_PROTOBUF_ACCEPT in request.headers.get("Accept", ""):
                return web.Response(
                    body=self.openapi.v2_protobuf(),
                    headers={"Content-Type": OPENAPI_V2_PROTOBUF_TYPE},
                )
            return web.Response(
                body=self.openapi.v2_json(), headers={"Content-Type": "application/json"}
            )
        if parts == ["openapi", "v3"]:
            return web.Response(
                body=self.openapi.v3_index(), headers={"Content-Type": "application/json"}
            )
        if len(parts) > 2 and parts[1] == "v3":
            path = "/".join(parts[2:])
            doc = self.openapi.v3_document(path)
            if doc is None:
                raise not_found_path()
            digest = self.openapi.v3_hash(path)
            headers = {"Content-Type": "application/json", "Etag": f'"{digest}"'}
            # The index names each document by its hash, so a hashed URL never changes.
            if request.query.get("hash") == digest:
                headers["Cache-Control"] = "public, immutable"
                headers["Expires"] = "Thu, 01 Jan 2099 00:00:00 GMT"
            return web.Response(body=doc, headers=headers)
        raise not_found_path()


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _verb(request: web.Request) -> str:
    """kube-apiserver's verb for the log: LIST and WATCH for collection GETs, APPLY."""
    try:
        verb = rest_attributes(request.method, request.path, request.query).verb
    except Exception:  # a path the parser cannot read is logged by its method
        verb = ""
    if request.method == "PATCH" and request.content_type == "application/apply-patch+yaml":
        verb = "apply"
    return (verb or request.method).upper()


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _peer(transport: asyncio.BaseTransport | None) -> str:
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return ""


# Go's net/http answer to plain HTTP on a TLS port (server.go), sent before closing.
PLAIN_HTTP_ANSWER = (
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)
_TLS_HANDSHAKE = 0x16


class _Listener:
    """What aiohttp's runner reads of a site's server (`sockets`, `close()`)."""

    def __init__(self, sock: socket.socket, task: asyncio.Task[None]) -> None:
        self.sockets = [sock]
        self.task = task

    def close(self) -> None:
        self.task.cancel()
        for sock in self.sockets:
            sock.close()


class _TlsSite(web.BaseSite):
    """HTTPS on host:port that first looks at each connection's first byte, as Go's TLS server
    does: a TLS handshake goes on to aiohttp over TLS; plain HTTP gets Go's 400 "Client sent an
    HTTP request to an HTTPS server" and is closed (asyncio's TLS transport would close it
    without a word); a connection silent for the header timeout is closed."""

    __slots__ = ("_host", "_pending", "_port", "_timeout")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext,
        timeout: float,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host, self._port, self._timeout = host, port, timeout
        self._pending: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        family, _, _, _, address = socket.getaddrinfo(
            self._host or None, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.create_server(address[:2], family=family, backlog=self._backlog)
        sock.setblocking(False)
        self._server = _Listener(sock, asyncio.create_task(self._accept(sock)))  # type: ignore[assignment]

    async def stop(self) -> None:
        for task in list(self._pending):
            task.cancel()
        await super().stop()

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:  # out of file descriptors, a reset before accept
                log.debug("REST accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            task = asyncio.create_task(self._connection(conn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _connection(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        try:
            async with asyncio.timeout(self._timeout):
                first = await _peek(loop, conn)
            if first and first[0] == _TLS_HANDSHAKE:
                await loop.connect_accepted_socket(
                    self._runner.server,  # type: ignore[arg-type]
                    conn,
                    ssl=self._ssl_context,
                    ssl_handshake_timeout=self._timeout,
                )
                return
            if first[:1].isalpha():
                await _answer_plain_http(loop, conn)
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            log.debug("REST connection dropped before TLS: %s", exc)
        except asyncio.CancelledError:
            conn.close()
            raise
        conn.close()


async def _answer_plain_http(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    """Go's answer, then a graceful close: what the client sent is read first (a socket closed
    with unread data resets the connection, and the client would lose the answer)."""
    with contextlib.suppress(OSError):
        while conn.recv(65536):
            pass
    with contextlib.suppress(OSError, TimeoutError):
        await loop.sock_sendall(conn, PLAIN_HTTP_ANSWER)
        conn.shutdown(socket.SHUT_WR)
        async with asyncio.timeout(2.0):
            while await loop.sock_recv(conn, 65536):
                pass


async def _peek(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> bytes:
    """The first bytes a client sent, left unread for the TLS layer."""
    ready: asyncio.Future[None] = loop.create_future()
    fd = conn.fileno()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
    return conn.recv(5, socket.MSG_PEEK)


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
