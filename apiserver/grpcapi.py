"""The gRPC front end: one service per kind, a codec and a router over `apiserver.resources`.

`GrpcResource(resource).handler()` registers a kind's methods (Create, Get, List, Update,
UpdateStatus, Delete, Watch, WatchBatch; for pods Bind, BindBatch, UpdateStatusBatch and Evict, for
namespaces Finalize; the write streams CreateStream, UpdateStream, UpdateStatusStream its .proto
declares, each message run by the unary method's handler: `WriteStream`) with
`grpc.method_handlers_generic_handler` rather than the generated `add_*Servicer_to_server`, so
List and Watch can return the watch cache's pre-encoded bytes (the response serializer passes
bytes through); the generated descriptors still drive reflection, so grpcurl sees the same
services. The semantics are the `ResourceStore`'s; this module only decodes requests, encodes
answers and streams watches. `MetricsInterceptor` counts and times every RPC, turns raised
`TinykubeError`s into statuses in one place, and holds unary calls to the in-flight limit
(apiserver/flowcontrol.py; watches are not counted): a call over it waits in its
connection's queue, and one refused (queue full, or waited too long) ends RESOURCE_EXHAUSTED
before its handler runs, with the retry hint in trailing metadata (`RETRY_PUSHBACK_KEY`); it
does all of that per message of a write stream, each message's outcome its answer, through the
same per-request guard (`_guarded`). A connection's write-stream messages are handed to
handlers at most `MessageGate.limit` at a time, the rest waiting unread (flowcontrol.py
`ConnectionSlots`), as gRPC core holds unary calls until the event loop accepts them. The
server's graceful stop ends every write stream (`OpenWriteStreams.end`) as it ends the watches.
Request deserializers (`request_decoder`) turn a body that is not the method's message into
INVALID_ARGUMENT naming the problem, logged at most once a minute.
Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from apiserver.accesslog import LogLimiter, access_log, go_duration
from apiserver.auth.authorizer import Identity
from apiserver.auth.filters import Enforcer
from apiserver.flowcontrol import (
    RETRY_AFTER_SECONDS,
    TOO_MANY_REQUESTS,
    ConnectionSlots,
    Limiter,
    MessageGate,
    RequestInfo,
)
from apiserver.grpcattributes import attributes_for
from apiserver.metrics import Metrics
from apiserver.namespacestore import NamespaceStore
from apiserver.podstore import PodStore
from apiserver.requestcontext import RequestContext, dry_run_of
from apiserver.resources import ResourceStore
from apiserver.watchcache import encode_list, iter_batch_messages
from tinykube.errors import (
    BadRequestError,
    DeadlineExceededError,
    NotFoundError,
    TinykubeError,
    TooManyRequestsError,
    answer_with,
    deadline_passed,
)
from tinykube.kinds import ALL_KINDS, KindInfo
from tinykube.manifest import ManifestError, hold_big_ints, parse_as, to_dict, whole_numbers
from tinykube.v1 import apiextensions_pb2, meta_pb2, pod_pb2
from tinykube.writestream import MESSAGE_TIMEOUT_KEY, declared_methods

log = logging.getLogger(__name__)


def _code_name(code: Any) -> str:
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"


_UNDECODABLE_LOG = LogLimiter(60.0)


class Undecodable:
    """What a request deserializer returns for bytes that are not its message: gRPC would log a
    traceback and answer UNKNOWN for an exception raised there (the deserializer has no context
    to abort with), so the handler raises `reject()` instead."""

    __slots__ = ("error", "type_name")

    def __init__(self, type_name: str, error: Exception) -> None:
        self.type_name = type_name
        self.error = error

    def reject(self) -> BadRequestError:
        detail = str(self.error) or type(self.error).__name__
        held = _UNDECODABLE_LOG.allow()
        if held is not None:
            log.warning(
                "request body is not a valid %s: %s (%d more undecodable requests not logged)",
                self.type_name,
                detail,
                held,
            )
        return BadRequestError(f"request body is not a valid {self.type_name}: {detail}")


def request_decoder(message_type: type[Message]) -> Callable[[bytes], Any]:
    """`message_type.FromString` that returns an `Undecodable` instead of raising."""
    parse = message_type.FromString
    name = message_type.DESCRIPTOR.full_name

    def decode(raw: bytes) -> Any:
        try:
            return parse(raw)
        except Exception as exc:  # whatever the parser raises, the body is not a message
            return Undecodable(name, exc)

    return decode


def _serialize(response: bytes | Message) -> bytes:
    if isinstance(response, bytes):
        return response
    return response.SerializeToString()


# time_remaining() compares the deadline with the wall clock; allow for the skew between that
# and core's monotonic timer when deciding that a cancellation was the deadline passing.
_DEADLINE_SLACK = 0.1


def _cancellation_code(method: str, context: Any, start: float) -> str:
    """Log a handler cancelled by gRPC; the metric code: DEADLINE_EXCEEDED or CANCELLED."""
    remaining = context.time_remaining()
    elapsed = time.perf_counter() - start
    if remaining is not None and remaining <= _DEADLINE_SLACK:
        # The client's deadline passed: it already has DEADLINE_EXCEEDED and retries.
        log.debug("%s: deadline exceeded after %.3fs", method, elapsed)
        return "DEADLINE_EXCEEDED"
    # A client going away is normal life (issue 22): DEBUG, not a warning.
    log.debug(
        "%s cancelled after %.3fs with %s left (client cancel or stream reset)",
        method,
        elapsed,
        "no deadline" if remaining is None else f"{remaining:.3f}s",
    )
    return "CANCELLED"


# Kubernetes' verb (and subresource) of each unary method, for the in-flight limit.
_VERBS: dict[str, tuple[str, str]] = {
    "Create": ("create", ""),
    "Get": ("get", ""),
    "List": ("list", ""),
    "Update": ("update", ""),
    "UpdateStatus": ("update", "status"),
    "Delete": ("delete", ""),
    "Bind": ("create", "binding"),
    "BindBatch": ("create", "binding"),
    "UpdateStatusBatch": ("update", "status"),
    "Evict": ("create", "eviction"),
    "Finalize": ("update", "finalize"),
}
_KIND_OF_SERVICE: dict[str, KindInfo] = {info.service: info for info in ALL_KINDS}


def _namespace_of(method: str, info: KindInfo) -> Callable[[Any], str]:
    """How to read a unary method's request namespace (for the classifier)."""
    if method in ("Get", "List", "Delete"):
        return lambda request: str(request.namespace)
    if method in ("Create", "Update", "UpdateStatus", "Finalize"):
        field = info.request_field
        return lambda request: str(getattr(request, field).metadata.namespace)
    if method == "Bind":
        return lambda request: str(request.binding.metadata.namespace)
    if method == "Evict":
        return lambda request: str(request.eviction.metadata.namespace)
    return lambda request: ""


def _request_info(full_method: str) -> Callable[[Any], RequestInfo] | None:
    """The RequestInfo of a call of `full_method` ("/tinykube.v1.Pods/Create") from its request;
    None for methods the limit does not cover (streams, unknown methods)."""
    service, _, method = full_method.lstrip("/").partition("/")
    info = _KIND_OF_SERVICE.get(service)
    verb = _VERBS.get(method)
    if info is None or verb is None:
        return None
    namespace_of = _namespace_of(method, info)
    group, plural = info.group, info.plural
    kind_verb, sub = verb

    def request_info(request: Any) -> RequestInfo:
        namespace = "" if request.__class__ is Undecodable else namespace_of(request)
        return RequestInfo(kind_verb, group, plural, sub, namespace)

    return request_info


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every tinykube RPC, maps raised errors to statuses (the one place), and
    refuses unary calls over `limiter`'s in-flight limit before they run."""

    def __init__(
        self,
        metrics: Metrics,
        limiter: Limiter | None = None,
        enforcer: Enforcer | None = None,
        *,
        gate: MessageGate | None = None,
        access_log: bool = False,
        streams: OpenWriteStreams | None = None,
    ) -> None:
        self.metrics = metrics
        # The write streams being served, ended at the graceful stop (None: left to the grace).
        self.streams = streams
        # Write-stream messages of one connection handed to handlers at once (None: no bound).
        self.gate = gate if gate is not None and gate.enabled else None
        if self.gate is not None:
            metrics.write_stream_waiting.set_function(self.gate.waiting)
        # One line per RPC once it ends (`--access-log`), as the REST front end's.
        self.access_log = access_log
        self.limiter = limiter if limiter is not None and limiter.enabled else None
        # Authentication and authorization of every tinykube RPC (None: --insecure, nothing
        # is checked).
        self.enforcer = enforcer
        # Label lookups take a lock and hash a tuple; do them once per (method, code).
        self._counters: dict[tuple[str, str], Any] = {}
        self._histograms: dict[str, Any] = {}
        self._wrapped: dict[str, Any] = {}

    def _counter(self, method: str, code: str) -> None:
        child = self._counters.get((method, code))
        if child is None:
            child = self._counters[(method, code)] = self.metrics.requests.labels(method, code)
        child.inc()

    def _histogram(self, method: str) -> Any:
        child = self._histograms.get(method)
        if child is None:
            child = self._histograms[method] = self.metrics.request_duration.labels(method)
        return child

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        # A method's handler never changes once the server runs, so it is looked up and wrapped
        # once; building the wrapper on every call cost ~5 % of the apiserver's CPU under load.
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler: Any = await continuation(handler_call_details)
            if handler is None:
                return None
            wrapped = self._wrapped[method] = self._wrap(method, handler)
        return wrapped

    def _wrap(self, method: str, handler: Any) -> Any:
        if not method.startswith("/tinykube."):
            return handler
        short = method[len("/tinykube.v1.") :]
        count = self._counter
        duration = self._histogram(short)
        if handler.unary_unary is not None:
            inner: Any = _guarded(handler.unary_unary, method, self.enforcer, self.limiter)

            async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                start = time.perf_counter()
                try:
                    response = await inner(request, context)
                except TinykubeError as exc:
                    count(short, exc.code.name)
                    duration.observe(time.perf_counter() - start)
                    answer_with(context, exc)  # (not an abort: see answer_with)
                    return None
                except asyncio.CancelledError:
                    # Not an Exception: without this branch a cancelled handler was neither
                    # counted nor logged. gRPC cancels the handler when the client cancels, its
                    # deadline passes or the stream is reset; the client already has a status.
                    count(short, _cancellation_code(method, context, start))
                    duration.observe(time.perf_counter() - start)
                    raise
                except Exception as exc:
                    if isinstance(exc, grpc.aio.AbortError):
                        raise
                    log.exception("%s failed", method)
                    count(short, "INTERNAL")
                    answer_with(context, exc)
                    return None
                count(short, "OK")
                duration.observe(time.perf_counter() - start)
                return response

            return handler._replace(
                unary_unary=self._logged(unary, method) if self.access_log else unary
            )
        if isinstance(handler.stream_stream, WriteStream):
            return handler._replace(stream_stream=self._write_stream(short, handler.stream_stream))
        if handler.unary_stream is not None:
            # (Watches are not held to the in-flight limit.)
            inner_stream: Any = _guarded(handler.unary_stream, method, self.enforcer, None)

            # Streams write with context.write (a coroutine handler, not an async generator),
            # so wrapping them costs nothing per message. Their duration is not observed: a
            # watch lives as long as its client wants.
            async def stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
                code = "OK"
                try:
                    await inner_stream(request, context)
                except TinykubeError as exc:
                    code = exc.code.name
                    answer_with(context, exc)
                except asyncio.CancelledError:
                    # How most watches end: the client went away (not an Exception subclass).
                    code = "CANCELLED"
                    raise
                except Exception as exc:
                    if isinstance(exc, grpc.aio.AbortError):
                        code = "ABORTED_BY_HANDLER"
                        raise
                    log.exception("%s failed", method)
                    code = "INTERNAL"
                    answer_with(context, exc)
                finally:
                    count(short, code)

            return handler._replace(
                unary_stream=self._logged(stream, method) if self.access_log else stream
            )
        return handler

    def _logged(
        self, inner: Callable[[Any, Any], Awaitable[Any]], method: str
    ) -> Callable[[Any, Any], Awaitable[Any]]:
        """`inner` with an access log line once the call ends: method, status code, latency,
        user agent, user, peer (kube-apiserver's httplog fields, in gRPC's terms)."""
        enforcer = self.enforcer

        async def logged(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            start = time.perf_counter()
            code = "OK"
            try:
                response = await inner(request, context)
                if context.code() is not None:  # an error answered (`answer_with`)
                    code = _code_name(context.code())
                return response
            except grpc.aio.AbortError:
                code = _code_name(context.code())
                raise
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except BaseException:
                code = "UNKNOWN"
                raise
            finally:
                agent = user = ""
                for key, value in context.invocation_metadata() or ():
                    if key == "user-agent":
                        agent = value if isinstance(value, str) else value.decode()
                if enforcer is not None:
                    try:
                        user = enforcer.grpc_identity(context).name
                    except Exception:  # refused: the line says who it was not
                        user = ""
                access_log.info(
                    'GRPC method="%s" latency="%s" userAgent="%s" user="%s" peer="%s" code=%s',
                    method,
                    go_duration(time.perf_counter() - start),
                    agent.replace('"', '\\"'),
                    user.replace('"', '\\"'),
                    context.peer(),
                    code,
                )

        return logged

    def _write_stream(
        self, short: str, stream: WriteStream
    ) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[None]]:
        """A write stream with what the interceptor gives a unary call, per message: the
        caller authenticated once (the stream's certificate or token: refused, the stream ends
        UNAUTHENTICATED), then each request through `_guarded` as the unary call (authorized:
        a refusal is that message's PERMISSION_DENIED; held to the in-flight limit: its
        RESOURCE_EXHAUSTED with the retry hint), run, counted and timed under `short`
        ("Pods/CreateStream"). At most `gate.limit` messages of one connection, over all its
        streams, are handed to handlers at once (`ConnectionSlots`); a message that waits for
        one past its deadline is answered DEADLINE_EXCEEDED without running."""
        method, handle = stream.method, stream.handle
        enforcer, gate, streams = self.enforcer, self.gate, self.streams
        guarded = _guarded(handle, method, enforcer, self.limiter)
        if guarded is handle:  # nothing to check: a bare handler's signature

            async def bare(
                request: Any, context: Any, identity: Any, deadline: Any, sink: list[str]
            ) -> Any:
                return await handle(request, context, identity, sink)

            guarded = bare
        count = self._counter
        duration = self._histogram(short)
        logged = self.access_log
        expired = self.metrics.write_stream_expired.labels(short)

        async def serve(request_iterator: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            identity: Identity | None = None
            if enforcer is not None:
                try:
                    identity = enforcer.grpc_identity(context)
                except TinykubeError as exc:
                    count(short, exc.code.name)
                    answer_with(context, exc)
                    return
            peer = context.peer()
            user = identity.name if identity is not None else ""
            timeout = message_timeout(context)

            async def answer(request: Any, deadline: float | None, admitted: bool) -> bytes:
                start = time.perf_counter()
                warnings: list[str] = []
                code = "OK"
                try:
                    if not admitted:
                        expired.inc()
                        raise DeadlineExceededError(
                            f"the request's deadline ({timeout:g}s) passed while it waited "
                            "for its turn among its connection's stream messages"
                        )
                    if deadline is None:
                        data = encode_write_result(
                            await guarded(request, context, identity, None, warnings)
                        )
                    else:
                        try:
                            async with asyncio.timeout_at(deadline):
                                data = encode_write_result(
                                    await guarded(request, context, identity, deadline, warnings)
                                )
                        except TimeoutError:
                            # As a unary call's deadline: its client has given up on it.
                            raise DeadlineExceededError(
                                f"the request's deadline ({timeout:g}s) passed"
                            ) from None
                except TinykubeError as exc:
                    code = exc.code.name
                    data = _error_result(exc, warnings)
                except asyncio.CancelledError:
                    code = "CANCELLED"
                    raise
                except Exception as exc:
                    log.exception("%s failed", short)
                    code = "INTERNAL"
                    data = encode_write_result(
                        None, grpc.StatusCode.INTERNAL.value[0], f"internal error: {exc!r}"
                    )
                finally:
                    count(short, code)
                    elapsed = time.perf_counter() - start
                    duration.observe(elapsed)
                    if logged:
                        access_log.info(
                            'GRPC method="/tinykube.v1.%s" latency="%s" user="%s" peer="%s" '
                            "code=%s",
                            short,
                            go_duration(elapsed),
                            user.replace('"', '\\"'),
                            peer,
                            code,
                        )
                return data

            slots = gate.open(peer) if gate is not None else None
            try:
                await serve_write_stream(context, answer, slots, timeout, streams)
            finally:
                if gate is not None and slots is not None:
                    gate.close(slots)

        return serve


def _guarded(
    inner: Callable[..., Awaitable[Any]],
    method: str,
    enforcer: Enforcer | None,
    limiter: Limiter | None,
) -> Callable[..., Awaitable[Any]]:
    """`inner` (a handler: request, context[, identity[, sink]]) behind what every request
    passes before it runs, once per unary call and once per write-stream message: the caller
    authenticated (unless `identity` is given: a stream's, authenticated when it opened) and
    authorized for this request (apiserver/auth/filters.py: AuthenticationError,
    ForbiddenError), then held to `limiter`'s in-flight limit (after authorization: a refused
    caller never takes a seat), waiting in its connection's queue if need be and refused with
    TooManyRequestsError (RESOURCE_EXHAUSTED, retry hint) if it cannot. The identity is passed
    on to `inner` for the request context (NodeRestriction, the escalation check).

    `deadline` is a write-stream message's (event-loop time; None: the call's own, from
    `context`); `sink` collects a message's admission warnings. Errors are raised, the caller
    answers them: the unary call with its status (`answer_with`), the message with its result.
    Returns `inner` itself when there is nothing to check."""
    request_info = _request_info(method) if limiter is not None else None
    if enforcer is None and request_info is None:
        return inner
    identify: Any = None
    check: Any = None
    if enforcer is not None:
        identify, check = enforcer.grpc_identity, enforcer.check
    attributes = attributes_for(method)
    admit: Any = None
    acquire: Any = None
    release: Any = None
    if limiter is not None and request_info is not None:
        admit, acquire, release = limiter.admit, limiter.acquire, limiter.release
    info_of: Any = request_info

    async def guarded(
        request: Any,
        context: grpc.aio.ServicerContext[Any, Any],
        identity: Identity | None = None,
        deadline: float | None = None,
        sink: list[str] | None = None,
    ) -> Any:
        if check is not None:
            if identity is None:
                identity = identify(context)
            if request.__class__ is not Undecodable:  # the handler answers that one (400)
                for attrs in attributes(request):
                    check(identity, attrs)
        seat = None
        if admit is not None:
            info = info_of(request)
            seat = admit(info)
            if seat is None:
                if deadline is None:
                    left = context.time_remaining()
                else:
                    left = deadline - asyncio.get_running_loop().time()
                seat = await acquire(info, context.peer(), left)
                if seat is None:
                    if deadline_passed(context):
                        # The client has DEADLINE_EXCEEDED already (counted so).
                        raise DeadlineExceededError("the request's deadline passed")
                    raise TooManyRequestsError(TOO_MANY_REQUESTS, RETRY_AFTER_SECONDS)
        try:
            if sink is None:
                return await inner(request, context, identity)
            return await inner(request, context, identity, sink)
        finally:
            if seat is not None:
                release(seat)

    return guarded


def _unary(call: Callable[[Any], Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A gRPC unary handler (request, context[, identity]) over a read (request)."""

    async def handle(request: Any, context: Any, identity: Identity | None = None) -> Any:
        if request.__class__ is Undecodable:
            raise request.reject()
        return await call(request)

    return handle


# gRPC metadata naming the caller's field manager. Without it gRPC writes record no
# managedFields (the stored ones are kept): tinykube's own components write through gRPC at
# high rates, and computing field sets on every write would cost them for nothing.
FIELD_MANAGER_HEADER = "x-field-manager"


def _writing(
    call: Callable[[Any, RequestContext], Awaitable[Any]],
    *,
    managed: bool = False,
    dry_runnable: bool = True,
) -> Callable[..., Awaitable[Any]]:
    """A gRPC unary handler (request, context[, identity[, sink]]) over a write (request, ctx):
    the request context carries who calls (None under --insecure), the request's dryRun
    (`dry_runnable`: ["All"] or nothing, anything else INVALID_ARGUMENT naming the field)
    and, when `managed`, the caller's field manager (if it names one). Admission warnings go
    to the call's trailing metadata, or into `sink` (a write stream's message answers them)."""

    async def handle(
        request: Any,
        context: Any,
        identity: Identity | None = None,
        sink: list[str] | None = None,
    ) -> Any:
        if request.__class__ is Undecodable:
            raise request.reject()
        manager = None
        if managed:
            for key, value in context.invocation_metadata() or ():
                if key == FIELD_MANAGER_HEADER:
                    manager = value if isinstance(value, str) else value.decode()
        dry_run = dry_run_of(request.dryRun) if dry_runnable else False
        # A write stream's message collects its warnings into its answer (`sink`).
        warnings: list[str] = [] if sink is None else sink
        try:
            return await call(
                request,
                RequestContext(
                    identity=identity, dry_run=dry_run, field_manager=manager, warnings=warnings
                ),
            )
        finally:
            if warnings and sink is None:
                # Admission webhooks' warnings, as kube's Warning headers: one "warning" entry
                # each (metadata values are ASCII).
                context.set_trailing_metadata(
                    tuple((WARNING_METADATA_KEY, _ascii(text)) for text in warnings)
                )

    return handle


# The trailing metadata key carrying a warning for the client (REST's Warning header).
WARNING_METADATA_KEY = "warning"


# ---- write streams ----------------------------------------------------------------------------

# A kind's .proto may declare a stream of each of these write methods: `<Method>Stream`.
STREAMABLE_WRITES = ("Create", "Update", "UpdateStatus")
STREAM_SUFFIX = "Stream"
# Requests of one write stream running at once: the stream reads no further message until an
# answer has left, so HTTP/2 flow control holds a client that sends faster than it is answered.
MAX_PIPELINED = 128


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: bytes, data: bytes) -> bytes:
    return tag + _varint(len(data)) + data


def encode_write_result(
    obj: bytes | Message | None,
    code: int = 0,
    message: str = "",
    warnings: Sequence[str] = (),
    retry_after_ms: int = 0,
) -> bytes:
    """A `<Kind>WriteResult` (code 1, message 2, the object 3, warnings 4,
    retryAfterMilliseconds 5: the same numbers in every kind's message) built around the
    object's bytes, so one encoder serves every kind and the object is serialized once, as the
    unary call serializes it."""
    parts: list[bytes] = []
    if code:
        parts.append(b"\x08" + _varint(code))
    if message:
        parts.append(_length_delimited(b"\x12", message.encode()))
    if obj is not None:
        parts.append(_length_delimited(b"\x1a", _serialize(obj)))
    for text in warnings:
        parts.append(_length_delimited(b"\x22", text.encode()))
    if retry_after_ms:
        parts.append(b"\x28" + _varint(retry_after_ms))
    return b"".join(parts)


def _error_result(exc: TinykubeError, warnings: Sequence[str]) -> bytes:
    retry_ms = 0
    if isinstance(exc, TooManyRequestsError):
        retry_ms = max(1, round(exc.retry_after * 1000))
    return encode_write_result(None, exc.code.value[0], exc.message, warnings, retry_ms)


# answer(request, deadline, admitted): a message's answer; `deadline` is its event-loop time
# (None: none), `admitted` False when it waited past it for its connection's slot.
Answer = Callable[[Any, float | None, bool], Coroutine[Any, Any, bytes]]


def message_timeout(context: Any) -> float | None:
    """The stream's per-message deadline in seconds (None: the client named none): how long
    the client waits for each answer (`MESSAGE_TIMEOUT_KEY` metadata). Each message then has
    that deadline, as a unary call has the client's (its wait for a seat of the in-flight limit
    is a quarter of it; past it the request stops, DEADLINE_EXCEEDED). Without one the
    apiserver, overloaded, ran requests whose clients had long given up and retried them."""
    for key, value in context.invocation_metadata() or ():
        if key == MESSAGE_TIMEOUT_KEY:
            text = value if isinstance(value, str) else value.decode()
            if text.isdigit() and 0 < int(text) <= 24 * 3600 * 1000:
                return int(text) / 1000.0
    return None


class WriteStream:
    """The behaviour of a `<Method>Stream` method (stream-stream): every message is one request
    of the unary `method`, run exactly as that call runs (`handle`: the same `_writing` handler),
    answered by one `<Kind>WriteResult` in the order of the requests. Up to `MAX_PIPELINED`
    requests of a stream run at once, each in its own task (a write waits on etcd; one at a
    time would make a stream as slow as one call). A request that fails is answered with its
    code and message, and the stream goes on; the stream ends when the client half-closes it
    (after the last answer) or cancels it (requests still running are cancelled, as a
    cancelled unary call's handler is).

    Called directly (a server without `MetricsInterceptor`), messages run unguarded, as unary
    handlers then do; the interceptor wraps it (`MetricsInterceptor._write_stream`) with
    authentication once per stream and authorization, the in-flight limit, metrics and the
    access log once per message."""

    __slots__ = ("handle", "method")

    def __init__(self, method: str, handle: Callable[..., Awaitable[Any]]) -> None:
        self.method = method  # the unary method's full name, "/tinykube.v1.Pods/Create"
        self.handle = handle

    async def __call__(self, request_iterator: Any, context: Any) -> None:
        handle = self.handle

        async def answer(request: Any, deadline: float | None, admitted: bool) -> bytes:
            warnings: list[str] = []
            try:
                return encode_write_result(await handle(request, context, None, warnings))
            except TinykubeError as exc:
                return _error_result(exc, warnings)

        await serve_write_stream(context, answer)


# The message of the cancellation with which `OpenWriteStreams.end` stops a stream's read.
_END_READING = "the apiserver is shutting down: no more messages are read"


class OpenWriteStreams:
    """The write streams a server serves, for its graceful stop (apiserver/app.py `stop`):
    `end()` makes each one read no further message, answer those it has read, and end OK, as
    the watches end then. A stream lives as long as its client (a kubelet) keeps it, so without
    this the server's stop would wait out its whole grace for them, every restart that much
    longer, and their clients would move to another apiserver only when the grace ran out. A
    message its client wrote that the stream had not read gets no answer: its client sees the
    stream end under it (UNAVAILABLE, may have been applied, as a reset unary call).

    Concurrency: the event loop only. `end` cancels a stream only while it waits in its read
    (`reading`), so no answer being made is cancelled."""

    __slots__ = ("ending", "reading")

    def __init__(self) -> None:
        self.ending = False
        # The tasks serving a stream that are waiting for its next message now.
        self.reading: set[asyncio.Task[Any]] = set()

    def end(self) -> None:
        """Stop every stream's reading, now and for streams opened from now on."""
        self.ending = True
        for task in self.reading:
            task.cancel(_END_READING)


async def serve_write_stream(
    context: Any,
    answer: Answer,
    slots: ConnectionSlots | None = None,
    message_seconds: float | None = None,
    streams: OpenWriteStreams | None = None,
) -> None:
    """Read a write stream's requests, run each as `answer(request, deadline, admitted)` in its
    own task (which never raises but CancelledError: a failure is an answer), and write the
    answers in order. Each request's deadline is `message_seconds` after it was read (None:
    none), on the event loop's clock (`slots.monotonic`).
    With `slots` (its connection's), a request read waits for a slot before it is handed to
    `answer`, and the stream reads no further meanwhile; one that waits past its deadline is
    handed over not `admitted`, to be answered DEADLINE_EXCEEDED. Its slot is given back when
    its answer is ready. With `streams` (the server's), `streams.end()` ends the stream as its
    client's half-close would: nothing more is read, every request read is answered.

    A request read after the stream stopped reading (its previous request waited for a slot,
    or MAX_PIPELINED answers were due) while an earlier request of the stream was still
    unanswered was pipelined: it may have waited unread all through the stop, and when it came
    is unknown. Its deadline is then its predecessor's (which was read no later), so one whose
    predecessor expired is answered DEADLINE_EXCEEDED unrun as it is read, where counting from
    its own read ran it up to one deadline after its client had given up. (A client that
    sends one request at a time has its answers first: its next request is read as it comes.
    A pipelined request sent during the stop may be given less than its whole deadline.)"""
    loop = asyncio.get_running_loop()
    now = slots.monotonic if slots is not None else loop.time
    # The answers to write, in order. A list, not a deque: at most MAX_PIPELINED, mostly one or
    # none, and a deque's first block alone is 600 bytes per open stream.
    pending: list[asyncio.Task[bytes]] = []
    room = asyncio.Semaphore(MAX_PIPELINED)
    me = asyncio.current_task()
    write = context.write
    # The task writing the answers, while there are any: an idle stream (a kubelet's, between
    # renewals) keeps no writer, only its reading task (memory per open stream).
    writing: asyncio.Task[None] | None = None
    answered = 0  # answers whose write has begun (the client may have them)

    async def writer() -> None:
        nonlocal answered
        while pending:
            data = await pending[0]
            del pending[0]
            answered += 1
            await write(data)
            room.release()

    def writer_done(task: asyncio.Task[None]) -> None:
        nonlocal writing
        if writing is task:
            writing = None
        # The stream broke under a write: stop reading too (gRPC usually cancels us first).
        if not task.cancelled() and task.exception() is not None and me is not None:
            me.cancel()

    def start_writer() -> asyncio.Task[None]:
        task = loop.create_task(writer())
        task.add_done_callback(writer_done)
        return task

    if slots is not None:
        take, wait, release = slots.take, slots.wait, slots.release

        def give_back(task: asyncio.Task[bytes]) -> None:
            release()

    read = context.read
    read_count = 0
    stopped = False  # the stream stopped reading since its last request was read
    last: float | None = None  # that request's deadline
    try:
        while True:
            if room.locked():
                stopped = True
            await room.acquire()
            if streams is None or me is None:
                request = await read()
            else:
                if streams.ending:
                    break
                streams.reading.add(me)
                try:
                    request = await read()
                except asyncio.CancelledError as exc:
                    # Ours (the server's graceful stop), and nobody else's: stop reading.
                    if exc.args == (_END_READING,) and me.uncancel() == 0:
                        break
                    raise
                finally:
                    streams.reading.discard(me)
            if request is grpc.aio.EOF:
                break
            deadline = None if message_seconds is None else now() + message_seconds
            if stopped and last is not None and deadline is not None and answered < read_count:
                deadline = min(deadline, last)  # (pipelined behind a stop: see above)
            read_count += 1
            last, stopped = deadline, False
            if slots is None:
                task = loop.create_task(answer(request, deadline, True))
            elif deadline is not None and deadline <= now():
                task = loop.create_task(answer(request, deadline, False))
            elif take():
                task = loop.create_task(answer(request, deadline, True))
                task.add_done_callback(give_back)
            else:
                stopped = True
                if await wait(None if deadline is None else deadline - now()):
                    task = loop.create_task(answer(request, deadline, True))
                    task.add_done_callback(give_back)
                else:
                    task = loop.create_task(answer(request, deadline, False))
            pending.append(task)
            # (A writer done but for its callback has written everything before this.)
            if writing is None or writing.done():
                writing = start_writer()
            # Nothing of the last message stays with an idle stream.
            del request, task
        if pending and (writing is None or writing.done()):
            writing = start_writer()
        if writing is not None:
            await writing
    finally:
        if writing is not None and not writing.done():
            writing.cancel()
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


def _ascii(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode()


async def _write(
    write: Callable[[bytes], Awaitable[None]], message: bytes, deadline: float
) -> None:
    """One watch message, which the client must take within `deadline` seconds (0: no limit).
    A client that stopped reading would otherwise hold this message, and its stream, forever
    (HTTP/2 flow control blocks the write); past the deadline the stream is cancelled."""
    if deadline <= 0:
        await write(message)
        return
    try:
        async with asyncio.timeout(deadline):
            await write(message)
    except TimeoutError:
        raise DeadlineExceededError(
            f"watch closed: the client took no data for {deadline:g}s (write deadline)"
        ) from None


class GrpcResource:
    """One kind's gRPC service over its `ResourceStore`."""

    def __init__(self, resource: ResourceStore) -> None:
        self.resource = resource

    async def list(
        self,
        request: meta_pb2.ListRequest | Undecodable,
        context: Any,
        identity: Identity | None = None,
    ) -> bytes:
        if isinstance(request, Undecodable):
            raise request.reject()
        page = await self.resource.list_page(request)
        return encode_list(page.revision, [o.data for o in page.items], page.token, page.remaining)

    async def watch(
        self,
        request: meta_pb2.WatchRequest | Undecodable,
        context: Any,
        identity: Identity | None = None,
    ) -> None:
        """One message per event (Kubernetes' shape; what grpcurl users see)."""
        await self._watch(request, context.write, batched=False, ends_in=context.time_remaining())

    async def watch_batch(
        self,
        request: meta_pb2.WatchRequest | Undecodable,
        context: Any,
        identity: Identity | None = None,
    ) -> None:
        """Everything queued for the watcher since the last write, in one message.

        Each gRPC message costs tens of microseconds on both ends whatever its size, and a busy
        watcher (the scheduler, a kubelet hosting many nodes) gets events faster than one
        write completes, so this cuts the stream's cost by its batch size. An idle watch still
        gets every event at once: nothing waits to fill a batch.
        """
        await self._watch(request, context.write, batched=True, ends_in=context.time_remaining())

    async def _watch(
        self,
        request: meta_pb2.WatchRequest | Undecodable,
        write: Callable[[bytes], Awaitable[None]],
        *,
        batched: bool,
        ends_in: float | None = None,
    ) -> None:
        """`ends_in`: the seconds the call's deadline leaves (None: it has none)."""
        if isinstance(request, Undecodable):
            raise request.reject()
        resource = self.resource
        watcher, initial = await resource.open_watch(request, batched=batched, ends_in=ends_in)
        method = "WatchBatch" if batched else "Watch"
        events_sent = resource.cache.metrics.watch_events_sent.labels(resource.info.kind, method)
        messages_sent = resource.cache.metrics.watch_messages_sent.labels(
            resource.info.kind, method
        )
        window = resource.settings.watch_batch_window_seconds if batched else 0.0
        deadline = resource.settings.write_timeout_seconds
        monotonic = resource.clock.monotonic
        last_sent = -window
        try:
            batch = initial
            del initial
            while True:
                count = len(batch)
                messages = iter_batch_messages(batch) if batched else (d for d, _ in batch)
                del batch  # each message holds its events' bytes only while it is written
                sent = 0
                for message in messages:
                    await _write(write, message, deadline)
                    sent += 1
                del messages
                events_sent.inc(count)
                messages_sent.inc(sent)
                if sent:
                    last_sent = monotonic()
                batch = await watcher.drain_events()
                if not batch:
                    return
                if window > 0:
                    # Busy (the last message went out less than a window ago): let the
                    # events of the rest of the window join this message.
                    wait = last_sent + window - monotonic()
                    if wait > 0:
                        await resource.clock.sleep(wait)
                        batch.extend(watcher.take_events())
        finally:
            resource.cache.unregister(watcher)

    def handler(self) -> grpc.GenericRpcHandler:
        resource = self.resource
        info = resource.info
        unary = grpc.unary_unary_rpc_method_handler
        methods: dict[str, Any] = {
            "Create": unary(
                _writing(resource.create, managed=True),
                request_decoder(info.create_request),
                _serialize,
            ),
            "Get": unary(_unary(resource.get), request_decoder(meta_pb2.GetRequest), _serialize),
            "List": unary(self.list, request_decoder(meta_pb2.ListRequest), _serialize),
            "Update": unary(
                _writing(resource.update, managed=True),
                request_decoder(info.update_request),
                _serialize,
            ),
            "Delete": unary(
                _writing(resource.delete), request_decoder(meta_pb2.DeleteRequest), _serialize
            ),
            "Watch": grpc.unary_stream_rpc_method_handler(
                self.watch, request_decoder(meta_pb2.WatchRequest), _serialize
            ),
            "WatchBatch": grpc.unary_stream_rpc_method_handler(
                self.watch_batch, request_decoder(meta_pb2.WatchRequest), _serialize
            ),
        }
        if info.has_status:
            methods["UpdateStatus"] = unary(
                _writing(resource.update_status), request_decoder(info.update_request), _serialize
            )
        # The write streams the kind's .proto declares: each message runs as its unary method.
        declared = declared_methods(info.message, info.service)
        for write in STREAMABLE_WRITES:
            name = write + STREAM_SUFFIX
            if name in declared and write in methods:
                methods[name] = grpc.stream_stream_rpc_method_handler(
                    WriteStream(f"/{info.service}/{write}", methods[write].unary_unary),
                    methods[write].request_deserializer,
                    _serialize,
                )
        if isinstance(resource, NamespaceStore):
            methods["Finalize"] = unary(
                _writing(resource.finalize, managed=True),
                request_decoder(info.update_request),
                _serialize,
            )
        if isinstance(resource, PodStore):
            methods["Bind"] = unary(
                _writing(resource.bind), request_decoder(pod_pb2.BindRequest), _serialize
            )
            methods["BindBatch"] = unary(
                _writing(resource.bind_batch, dry_runnable=False),
                request_decoder(pod_pb2.BindBatchRequest),
                _serialize,
            )
            methods["UpdateStatusBatch"] = unary(
                _writing(resource.update_status_batch, dry_runnable=False),
                request_decoder(pod_pb2.UpdateStatusBatchRequest),
                _serialize,
            )
            # An Eviction's dry run is its deleteOptions.dryRun.
            methods["Evict"] = unary(
                _writing(resource.evict, dry_runnable=False),
                request_decoder(pod_pb2.EvictRequest),
                _serialize,
            )
        return grpc.method_handlers_generic_handler(info.service, methods)


CUSTOM_RESOURCES_SERVICE = "tinykube.v1.CustomResources"


class GrpcCustomResources:
    """`tinykube.v1.CustomResources`: custom objects over gRPC, the kind named in each request
    (group, version, plural) and the object as its JSON in a Struct. `lookup` finds the served
    kind's store (None: NOT_FOUND, as REST's 404 for a path nobody serves); `kinds` lists them."""

    def __init__(
        self,
        lookup: Callable[[str, str, str], ResourceStore | None],
        kinds: Callable[[], Sequence[ResourceStore]],
    ) -> None:
        self.lookup = lookup
        self.kinds = kinds

    def _store(self, request: apiextensions_pb2.CustomResourceRequest) -> ResourceStore:
        store = self.lookup(request.group, request.version, request.plural)
        if store is None:
            raise NotFoundError(
                f"the server could not find the requested resource "
                f"({request.plural}.{request.group}/{request.version})"
            )
        return store

    @staticmethod
    def _object(store: ResourceStore, request: apiextensions_pb2.CustomResourceRequest) -> Message:
        data = whole_numbers(json_format.MessageToDict(request.object))
        info = store.info
        for key, want in (("apiVersion", info.api_version), ("kind", info.kind)):
            if data.get(key, want) not in ("", want):
                raise BadRequestError(
                    f"object.{key}: {data[key]!r} is not this kind's (wanted {want!r})"
                )
        try:
            obj, _ = parse_as(info, data)
        except ManifestError as exc:
            raise BadRequestError(f"object: {exc}") from None
        if store.info.namespaced and request.namespace:
            obj.metadata.namespace = request.namespace  # type: ignore[attr-defined]
        return obj

    @staticmethod
    def _struct(store: ResourceStore, obj: Message) -> struct_pb2.Struct:
        data = to_dict(obj)
        for key, value in data.items():
            if key != "metadata":
                # A Struct's numbers are doubles: an integer beyond 2^53 goes as
                # {"\u0000int64": "<decimal>"}, and comes back so, exact (docs/crds.md).
                data[key] = hold_big_ints(value)
        data["apiVersion"], data["kind"] = store.info.api_version, store.info.kind
        out = struct_pb2.Struct()
        out.update(data)
        return out

    async def create(
        self, request: apiextensions_pb2.CustomResourceRequest, ctx: RequestContext
    ) -> struct_pb2.Struct:
        store = self._store(request)
        obj = self._object(store, request)
        created = await store.create(
            store.info.create_request(**{store.info.request_field: obj}), ctx
        )
        return self._struct(store, created)

    async def update(
        self, request: apiextensions_pb2.CustomResourceRequest, ctx: RequestContext
    ) -> struct_pb2.Struct:
        store = self._store(request)
        obj = self._object(store, request)
        updated = await store.update(
            store.info.update_request(**{store.info.request_field: obj}), ctx
        )
        return self._struct(store, updated)

    async def update_status(
        self, request: apiextensions_pb2.CustomResourceRequest, ctx: RequestContext
    ) -> struct_pb2.Struct:
        store = self._store(request)
        if not store.info.has_status:
            raise NotFoundError(f"{store.info.plural}.{store.info.group} has no status subresource")
        obj = self._object(store, request)
        updated = await store.update_status(
            store.info.update_request(**{store.info.request_field: obj}), ctx
        )
        return self._struct(store, updated)

    async def delete(
        self, request: apiextensions_pb2.CustomResourceRequest, ctx: RequestContext
    ) -> struct_pb2.Struct:
        store = self._store(request)
        deleted = await store.delete(
            meta_pb2.DeleteRequest(
                namespace=request.namespace,
                name=request.name,
                preconditions=request.preconditions,
                propagationPolicy=request.propagationPolicy,
            ),
            ctx,
        )
        return self._struct(store, deleted)

    async def get(self, request: apiextensions_pb2.CustomResourceRequest) -> struct_pb2.Struct:
        store = self._store(request)
        obj = await store.get(meta_pb2.GetRequest(namespace=request.namespace, name=request.name))
        return self._struct(store, obj)

    async def list(
        self, request: Any, context: Any, identity: Identity | None = None
    ) -> apiextensions_pb2.CustomResourceList:
        if isinstance(request, Undecodable):
            raise request.reject()
        store = self._store(request)
        page = await store.list_page(
            meta_pb2.ListRequest(
                namespace=request.namespace,
                labelSelector=request.labelSelector,
                fieldSelector=request.fieldSelector,
                limit=request.limit,
                resourceVersion=request.resourceVersion,
                **{"continue": getattr(request, "continue")},
            )
        )
        out = apiextensions_pb2.CustomResourceList(resourceVersion=page.revision)
        setattr(out, "continue", page.token)
        for cached in page.items:
            out.items.append(self._struct(store, cached.obj))
        return out

    async def watch(self, request: Any, context: Any, identity: Identity | None = None) -> None:
        if isinstance(request, Undecodable):
            raise request.reject()
        store = self._store(request)
        watcher, batch = await store.open_watch(
            meta_pb2.WatchRequest(
                namespace=request.namespace,
                labelSelector=request.labelSelector,
                fieldSelector=request.fieldSelector,
                resourceVersion=request.resourceVersion,
            )
        )
        deadline = store.settings.write_timeout_seconds
        try:
            while True:
                for data, _ in batch:
                    event = store.info.watch_event.FromString(data)
                    out = apiextensions_pb2.CustomResourceWatchEvent(type=event.type)  # type: ignore[attr-defined]
                    out.object.CopyFrom(self._struct(store, event.object))  # type: ignore[attr-defined]
                    await _write(context.write, out.SerializeToString(), deadline)
                batch = await watcher.drain_events()
                if not batch:
                    return
        finally:
            store.cache.unregister(watcher)

    async def list_kinds(
        self, request: Any, context: Any, identity: Identity | None = None
    ) -> apiextensions_pb2.CustomResourceKinds:
        out = apiextensions_pb2.CustomResourceKinds()
        for store in self.kinds():
            info = store.info
            out.kinds.add(
                group=info.group,
                version=info.version,
                kind=info.kind,
                plural=info.plural,
                namespaced=info.namespaced,
                shortNames=[s for s in info.short_names if s != info.kind.lower()],
                status=info.has_status,
            )
        return out

    def handler(self) -> grpc.GenericRpcHandler:
        unary = grpc.unary_unary_rpc_method_handler
        decode = request_decoder(apiextensions_pb2.CustomResourceRequest)
        methods: dict[str, Any] = {
            "Create": unary(_writing(self.create, managed=True), decode, _serialize),
            "Get": unary(_unary(self.get), decode, _serialize),
            "List": unary(self.list, decode, _serialize),
            "Update": unary(_writing(self.update, managed=True), decode, _serialize),
            "UpdateStatus": unary(_writing(self.update_status), decode, _serialize),
            "Delete": unary(_writing(self.delete), decode, _serialize),
            "Watch": grpc.unary_stream_rpc_method_handler(self.watch, decode, _serialize),
            "ListKinds": unary(
                self.list_kinds,
                request_decoder(apiextensions_pb2.ListCustomResourceKindsRequest),
                _serialize,
            ),
        }
        return grpc.method_handlers_generic_handler(CUSTOM_RESOURCES_SERVICE, methods)
