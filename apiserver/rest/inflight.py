"""The REST front end's side of the in-flight limit (apiserver/flowcontrol.py).

`request_info(method, path, query)` reads a request as kube-apiserver's RequestInfoFactory
does (API prefix, group, version, namespace, resource, name, subresource; the verb from the
HTTP method, GET of a collection being list, or watch with `?watch=true`; DELETE of a
collection deletecollection; non-resource paths take the lower-case HTTP method as verb), and
returns None for what the limit does not count: long-running requests (watch, and the
subresources kube-apiserver treats as long-running: log, exec, attach, portforward, proxy) and
the health probes. `inflight_middleware(limiter)` is the aiohttp middleware: a request over
the limit waits in its connection's queue (`peer`; HTTP/1.1 sends one request at a time on a
connection, so a flow is one connection's requests), and a refused one
gets kube-apiserver's exact answer: 429, `Retry-After: 1`, and the plain-text body
"Too many requests, please try again later." (kube-apiserver writes it with http.Error, not as
a Status; client-go turns it into a TooManyRequests Status error carrying
details.retryAfterSeconds from the header, and retries it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web
from aiohttp.typedefs import Middleware

from apiserver.flowcontrol import RETRY_AFTER_SECONDS, TOO_MANY_REQUESTS, Limiter, RequestInfo

_VERB_OF_METHOD = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
# kube-apiserver's BasicLongRunningRequestCheck(verbs watch, proxy; subresources ...).
_LONG_RUNNING_VERBS = frozenset({"watch", "proxy"})
_LONG_RUNNING_SUBRESOURCES = frozenset({"attach", "exec", "proxy", "log", "portforward"})
_PROBES = frozenset({"healthz", "livez", "readyz"})
# strconv.ParseBool's true spellings, as the handlers parse ?watch=.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def request_info(method: str, path: str, query: Mapping[str, str]) -> RequestInfo | None:
    """What the limit counts this request as; None if it is not counted."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        if parts and parts[0] in _PROBES:
            return None
        return RequestInfo(method.lower(), "", "", "", "")
    rest = parts[1:]
    group = ""
    if parts[0] == "apis":
        if len(rest) < 3:
            return RequestInfo(method.lower(), "", "", "", "")
        group, rest = rest[0], rest[1:]
    elif len(rest) < 2:
        return RequestInfo(method.lower(), "", "", "", "")
    rest = rest[1:]  # the version
    if rest[0] in _LONG_RUNNING_VERBS:
        return None
    verb = _VERB_OF_METHOD.get(method, "")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if subresource in _LONG_RUNNING_SUBRESOURCES:
        return None
    if not name:
        if verb == "get":
            if query.get("watch") in _TRUE:
                return None
            verb = "list"
        elif verb == "delete":
            verb = "deletecollection"
    return RequestInfo(verb, group, resource, subresource, namespace)


def too_many_requests() -> web.Response:
    """kube-apiserver's answer to a request over the limit (Go's http.Error form)."""
    return web.Response(
        status=429,
        text=TOO_MANY_REQUESTS + "\n",
        headers={
            "Content-Type": "text/plain; charset=utf-8",
            "X-Content-Type-Options": "nosniff",
            "Retry-After": str(RETRY_AFTER_SECONDS),
        },
    )


def peer(request: web.Request) -> str:
    """The request's connection, as "host:port" (its flow until there are users)."""
    transport = request.transport
    name = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(name, tuple) and len(name) >= 2:
        return f"{name[0]}:{name[1]}"
    return str(name or "")


def inflight_middleware(limiter: Limiter) -> Middleware:
    """The aiohttp middleware holding every counted request to `limiter`."""
    admit, acquire, release = limiter.admit, limiter.acquire, limiter.release

    @web.middleware
    async def inflight(request: web.Request, handler: Handler) -> web.StreamResponse:
        info = request_info(request.method, request.path, request.query)
        if info is None:
            return await handler(request)
        seat = admit(info)
        if seat is None:
            # No deadline: kube-apiserver's is its --request-timeout, which tinykube lacks.
            seat = await acquire(info, peer(request), None)
        if seat is None:
            return too_many_requests()
        try:
            return await handler(request)
        finally:
            release(seat)

    return inflight
