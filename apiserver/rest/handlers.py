"""The REST verbs of one resource: GET, LIST, WATCH, POST, PUT, PATCH, DELETE, deletecollection
and the subresources (status, pods/binding, pods/eviction, pods/log, replicasets/scale,
namespaces/finalize), as kube-apiserver serves them.

Each handler turns query parameters and a JSON/YAML body into the same request messages the
gRPC front end takes and calls the kind's `apiserver.resources.ResourceStore` (validation,
defaults, storage, the watch cache and Bind's compare-and-swap exist only there); answers are
encoded by `codec.KindCodec`.
LIST from the watch cache and every REST watch reuse each object version's cached JSON.
`dryRun=All` is a flag of the store's request context (apiserver/requestcontext.py): every
check of the write runs, and nothing is written. Handlers run on
the apiserver's event loop; a watch handler waits on its watcher's queue and ends at
timeoutSeconds, when the client leaves (aiohttp cancels it), or with an ERROR event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import yaml
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from google.protobuf import json_format
from google.protobuf.message import Message
from multidict import MultiMapping

from apiserver import fieldmanager
from apiserver.auth.authorizer import Identity
from apiserver.deletion import delete_options_errors, policy_of
from apiserver.namespacestore import NamespaceStore
from apiserver.nodeproxy import proxy_get
from apiserver.podlogs import PodLogOptions, PodLogs
from apiserver.podstore import PodStore
from apiserver.podstream import PodStreams, StreamOptions
from apiserver.requestcontext import RequestContext
from apiserver.resources import ResourceStore
from apiserver.rest import codec as codecs
from apiserver.rest import eventsview, kubeproto, patch
from apiserver.rest.codec import AS_JSON, AS_PROTOBUF, AS_TABLE, AS_YAML, PROTOBUF, KindCodec, dumps
from apiserver.rest.discovery import Resource
from apiserver.rest.status import (
    Resource as StatusResource,
)
from apiserver.rest.status import (
    RestError,
    cause_of,
    method_not_allowed,
    not_acceptable,
    status_of,
    success_body,
    too_large,
    unsupported_media_type,
)
from apiserver.settings import Settings
from apiserver.watchcache import CachedObject, Codec, encode_json_event
from tinykube import remotecommand as rc
from tinykube import tables
from tinykube.clock import Clock
from tinykube.errors import (
    AlreadyExistsError,
    BadRequestError,
    FieldError,
    InvalidError,
    NotFoundError,
    PreconditionFailedError,
    ResourceExpiredError,
    TinykubeError,
)
from tinykube.kinds import NAMESPACE, NODE, POD, KindInfo, Scale
from tinykube.manifest import CUSTOM_PREFIX
from tinykube.tls import PLAINTEXT, Credentials
from tinykube.v1 import meta_pb2, node_pb2, pod_pb2

APPLY_PATCH = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# The path after nodes/NAME/proxy/ of a nodes/proxy request (set by the router).
PROXY_PATH = web.RequestKey("tinykube_proxy_path", str)
# A follow that has no output yet still sends its headers after this many seconds.
log = logging.getLogger(__name__)

_LOG_HEADERS_AFTER = 1.0
# The Eviction versions pods/eviction takes, as kube-apiserver (it answers policy/v1).
EVICTION_VERSIONS = ("policy/v1", "policy/v1beta1")
# DeleteOptions.gracePeriodSeconds is an int64 in Kubernetes and an int32 in tinykube's
# messages: a longer grace period (68 years and more) is stored as this one, which waits as long.
MAX_GRACE_SECONDS = 2**31 - 1
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1
_GO_INT = re.compile(r"[+-]?[0-9]+\Z")

# A LIST of this many objects or more is streamed as it is encoded (`_stream_list`), in chunks
# of about this many bytes; a Table's rows are made this many objects at a time.
STREAM_LIST_ITEMS = 500
STREAM_CHUNK_BYTES = 256 * 1024
_TABLE_CHUNK = 200
_TABLE_TYPE = "application/json;as=Table;v=v1;g=meta.k8s.io"
# Who a request acts as, once the enforcer has authenticated it (unset under --insecure).
IDENTITY = web.RequestKey("tinykube_identity", Identity)
# The warnings a write's admission webhooks gave, sent as Warning headers with its answer.
WARNINGS = web.RequestKey("tinykube_warnings", list[str])


@dataclass(frozen=True)
class Target:
    """A parsed resource path."""

    resource: Resource
    namespace: str | None  # None: a cluster-scoped resource, or all namespaces
    name: str | None = None
    subresource: str | None = None


class Query:
    """Query parameters, converted strictly: garbage is a 400 naming the parameter."""

    _TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
    _FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False", ""})

    def __init__(self, query: MultiMapping[str]) -> None:
        self.query = query

    def text(self, name: str) -> str:
        return self.query.get(name, "")

    def has(self, name: str) -> bool:
        return name in self.query

    def flag(self, name: str) -> bool:
        text = self.query.get(name)
        if text is None:
            return False
        if text in self._TRUE:
            return True
        if text in self._FALSE:
            return False
        raise BadRequestError(
            f'invalid value "{text}" for query parameter {name}: strconv.ParseBool: parsing '
            f'"{text}": invalid syntax'
        )

    def number(self, name: str) -> int | None:
        """An int64 as Go's strconv.ParseInt reads it: ASCII digits and a sign, nothing else
        (Python's int() also takes "1_0", " 1" and other scripts' digits)."""
        text = self.query.get(name)
        if text is None or text == "":
            return None
        problem = "invalid syntax"
        if _GO_INT.match(text):
            # Past 19 significant digits it is out of range; int() of 5,000 digits raises.
            significant = len(text.lstrip("+-").lstrip("0"))
            value = int(text) if significant <= 19 else _INT64_MAX + 1
            if -_INT64_MAX - 1 <= value <= _INT64_MAX:
                return value
            problem = "value out of range"
        raise BadRequestError(
            f'invalid value "{text}" for query parameter {name}: strconv.ParseInt: '
            f'parsing "{text}": {problem}'
        )

    def choice(self, name: str, allowed: Sequence[str], default: str) -> str:
        text = self.query.get(name)
        if text is None or text == "":
            return default
        if text not in allowed:
            shown = ", ".join(f'"{a}"' for a in allowed)
            raise BadRequestError(f'{name}: Unsupported value: "{text}": supported values: {shown}')
        return text


_M = TypeVar("_M", bound=Message)


def message_from(cls: type[_M], data: Mapping[str, Any]) -> _M:
    """A request message from its JSON (lowerCamel) form: independent of Python field names."""
    msg = cls()
    json_format.ParseDict(dict(data), msg, ignore_unknown_fields=False)
    return msg


def _list_options_invalid(field: str, message: str) -> RestError:
    text = f'ListOptions.meta.k8s.io "" is invalid: {field}: {message}'
    details = {
        "group": "meta.k8s.io",
        "kind": "ListOptions",
        "causes": [{"reason": "FieldValueForbidden", "message": message, "field": field}],
    }
    return RestError(422, "Invalid", text, details)


def _patch_options_invalid(field: str, message: str, reason: str) -> RestError:
    """422 Invalid on PatchOptions, as kube-apiserver answers bad apply/patch options."""
    details = {
        "group": "meta.k8s.io",
        "kind": "PatchOptions",
        "causes": [{"reason": reason, "message": message, "field": field}],
    }
    return RestError(
        422, "Invalid", f'PatchOptions.meta.k8s.io "" is invalid: {field}: {message}', details
    )


def _delete_options_errors(errors: Sequence[FieldError]) -> RestError:
    """422 Invalid on DeleteOptions, one cause per field error (Kubernetes' aggregate)."""
    texts = [str(e) for e in errors]
    shown = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = {
        "group": "meta.k8s.io",
        "kind": "DeleteOptions",
        "causes": [cause_of(e) for e in errors],
    }
    return RestError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: {shown}', details)


def _delete_options_invalid(field: str, message: str, reason: str) -> RestError:
    text = f'DeleteOptions.meta.k8s.io "" is invalid: {field}: {message}'
    details = {
        "group": "meta.k8s.io",
        "kind": "DeleteOptions",
        "causes": [{"reason": reason, "message": message, "field": field}],
    }
    return RestError(422, "Invalid", text, details)


# Request bodies of the subresources and options, as JSON, YAML or Kubernetes protobuf.
_WITH_PROTOBUF = (*codecs.BODY_TYPES, codecs.PROTOBUF)


def _object_body(body: bytes, media: str) -> dict[str, Any]:
    """A Binding, Eviction or Scale body as its JSON dict, whatever its media type."""
    if media == codecs.PROTOBUF:
        return kubeproto.decode(body)
    return codecs.parse_object_body(body, media)


def check_delete_options(options: Mapping[str, Any], where: str = "") -> None:
    """DeleteOptions (a DELETE's, or an Eviction's deleteOptions) as kube-apiserver checks
    them: 422 Invalid DeleteOptions for a bad value, 400 for a wrong JSON type. `where`
    prefixes the path in 400 messages ("Eviction.deleteOptions.")."""
    orphan = options.get("orphanDependents")
    if orphan is not None and not isinstance(orphan, bool):
        raise BadRequestError(
            f"{where}orphanDependents: expected a boolean, got {json.dumps(orphan)}"
        )
    errors = delete_options_errors(options.get("propagationPolicy"), orphan)
    if errors:
        raise _delete_options_errors(errors)
    grace = options.get("gracePeriodSeconds")
    if isinstance(grace, int) and not isinstance(grace, bool) and grace > _INT64_MAX:
        raise BadRequestError(
            f"json: cannot unmarshal number {grace} into Go struct field "
            f"{where or 'DeleteOptions.'}gracePeriodSeconds of type int64"
        )
    if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool) or grace < 0):
        raise _delete_options_invalid(
            "gracePeriodSeconds",
            f"Invalid value: {json.dumps(grace)}: must be greater than or equal to 0",
            "FieldValueInvalid",
        )
    pre = options.get("preconditions")
    if pre is not None and not isinstance(pre, dict):
        raise BadRequestError(f"{where}preconditions: expected an object")
    for key in ("uid", "resourceVersion"):
        value = (pre or {}).get(key)
        if value is not None and not isinstance(value, str):
            raise BadRequestError(
                f"{where}preconditions.{key}: expected a string, got {json.dumps(value)[:100]}"
            )


def label_selector_text(selector: Mapping[str, Any]) -> str:
    """A LabelSelector object as the string Kubernetes prints (Scale's status.selector)."""
    parts: list[tuple[str, str]] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        parts.append((key, f"{key}={value}"))
    for expr in selector.get("matchExpressions") or []:
        key = expr.get("key", "")
        op = expr.get("operator", "")
        values = ",".join(sorted(expr.get("values") or []))
        if op == "In":
            parts.append((key, f"{key} in ({values})"))
        elif op == "NotIn":
            parts.append((key, f"{key} notin ({values})"))
        elif op == "Exists":
            parts.append((key, key))
        elif op == "DoesNotExist":
            parts.append((key, f"!{key}"))
    return ",".join(text for _, text in sorted(parts))


async def read_body(request: web.Request, limit: int, seconds: float) -> bytes:
    """The whole request body: over `limit` bytes is 413; a body that does not arrive whole
    within `seconds` (a chunked body that never ends) or does not decode (a
    Content-Encoding it does not have) is 400, and the connection is closed after the answer."""
    if request.content_length is not None and request.content_length > limit:
        raise too_large(limit)
    try:
        async with asyncio.timeout(seconds):
            body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise too_large(limit) from None
    except TimeoutError:
        message = f"the request body did not arrive within {seconds:g}s"
        raise _unreadable(request, message) from None
    except (RequestPayloadError, HttpProcessingError) as exc:
        encoding = request.headers.get("Content-Encoding", "")
        what = f" (Content-Encoding: {encoding})" if encoding else ""
        cause = getattr(exc, "message", "") or str(exc) or type(exc).__name__
        message = f"the request body could not be read{what}: {cause}"
        raise _unreadable(request, message) from None
    if len(body) > limit:
        raise too_large(limit)
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return body
    wbits = _DECODERS.get(encoding)
    if wbits is None:
        raise BadRequestError(
            f'unsupported Content-Encoding "{encoding}": a request body is sent as is, or '
            "compressed with gzip or deflate"
        )
    # Decoded here, not by aiohttp: a bounded output (a small bomb cannot grow past the
    # limit) and a Status for an encoding aiohttp does not know.
    decoder = zlib.decompressobj(wbits)
    try:
        data = decoder.decompress(body, limit + 1)
        if not decoder.eof or decoder.unused_data:
            raise zlib.error("the compressed data is incomplete or followed by other bytes")
    except zlib.error as exc:
        raise BadRequestError(
            f"the request body could not be read (Content-Encoding: {encoding}): {exc}"
        ) from None
    if len(data) > limit:
        raise too_large(limit)
    return data


# zlib's window bits for each Content-Encoding it decodes.
_DECODERS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def _unreadable(request: web.Request, message: str) -> BadRequestError:
    # The rest of the body is still coming, or garbage: the connection cannot carry another
    # request. It closes after the answer, without reading on (aiohttp would otherwise read
    # the broken body again after the answer, and log that).
    request.protocol.close()
    request.content.feed_eof()
    return BadRequestError(message)


class ResourceHandlers:
    """The verbs of every resource (stored or always-empty), over the kinds' services."""

    def __init__(
        self,
        services: Mapping[str, ResourceStore],
        *,
        settings: Settings,
        clock: Clock,
        kubelet_credentials: Credentials = PLAINTEXT,
    ) -> None:
        self.services = services
        self.settings = settings
        self.clock = clock
        # What the log proxy presents to kubelets and trusts them with.
        self.kubelet_credentials = kubelet_credentials
        self.codecs = {kind: KindCodec(s.info) for kind, s in services.items()}
        # Codecs of other versions' views of stored kinds, by the view's apiVersion.
        self.view_codecs: dict[str, KindCodec] = {
            eventsview.EVENTS_V1.api_version: eventsview.EventsViewCodec()
        }
        # A REST watch without timeoutSeconds ends after this long, jittered up to twice it
        # (kube-apiserver's --min-request-timeout) so reconnects of many watches spread out.
        self.watch_timeout = settings.rest_watch_timeout_seconds

    # ---- entry ------------------------------------------------------------------------------

    async def handle(self, request: web.Request, target: Target) -> web.StreamResponse:
        method = request.method
        q = Query(request.query)
        res = target.resource
        if res.info is None:
            return await self._unmodeled(request, target, q)
        service = self.services[store_key(res.info)]
        sub = target.subresource
        if target.name is None:
            if method == "GET":
                if q.flag("watch"):
                    return await self.watch(request, target, q, service)
                return await self.list_collection(request, target, q, service)
            if method == "POST" and (target.namespace is not None or not res.namespaced):
                return await self.create(request, target, q, service)
            if (
                method == "DELETE"
                and (target.namespace is not None or not res.namespaced)
                and "deletecollection" in res.verbs
            ):
                return await self.delete_collection(request, target, q, service)
            raise method_not_allowed()
        if sub is None:
            if method == "GET":
                return await self.get(request, target, q, service)
            if method == "PUT":
                return await self.update(request, target, q, service, status=False)
            if method == "PATCH":
                return await self.patch_object(request, target, q, service, status=False)
            if method == "DELETE":
                return await self.delete(request, target, q, service)
            raise method_not_allowed()
        if sub == "status":
            if method == "GET":
                return await self.get(request, target, q, service)
            if method == "PUT":
                return await self.update(request, target, q, service, status=True)
            if method == "PATCH":
                return await self.patch_object(request, target, q, service, status=True)
            raise method_not_allowed()
        if sub == "binding" and res.info.kind == POD.kind:
            if method == "POST":
                return await self.bind(request, target, q, service)
            raise method_not_allowed()
        if sub == "log" and res.info.kind == POD.kind:
            if method == "GET":
                return await self.logs(request, target, q, service)
            raise method_not_allowed()
        if sub in ("exec", "attach", "portforward") and res.info.kind == POD.kind:
            if method in ("GET", "POST"):
                return await self.pod_stream(request, target, sub, service)
            raise method_not_allowed()
        if sub == "ephemeralcontainers" and res.info.kind == POD.kind:
            # kubectl debug (apiserver/ephemeral.py; the pod store's subresource rules).
            if method == "GET":
                return await self.get(request, target, q, service)
            if method == "PUT":
                return await self.update(request, target, q, service, subresource=sub)
            if method == "PATCH":
                if codecs.content_type_of(request.headers.get("Content-Type", "")) == APPLY_PATCH:
                    raise unsupported_media_type([JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH])
                return await self.patch_object(request, target, q, service, subresource=sub)
            raise method_not_allowed()
        if sub == "proxy" and res.info.kind == NODE.kind:
            if method == "GET":
                return await self.node_proxy(request, target, service)
            raise method_not_allowed()
        if sub == "eviction" and res.info.kind == POD.kind:
            if method == "POST":
                return await self.evict(request, target, q, service)
            raise method_not_allowed()
        if sub == "finalize" and res.info.kind == NAMESPACE.kind:
            if method == "PUT":
                return await self.finalize(request, target, q, service)
            raise method_not_allowed()
        if sub == "scale" and res.info.scale is not None:
            if method == "GET":
                return await self.get_scale(request, target, q, service)
            if method in ("PUT", "PATCH"):
                return await self.update_scale(request, target, q, service)
            raise method_not_allowed()
        raise method_not_allowed()

    # ---- shared pieces ----------------------------------------------------------------------

    def _codec(self, target: Target) -> KindCodec:
        """The codec of the resource's version: the stored kind's, or a view's."""
        res = target.resource
        if res.view is not None:
            return self.view_codecs[res.view.api_version]
        assert res.info is not None
        return self.codecs[store_key(res.info)]

    def _convert_lines(self, target: Target, lines: list[bytes]) -> list[bytes]:
        """Watch lines (the watch cache's core JSON) in the resource's version."""
        codec = self._codec(target)
        if isinstance(codec, eventsview.EventsViewCodec):
            return [codec.convert_line(line) for line in lines]
        return lines

    @staticmethod
    def _check_view_create(target: Target, obj: Message) -> None:
        """kube validates an events.k8s.io/v1 create more strictly than a core/v1 one."""
        view = target.resource.view
        if view is eventsview.EVENTS_V1:
            errors = eventsview.validate_create(obj)  # type: ignore[arg-type]
            if errors:
                meta = obj.metadata  # type: ignore[attr-defined]
                raise InvalidError.for_object(view.qualified_kind, meta.name, errors)

    def _status_resource(self, target: Target) -> StatusResource:
        # Errors name the version asked for: `Event.events.k8s.io "x" is invalid`.
        info = target.resource.view or target.resource.info
        return StatusResource(info, target.name or "", target.subresource or "")

    def _accept(self, request: web.Request, *, table: bool) -> str:
        fmt = codecs.negotiate(request.headers.get("Accept", ""), table=table)
        if fmt is None:
            accepted = list(codecs.ACCEPTED_TYPES)
            if table:
                accepted.insert(0, "application/json;as=Table;v=v1;g=meta.k8s.io")
            raise not_acceptable(accepted)
        return fmt

    def _respond(
        self,
        fmt: str,
        body: bytes,
        *,
        code: int = 200,
        warnings: Sequence[str] = (),
    ) -> web.Response:
        if fmt.startswith(AS_PROTOBUF):
            encoded = kubeproto.encode(json.loads(body))
            if encoded is None:  # a kind without a protobuf form: the client's other choice
                fallback = codecs.protobuf_fallback(fmt)
                if fallback is None:
                    raise not_acceptable([codecs.JSON, codecs.YAML])
                return self._respond(fallback, body, code=code, warnings=warnings)
            resp = web.Response(status=code, body=encoded, headers={"Content-Type": PROTOBUF})
        elif fmt == AS_YAML:
            text = yaml.safe_dump(json.loads(body), sort_keys=False, default_flow_style=False)
            resp = web.Response(
                status=code, body=text.encode(), headers={"Content-Type": codecs.YAML}
            )
        elif fmt == AS_TABLE:
            resp = web.Response(
                status=code,
                body=body,
                headers={"Content-Type": "application/json;as=Table;v=v1;g=meta.k8s.io"},
            )
        else:
            resp = web.Response(status=code, body=body, headers={"Content-Type": codecs.JSON})
        for text in warnings:
            resp.headers.add("Warning", '299 - "' + text.replace('"', '\\"') + '"')
        return resp

    def _table(
        self,
        target: Target,
        q: Query,
        objects: Sequence[dict[str, Any]],
        resource_version: str,
        continue_token: str = "",
        remaining: int | None = None,
    ) -> bytes:
        include = q.choice("includeObject", ("None", "Metadata", "Object"), "Metadata")
        assert target.resource.info is not None
        table = tables.table(
            target.resource.info,
            objects,
            resource_version=resource_version,
            continue_token=continue_token,
            remaining_item_count=remaining,
            include_object=include,
            now=self.clock.now(),
        )
        return dumps(table)

    async def _body(self, request: web.Request, allowed: Sequence[str]) -> tuple[bytes, str]:
        """The request body (within the size limit) and its media type."""
        media = codecs.content_type_of(request.headers.get("Content-Type", "")) or codecs.JSON
        if media not in allowed:
            raise unsupported_media_type(list(allowed))
        body = await read_body(
            request, self.settings.max_request_bytes, self.settings.request_timeout_seconds
        )
        return body, media

    async def _decoded(
        self, request: web.Request, target: Target, q: Query
    ) -> tuple[Message, list[str]]:
        info = target.resource.view or target.resource.info
        assert info is not None
        protobuf = kubeproto.supports(info.api_version, info.kind)
        allowed = (*codecs.BODY_TYPES, codecs.PROTOBUF) if protobuf else codecs.BODY_TYPES
        body, media = await self._body(request, allowed)
        validation = q.choice("fieldValidation", ("Strict", "Warn", "Ignore"), "Warn")
        unknown: list[str] = []
        if media == codecs.PROTOBUF:
            doc, unknown = kubeproto.decode_unknown(body)
        else:
            doc = codecs.parse_object_body(body, media)
        obj, warnings = self._codec(target).decode(doc, validation)
        return obj, [*codecs.unknown_protobuf_fields(info, unknown, validation), *warnings]

    def _dry_run(self, q: Query) -> bool:
        values = self.query_all(q, "dryRun")
        for value in values:
            if value != "All":
                raise BadRequestError(
                    f'dryRun: Unsupported value: "{value}": supported values: "All"'
                )
        return bool(values)

    def _context(
        self, request: web.Request, q: Query, *, field_manager: str | None = None
    ) -> RequestContext:
        """The write's request context: who sends it (None under --insecure), the query's
        dryRun, and the field manager to record."""
        warnings: list[str] = []
        request[WARNINGS] = warnings
        return RequestContext(
            identity=request.get(IDENTITY),
            dry_run=self._dry_run(q),
            field_manager=field_manager,
            warnings=warnings,
        )

    @staticmethod
    def query_all(q: Query, name: str) -> list[str]:
        return [v for v in q.query.getall(name, []) if v != ""]

    def _namespace_for(self, target: Target, obj: Message) -> None:
        """Fill or check the object's namespace against the path's (Kubernetes' rules)."""
        meta = obj.metadata  # type: ignore[attr-defined]
        if not target.resource.namespaced:
            meta.namespace = ""
            return
        assert target.namespace is not None
        if not meta.namespace:
            meta.namespace = target.namespace
        elif meta.namespace != target.namespace:
            raise BadRequestError(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )

    def _object(self, target: Target, obj: Message) -> bytes:
        return self._codec(target).object_json(obj)

    def _object_dict(self, target: Target, obj: Message) -> dict[str, Any]:
        return self._codec(target).object_dict(obj)

    async def _answer_object(
        self,
        request: web.Request,
        target: Target,
        q: Query,
        obj: Message,
        *,
        code: int = 200,
        warnings: Sequence[str] = (),
    ) -> web.Response:
        fmt = self._accept(request, table=True)
        warnings = [*warnings, *request.get(WARNINGS, ())]
        if fmt == AS_TABLE:
            # Tables print the stored kind's fields, whichever version was asked for.
            assert target.resource.info is not None
            data = self.codecs[store_key(target.resource.info)].object_dict(obj)
            rv = str(data.get("metadata", {}).get("resourceVersion", ""))
            table = self._table(target, q, [data], rv)
            return self._respond(fmt, table, code=code, warnings=warnings)
        return self._respond(fmt, self._object(target, obj), code=code, warnings=warnings)

    # ---- GET / LIST -------------------------------------------------------------------------

    async def get(
        self, request: web.Request, target: Target, q: Query, service: ResourceStore
    ) -> web.Response:
        req = message_from(
            meta_pb2.GetRequest, {"namespace": target.namespace or "", "name": target.name}
        )
        obj = await service.get(req)
        return await self._answer_object(request, target, q, obj)

    def _list_request(self, target: Target, q: Query, *, watch: bool) -> dict[str, Any]:
        fields = q.text("fieldSelector")
        if target.resource.view is eventsview.EVENTS_V1:
            fields = eventsview.field_selector(fields)
        data: dict[str, Any] = {
            "namespace": target.namespace or "",
            "labelSelector": q.text("labelSelector"),
            "fieldSelector": fields,
            "resourceVersion": q.text("resourceVersion"),
        }
        if watch:
            data["allowWatchBookmarks"] = q.flag("allowWatchBookmarks")
        return data

    async def list_collection(
        self, request: web.Request, target: Target, q: Query, service: ResourceStore
    ) -> web.StreamResponse:
        fmt = self._accept(request, table=True)
        limit = q.number("limit") or 0
        if limit < 0:
            raise BadRequestError(f"invalid limit {limit}: must not be negative")
        # Kubernetes' limit is an int64, ListRequest's an int32: a limit past int32 is all.
        limit = min(limit, _INT32_MAX)
        token = q.text("continue")
        rv = q.text("resourceVersion")
        match = q.text("resourceVersionMatch")
        data = self._list_request(target, q, watch=False)
        data["limit"] = str(limit)
        if match:
            if match not in ("Exact", "NotOlderThan"):
                raise _list_options_invalid(
                    "resourceVersionMatch",
                    f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan"',
                )
            if not rv:
                raise _list_options_invalid(
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is "
                    "provided",
                )
            if token:
                raise _list_options_invalid(
                    "resourceVersionMatch",
                    "Forbidden: resourceVersionMatch is forbidden when continue is provided",
                )
            if match == "Exact" and rv == "0":
                raise _list_options_invalid(
                    "resourceVersionMatch",
                    'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                )
        exact = match == "Exact"
        if exact:
            try:
                revision = int(rv)
            except ValueError:
                raise BadRequestError(f'invalid resourceVersion "{rv}"') from None
            # A list at one etcd revision is what a continue token from the start means.
            token = service.continue_token_at(target.namespace or "", revision)
            data["resourceVersion"] = ""
        if token:
            data["continue"] = token
        req = message_from(meta_pb2.ListRequest, data)
        try:
            page = await service.list_page(req)
        except ResourceExpiredError:
            if exact:
                raise ResourceExpiredError(
                    "The resourceVersion for the provided list is too old."
                ) from None
            raise
        kcodec = self._codec(target)
        codec = service.codec
        revision_text, items, next_token = page.revision, page.items, page.token
        stream = len(items) >= STREAM_LIST_ITEMS
        if fmt == AS_TABLE:
            if stream:
                return await self._stream_table(
                    request, target, q, codec, items, revision_text, next_token, page.remaining
                )
            objects = [json.loads(codec.object_json(o)) for o in items]
            body = self._table(target, q, objects, revision_text, next_token, page.remaining)
            return self._respond(fmt, body)
        # The object's JSON in the kind's own version, unless another version's view is asked
        # for.
        encode: Callable[[CachedObject], bytes] = codec.object_json
        if target.resource.view is not None:
            encode = lambda o: kcodec.object_json(o.obj)  # noqa: E731
        if stream and fmt == AS_JSON:
            head = kcodec.list_head(revision_text, next_token, page.remaining)
            return await self._stream_list(request, codecs.JSON, head, map(encode, items))
        listed = [encode(o) for o in items]
        body = kcodec.list_json(revision_text, listed, next_token, page.remaining)
        return self._respond(fmt, body)

    async def _stream_table(
        self,
        request: web.Request,
        target: Target,
        q: Query,
        codec: Codec,
        items: Sequence[CachedObject],
        resource_version: str,
        continue_token: str,
        remaining: int | None,
    ) -> web.StreamResponse:
        """A long LIST as a Table, its rows made and sent a chunk of objects at a time."""
        include = q.choice("includeObject", ("None", "Metadata", "Object"), "Metadata")
        info = target.resource.info
        assert info is not None
        now = self.clock.now()
        # The Table without rows first: a bad includeObject is still a 400 before any byte.
        table = tables.table(
            info,
            [],
            resource_version=resource_version,
            continue_token=continue_token,
            remaining_item_count=remaining,
            include_object=include,
            now=now,
        )
        del table["rows"]
        head = dumps(table)[:-1] + b',"rows":['

        def rows() -> Iterator[bytes]:
            for i in range(0, len(items), _TABLE_CHUNK):
                chunk = [json.loads(codec.object_json(o)) for o in items[i : i + _TABLE_CHUNK]]
                for row in tables.rows(info, chunk, include_object=include, now=now):
                    yield dumps(row)

        return await self._stream_list(request, _TABLE_TYPE, head, rows())

    async def _stream_list(
        self, request: web.Request, content_type: str, head: bytes, pieces: Iterable[bytes]
    ) -> web.StreamResponse:
        """Answer a long LIST as it is encoded, `STREAM_CHUNK_BYTES` at a time (kube's streaming
        collection encoders): `head`, the pieces comma-separated, then `]}`. The apiserver holds
        the list of cached objects and one chunk, not every item's encoding and their join (a
        LIST of 150,000 pods as JSON is half a gigabyte, twice over), and other requests run
        between the chunks. A failure after the first byte can only cut the answer short."""
        resp = web.StreamResponse(status=200, headers={"Content-Type": content_type})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        parts = [head]
        size = len(head)
        sep = b""
        try:
            for piece in pieces:
                parts.append(sep)
                parts.append(piece)
                sep = b","
                size += len(piece) + 1
                if size >= STREAM_CHUNK_BYTES:
                    if not await self._send(request, resp, b"".join(parts)):
                        return resp
                    parts.clear()
                    size = 0
        except Exception:
            log.exception("REST %s: encoding a streamed list failed", request.path)
            if request.transport is not None:
                request.transport.abort()
            return resp
        parts.append(b"]}")
        if await self._send(request, resp, b"".join(parts)):
            await resp.write_eof()
        return resp

    # ---- WATCH ------------------------------------------------------------------------------

    def _timeout(self, q: Query) -> float:
        seconds = q.number("timeoutSeconds")
        if seconds is not None:
            if seconds < 0:
                raise BadRequestError(f"invalid timeoutSeconds {seconds}: must not be negative")
            if seconds > 0:
                return float(seconds)
        return self.watch_timeout * (1 + random.random())

    async def watch(
        self, request: web.Request, target: Target, q: Query, service: ResourceStore
    ) -> web.StreamResponse:
        fmt = self._watch_format(request, target)
        timeout = self._timeout(q)
        initial_end = q.flag("sendInitialEvents")
        bookmarks = q.flag("allowWatchBookmarks")
        rv = q.text("resourceVersion")
        if initial_end and q.text("resourceVersionMatch") != "NotOlderThan":
            raise _list_options_invalid(
                "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
                "NotOlderThan",
            )
        if q.has("sendInitialEvents") and not initial_end and rv in ("", "0"):
            # sendInitialEvents=false from "now": no synthetic ADDED events.
            rv = str(service.cache.state_revision)
        data = self._list_request(target, q, watch=True)
        data["resourceVersion"] = rv
        req = message_from(meta_pb2.WatchRequest, data)
        kcodec = self._codec(target)
        try:
            watcher, initial = await service.open_watch(req, json=True, ends_in=timeout)
        except ResourceExpiredError as exc:
            # As kube-apiserver's watch cache: the stream opens and carries one ERROR event.
            resp = await self._start_stream(request, fmt)
            await resp.write(self._stream_bytes(fmt, [self._error_event(exc, target)]))
            return resp
        start_revision = watcher.last_revision
        try:
            resp = await self._start_stream(request, fmt)
            lines = [line for line, _ in initial]
            del initial
            if initial_end and bookmarks:
                end = kcodec.bookmark_json(start_revision, {INITIAL_EVENTS_END: "true"})
                lines.append(encode_json_event("BOOKMARK", end))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                if lines:
                    chunk = (
                        self._table_events(target, q, lines)
                        if fmt == AS_TABLE
                        else self._stream_bytes(fmt, self._convert_lines(target, lines))
                    )
                    lines = []
                    if not await self._send(request, resp, chunk):
                        return resp
                    del chunk
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    async with asyncio.timeout(remaining):
                        queued = await watcher.drain_events()
                except TimeoutError:
                    break
                except TinykubeError as exc:
                    # The watch is over (a watcher cut off as too slow, a cache reset): the
                    # error event, then the connection closes, as kube-apiserver ends it.
                    error = self._stream_bytes(fmt, [self._error_event(exc, target)])
                    await self._send(request, resp, error)
                    resp.force_close()
                    break
                if not queued:
                    break
                lines = [line for line, _ in queued]
                del queued
            return resp
        finally:
            service.cache.unregister(watcher)

    def _watch_format(self, request: web.Request, target: Target) -> str:
        """A watch's format: JSON lines (also for YAML: kube-apiserver has no YAML framing),
        Table events, or protobuf frames for a kind with a protobuf form."""
        fmt = self._accept(request, table=True)
        if fmt.startswith(AS_PROTOBUF):
            res = target.resource
            if kubeproto.supports(res.group_version, res.kind):
                return AS_PROTOBUF
            fallback = codecs.protobuf_fallback(fmt)
            if fallback is None:
                raise not_acceptable([codecs.JSON])
            fmt = fallback
        return AS_JSON if fmt == AS_YAML else fmt

    @staticmethod
    def _stream_bytes(fmt: str, lines: Sequence[bytes]) -> bytes:
        """Watch events (JSON lines) as the stream sends them: as they are, or protobuf
        frames."""
        if fmt != AS_PROTOBUF:
            return b"".join(lines)
        frames = []
        for line in lines:
            event = json.loads(line)
            obj = kubeproto.encode(event["object"])
            if obj is None:  # not expected: the kind was checked; never a broken frame
                raise TinykubeError(f"cannot encode a {event['object'].get('kind')} as protobuf")
            frames.append(kubeproto.watch_frame(event["type"], obj))
        return b"".join(frames)

    async def _send(self, request: web.Request, resp: web.StreamResponse, data: bytes) -> bool:
        """Write part of a stream; False (the connection closed) if the client did not take it
        within the write deadline: a socket nobody reads must not hold its watch forever."""
        seconds = self.settings.write_timeout_seconds
        if seconds <= 0:
            await resp.write(data)
            return True
        try:
            async with asyncio.timeout(seconds):
                await resp.write(data)
        except TimeoutError:
            if request.transport is not None:
                request.transport.abort()
            return False
        return True

    async def _start_stream(self, request: web.Request, fmt: str) -> web.StreamResponse:
        if fmt == AS_PROTOBUF:
            content_type = PROTOBUF + ";stream=watch"
        elif fmt == AS_TABLE:
            content_type = "application/json;as=Table;v=v1;g=meta.k8s.io"
        else:
            content_type = codecs.JSON
        resp = web.StreamResponse(status=200, headers={"Content-Type": content_type})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        return resp

    def _error_event(self, exc: BaseException, target: Target) -> bytes:
        _, body, _ = status_of(exc, self._status_resource(target))
        return encode_json_event("ERROR", dumps(body))

    def _table_events(self, target: Target, q: Query, lines: list[bytes]) -> bytes:
        out: list[bytes] = []
        for line in lines:
            event = json.loads(line)
            obj = event["object"]
            if event["type"] in ("ERROR", "BOOKMARK"):
                out.append(line)
                continue
            rv = str(obj.get("metadata", {}).get("resourceVersion", ""))
            table = self._table(target, q, [obj], rv)
            out.append(b'{"type":"' + event["type"].encode() + b'","object":' + table + b"}\n")
        return b"".join(out)

    # ---- POST / PUT -------------------------------------------------------------------------

    async def create(
        self, request: web.Request, target: Target, q: Query, service: ResourceStore
    ) -> web.Response:
        ctx = self._context(request, q, field_manager=self._field_manager(request, q))
        obj, warnings = await self._decoded(request, target, q)
        self._namespace_for(target, obj)
        info = service.info
        self._check_view_create(target, obj)
        created = await service.create(info.create_request(**{info.request_field: obj}), ctx)
        return await self._answer_object(request, target, q, created, code=201, warnings=warnings)

    def _check_name(self, target: Target, obj: Message) -> None:
        meta = obj.metadata  # type: ignore[attr-defined]
        if not meta.name:
            meta.name = target.name
        elif meta.name != target.name:
            raise BadRequestError(
                f"the name of the object ({meta.name}) does not match the name on the URL "
                f"({target.name})"
            )

    async def update(
        self,
        request: web.Request,
        target: Target,
        q: Query,
        service: ResourceStore,
        *,
        status: bool = False,
        subresource: str = "",
    ) -> web.Response:
        """PUT of the object, its status (`status`) or another subresource's update rules."""
        ctx = self._context(request, q, field_manager=self._field_manager(request, q))
        obj, warnings = await self._decoded(request, target, q)
        self._check_name(target, obj)
        self._namespace_for(target, obj)
        info = service.info
        req = info.update_request(**{info.request_field: obj})
        if subresource:
            updated = await service.update_subresource(req, subresource, ctx)
        else:
            write = service.update_status if status else service.update
            updated = await write(req, ctx)
        return await self._answer_object(request, target, q, updated, warnings=warnings)

    async def finalize(
        self, request: web.Request, target: Target, q: Query, service: ResourceStore
    ) -> web.Response:
        """PUT namespaces/{name}/finalize: replace spec.finalizers (nothing else changes)."""
        ctx = self._context(request, q, field_manager=self._field_manager(request, q))
        obj, warnings = await self._decoded(request, target, q)
        self._check_name(target, obj)
        req = service.info.update_request(**{service.info.request_field: obj})
        assert isinstance(service, NamespaceStore)  # routed by kind
        new = await service.finalize(req, ctx)
        return await self._answer_object(request, target, q, new, warnings=warnings)

    # ---- PATCH ------------------------------------------------------------------------------

    def _patch_type(self, request: web.Request) -> str:
        media = codecs.content_type_of(request.headers.get("Content-Type", ""))
        accepted = sorted(patch.PATCH_CONTENT_TYPES)
        if media not in accepted:
            raise unsupported_media_type(accepted)
        return media

    async def _patch_body(self, request: web.Request) -> tuple[bytes, str]:
        media = self._patch_type(request)
        body, _ = await self._body(request, [media])
        return body, media

    async def patch_object(
        self,
        request: web.Request,
        target: Target,
        q: Query,
        service: ResourceStore,
        *,
        status: bool = False,
        subresource: str = "",
    ) -> web.Response:
        if codecs.content_type_of(request.headers.get("Content-Type", "")) == APPLY_PATCH:
            return await self.apply_object(request, target, q, service, status=status)
        if q.has("force"):
            raise _patch_options_invalid(
                "force",
                "Forbidden: may not be specified for non-apply patch",
                "FieldValueForbidden",
            )
        if service.info.message.DESCRIPTOR.full_name.startswith(CUSTOM_PREFIX):
            # Custom objects have no patch strategies: kube refuses a strategic merge (415).
            media = codecs.content_type_of(request.headers.get("Content-Type", ""))
            if media == STRATEGIC_PATCH:
                raise unsupported_media_type([JSON_PATCH, MERGE_PATCH, APPLY_PATCH])
        body, media = await self._patch_body(request)
        ctx = self._context(request, q, field_manager=self._field_manager(request, q))
        validation = q.choice("fieldValidation", ("Strict", "Warn", "Ignore"), "Warn")
        kcodec = self._codec(target)
        descriptor: Any = kcodec.info.message.DESCRIPTOR
        warnings: list[str] = []

        async def patched(current: Message | None) -> Message:
            assert current is not None  # a patch never creates
            result = patch.apply_patch(media, kcodec.object_dict(current), body, descriptor)
            if not isinstance(result, dict):
                raise BadRequestError("the patch must produce an object")
            obj, found = kcodec.decode(result, validation, patched=True)
            warnings[:] = found
            self._check_name(target, obj)
            self._namespace_for(target, obj)
            return obj

        assert target.name is not None
        updated, _ = await service.guaranteed_update(
            target.namespace or "",
            target.name,
            patched,
            ctx,
            subresource=subresource or ("status" if status else ""),
        )
        return await self._answer_object(request, target, q, updated, warnings=warnings)

    # ---- server-side apply ------------------------------------------------------------------

    @staticmethod
    def _field_manager(request: web.Request, q: Query) -> str:
        """The request's field manager: ?fieldManager=, else derived from the user agent."""
        return q.text("fieldManager") or fieldmanager.manager_from_user_agent(
            request.headers.get("User-Agent", "")
        )

    async def apply_object(
        self,
        request: web.Request,
        target: Target,
        q: Query,
        service: ResourceStore,
        *,
        status: bool,
    ) -> web.Response:
        """PATCH with application/apply-patch+yaml: server-side apply (apiserver/fieldmanager.py)
        of the body to the live object, creating it when it does not exist (201)."""
        manager = q.text("fieldManager")
        if not manager:
            raise _patch_options_invalid(
                "fieldManager", "Required value: is required for apply patch", "FieldValueRequired"
            )
        if len(manager) > 128:
            raise _patch_options_invalid(
                "fieldManager",
                "Too long: may not be more than 128 bytes",
                "FieldValueTooLong",
            )
        if status:
            raise unsupported_media_type([JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH])
        force = q.flag("force")
        validation = q.choice("fieldValidation", ("Strict", "Warn", "Ignore"), "Warn")
        body, _ = await self._body(request, [APPLY_PATCH])
        config = codecs.parse_object_body(body, codecs.YAML)  # YAML, and so JSON too
        info = service.info
        kcodec = self._codec(target)
        version = config.get("apiVersion")
        if version != kcodec.info.api_version:
            raise BadRequestError(
                "Incorrect version specified in apply patch. Specified patch version: "
                f"{version or ''}, expected: {kcodec.info.api_version}"
            )
        _, warnings = kcodec.decode(config, validation)  # Strict refuses unknown fields here
        descriptor: Any = kcodec.info.message.DESCRIPTOR
        config = fieldmanager.drop_undeclared(config, descriptor)
        meta = config.get("metadata") or {}
        if not isinstance(meta, dict):
            raise BadRequestError("metadata: expected an object")
        if meta.get("name") not in (None, "", target.name):
            raise BadRequestError(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({target.name})"
            )
        # The applied object carries the managedFields the apply computed.
        ctx = self._context(request, q, field_manager=None)
        now = fieldmanager.rfc3339(self.clock.now())

        async def applied(current: Message | None) -> Message:
            live = kcodec.object_dict(current) if current is not None else {}
            result = fieldmanager.apply(
                live,
                config,
                descriptor,
                manager=manager,
                api_version=kcodec.info.api_version,
                now=now,
                force=force,
                has_status=info.has_status,
            )
            obj, _ = kcodec.decode(result.obj, "Ignore")
            self._check_name(target, obj)
            self._namespace_for(target, obj)
            if current is None:
                self._check_view_create(target, obj)
            return obj

        assert target.name is not None
        try:
            obj, created = await service.guaranteed_update(
                target.namespace or "", target.name, applied, ctx, create_missing=True
            )
        except fieldmanager.ApplyConflict as exc:
            raise RestError(409, "Conflict", exc.message, {"causes": exc.causes}) from exc
        code = 201 if created else 200
        return await self._answer_object(request, target, q, obj, code=code, warnings=warnings)

    # ---- DELETE -----------------------------------------------------------------------------

    async def _delete_options(self, request: web.Request, q: Query) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if request.can_read_body:
            body, media = await self._body(request, _WITH_PROTOBUF)
            if media == codecs.PROTOBUF and body:
                options = kubeproto.delete_options(body)
            elif body.strip():
                options = codecs.parse_object_body(body, media)
        grace = q.number("gracePeriodSeconds")
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        if q.has("propagationPolicy"):
            options["propagationPolicy"] = q.text("propagationPolicy")
        if q.has("orphanDependents"):
            options["orphanDependents"] = q.flag("orphanDependents")
        check_delete_options(options)
        return options

    def _delete_request(
        self, namespace: str, name: str, options: Mapping[str, Any]
    ) -> meta_pb2.DeleteRequest:
        data: dict[str, Any] = {"namespace": namespace, "name": name}
        if options.get("gracePeriodSeconds") is not None:
            data["gracePeriodSeconds"] = min(options["gracePeriodSeconds"], MAX_GRACE_SECONDS)
        pre = options.get("preconditions") or {}
        pre = {k: v for k, v in pre.items() if k in ("uid", "resourceVersion") and v}
        if pre:
            data["preconditions"] = pre
        policy = policy_of(options.get("propagationPolicy"), options.get("orphanDependents"))
        if policy:
            data["propagationPolicy"] = policy
        return message_from(meta_pb2.DeleteRequest, data)

    async def _delete_one(
        self,
        service: ResourceStore,
        namespace: str,
        name: str,
        options: Mapping[str, Any],
        ctx: RequestContext,
    ) -> Message:
        return await service.delete(self._delete_request(namespace, name, options), ctx)

    async def delete(
        self, request: web.Request, target: Target, q: Query, service: ResourceStore
    ) -> web.Response:
        options = await self._delete_options(request, q)
        dry_run = bool(self._eviction_dry_run(q, options.get("dryRun"), "DeleteOptions."))
        ctx = RequestContext(identity=request.get(IDENTITY), dry_run=dry_run)
        assert target.name is not None
        obj = await self._delete_one(service, target.namespace or "", target.name, options, ctx)
        data = self._object_dict(target, obj)
        pending = "deletionTimestamp" in data.get("metadata", {})
        fmt = self._accept(request, table=False)
        if pending or service.info.returns_deleted_object:
            # Kubernetes answers with the object while it is still there (graceful deletion,
            # finalizers) and always for the kinds whose registry returns the deleted object
            # (pods, services, service accounts); otherwise with a Success Status. 202 only
            # when the deprecated orphanDependents=false asked for cascading and the object
            # stays: kube-apiserver keeps that quirk for old clients.
            code = 202 if pending and options.get("orphanDependents") is False else 200
            return self._respond(fmt, dumps(data), code=code)
        details: dict[str, Any] = {"name": target.name}
        if target.resource.group:
            details["group"] = target.resource.group
        details["kind"] = service.info.plural
        uid = data.get("metadata", {}).get("uid")
        if uid:
            details["uid"] = uid
        return self._respond(fmt, dumps(success_body(200, details)))

    async def delete_collection(
        self, request: web.Request, target: Target, q: Query, service: ResourceStore
    ) -> web.Response:
        """Every object the list options select, deleted one by one through the same Delete
        (with the same DeleteOptions) as a single DELETE. Answers the list as it was before
        the deletions, as kube-apiserver does; one already gone is no error, any other
        error stops the request."""
        options = await self._delete_options(request, q)
        dry_run = bool(self._eviction_dry_run(q, options.get("dryRun"), "DeleteOptions."))
        ctx = RequestContext(identity=request.get(IDENTITY), dry_run=dry_run)
        fmt = self._accept(request, table=False)
        data = self._list_request(target, q, watch=False)
        req = message_from(meta_pb2.ListRequest, data)
        revision, items, _ = await service.list_objects(req)
        for item in items:
            meta = item.obj.metadata  # type: ignore[attr-defined]
            with contextlib.suppress(NotFoundError):  # deleted meanwhile: as asked
                await self._delete_one(service, meta.namespace, meta.name, options, ctx)
        kcodec = self._codec(target)
        if target.resource.view is not None:
            listed = [kcodec.object_json(item.obj) for item in items]
        else:
            listed = [service.codec.object_json(item) for item in items]
        return self._respond(fmt, kcodec.list_json(revision, listed))

    # ---- pods/binding -----------------------------------------------------------------------

    async def bind(
        self, request: web.Request, target: Target, q: Query, service: ResourceStore
    ) -> web.Response:
        ctx = self._context(request, q)
        body, media = await self._body(request, _WITH_PROTOBUF)
        doc = _object_body(body, media)
        if doc.get("kind") not in (None, "", "Binding"):
            raise BadRequestError(
                f"the kind in the data ({doc.get('kind')}) does not match the expected kind "
                "(Binding)"
            )
        binding = {k: v for k, v in doc.items() if k in ("metadata", "target")}
        meta = binding.setdefault("metadata", {}) or {}
        if not isinstance(meta, dict):
            raise BadRequestError(
                'Binding in version "v1" cannot be handled as a Binding: metadata: expected an '
                f"object, got {json.dumps(meta)[:100]}"
            )
        binding["metadata"] = meta
        if meta.get("name") not in (None, "", target.name):
            raise BadRequestError("the name of the object does not match the name on the URL")
        meta["name"] = target.name
        if meta.get("namespace") not in (None, "", target.namespace):
            raise BadRequestError(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        meta["namespace"] = target.namespace
        try:
            msg = pod_pb2.Binding()
            json_format.ParseDict(binding, msg, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise BadRequestError(
                f'Binding in version "v1" cannot be handled as a Binding: {exc}'
            ) from None
        res = StatusResource(service.info, target.name or "", "binding")
        assert isinstance(service, PodStore)  # routed by kind
        try:
            await service.bind(pod_pb2.BindRequest(binding=msg), ctx)
        except (AlreadyExistsError, PreconditionFailedError) as exc:
            raise self._binding_conflict(exc, res) from exc
        fmt = self._accept(request, table=False)
        return self._respond(fmt, dumps(success_body(201)), code=201)

    @staticmethod
    def _binding_conflict(exc: TinykubeError, res: StatusResource) -> RestError:
        # kube-apiserver reports every refused binding as a Conflict: on pods/binding when the
        # pod is bound or terminating, on pods when a precondition (uid) fails.
        on = "pods" if exc.message.startswith("Precondition failed") else "pods/binding"
        message = f'Operation cannot be fulfilled on {on} "{res.name}": {exc.message}'
        return RestError(409, "Conflict", message, {"name": res.name, "kind": on})

    # ---- pods/eviction ----------------------------------------------------------------------

    async def evict(
        self, request: web.Request, target: Target, q: Query, service: ResourceStore
    ) -> web.Response:
        """POST an Eviction (policy/v1 or policy/v1beta1): 201 and a Success Status once the
        pod is deleted (or marked for deletion), as kube-apiserver answers."""
        body, media = await self._body(request, _WITH_PROTOBUF)
        doc = _object_body(body, media)
        kind, version = doc.get("kind"), doc.get("apiVersion")
        if kind not in (None, "", "Eviction"):
            raise BadRequestError(
                f"the kind in the data ({kind}) does not match the expected kind (Eviction)"
            )
        if version not in (None, "", *EVICTION_VERSIONS):
            raise BadRequestError(
                f'Eviction in version "{version}" cannot be handled as a Eviction: supported '
                "versions: " + ", ".join(EVICTION_VERSIONS)
            )
        meta = doc.get("metadata") or {}
        if not isinstance(meta, dict):
            raise BadRequestError("Eviction.metadata: expected an object")
        if meta.get("name", "") != target.name:
            raise BadRequestError("name in URL does not match name in Eviction object")
        if meta.get("namespace") not in (None, "", target.namespace):
            raise BadRequestError(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        options = doc.get("deleteOptions") or {}
        if not isinstance(options, dict):
            raise BadRequestError("Eviction.deleteOptions: expected an object")
        options = dict(options)
        options["dryRun"] = self._eviction_dry_run(q, options.get("dryRun"))
        check_delete_options(options, "Eviction.deleteOptions.")
        if options.get("gracePeriodSeconds") is not None:
            options["gracePeriodSeconds"] = min(options["gracePeriodSeconds"], MAX_GRACE_SECONDS)
        fields = ("gracePeriodSeconds", "preconditions", "propagationPolicy", "dryRun")
        if options.get("orphanDependents") is not None:
            options.setdefault(
                "propagationPolicy", "Orphan" if options["orphanDependents"] else "Background"
            )
        msg = pod_pb2.Eviction()
        try:
            json_format.ParseDict(
                {
                    "metadata": {"name": target.name, "namespace": target.namespace},
                    "deleteOptions": {k: v for k, v in options.items() if k in fields},
                },
                msg,
                ignore_unknown_fields=True,
            )
        except json_format.ParseError as exc:
            raise BadRequestError(
                f'Eviction in version "v1" cannot be handled as a Eviction: {exc}'
            ) from None
        # The Eviction's deleteOptions.dryRun (merged with the query's) says if it is dry.
        assert isinstance(service, PodStore)  # routed by kind
        await service.evict(
            pod_pb2.EvictRequest(eviction=msg), RequestContext(request.get(IDENTITY))
        )
        fmt = self._accept(request, table=False)
        return self._respond(fmt, dumps(success_body(201)), code=201)

    def _eviction_dry_run(
        self, q: Query, content: Any, where: str = "Eviction.deleteOptions."
    ) -> list[str]:
        """The dry-run of the query and of the (Eviction's) DeleteOptions, which must agree."""
        query = ["All"] if self._dry_run(q) else []
        if content is None or content == []:
            return query
        if not isinstance(content, list) or not all(isinstance(v, str) for v in content):
            raise BadRequestError(f"{where}dryRun: expected a list of strings")
        for value in content:
            if value != "All":
                raise BadRequestError(
                    f'dryRun: Unsupported value: "{value}": supported values: "All"'
                )
        if query and query != content:
            raise BadRequestError(
                "Non-matching dry-run options in request and content: "
                f"[{' '.join(query)}] and [{' '.join(content)}]"
            )
        return list(content)

    # ---- pods/log ---------------------------------------------------------------------------

    def _log_options(self, q: Query) -> PodLogOptions:
        since_time = None
        text = q.text("sinceTime")
        if text:
            try:
                since_time = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                since_time = None
            if since_time is None or since_time.tzinfo is None:
                raise BadRequestError(
                    f'invalid value "{text}" for query parameter sinceTime: not an RFC 3339 time '
                    '("2026-12-01T10:00:00Z")'
                )
        q.flag("insecureSkipTLSVerifyBackend")  # checked, then moot: kubelets speak plain gRPC
        return PodLogOptions(
            container=q.text("container"),
            follow=q.flag("follow"),
            previous=q.flag("previous"),
            timestamps=q.flag("timestamps"),
            tail_lines=q.number("tailLines"),
            limit_bytes=q.number("limitBytes"),
            since_seconds=q.number("sinceSeconds"),
            since_time=since_time,
        )

    async def logs(
        self, request: web.Request, target: Target, q: Query, service: ResourceStore
    ) -> web.StreamResponse:
        """GET pods/NAME/log: text/plain, chunked, each kubelet chunk written as it arrives.

        Errors found before the first byte (options, container, the kubelet's refusal) are a
        Status; once the stream has started, a failure can only end it, as kube-apiserver."""
        options = self._log_options(q)
        nodes = self.services[NODE.kind]

        async def get_pod(namespace: str, name: str) -> pod_pb2.Pod:
            req = message_from(meta_pb2.GetRequest, {"namespace": namespace, "name": name})
            return await service.get(req)  # type: ignore[return-value]

        async def get_node(name: str) -> node_pb2.Node:
            return await nodes.get(meta_pb2.GetRequest(name=name))  # type: ignore[return-value]

        chunks = PodLogs(get_pod, get_node, self.kubelet_credentials).stream(
            target.namespace or "", target.name or "", options
        )

        async def next_chunk() -> bytes | None:
            try:
                return await anext(chunks)
            except StopAsyncIteration:
                return None

        pending = asyncio.ensure_future(next_chunk())
        try:
            # A follow of a quiet container must still open the stream soon.
            await asyncio.wait({pending}, timeout=_LOG_HEADERS_AFTER if options.follow else None)
            data = pending.result() if pending.done() else b""
            resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            try:
                if not pending.done():
                    data = await pending
                while data is not None:
                    if data:
                        await resp.write(data)
                    data = await next_chunk()
            except TinykubeError:
                pass  # the stream has begun: ending it is all that is left to say
            return resp
        finally:
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending
            await chunks.aclose()

    # ---- nodes/proxy ------------------------------------------------------------------------

    async def node_proxy(
        self, request: web.Request, target: Target, service: ResourceStore
    ) -> web.Response:
        """GET nodes/NAME/proxy/PATH: the kubelet's answer (apiserver/nodeproxy.py)."""
        node: node_pb2.Node = await service.get(meta_pb2.GetRequest(name=target.name or ""))  # type: ignore[assignment]
        body = await proxy_get(
            node, request.get(PROXY_PATH, ""), dict(request.query), self.kubelet_credentials
        )
        return web.Response(body=body, headers={"Content-Type": "application/json"})

    # ---- pods/exec, pods/attach, pods/portforward --------------------------------------------

    async def pod_stream(
        self, request: web.Request, target: Target, kind: str, service: ResourceStore
    ) -> web.StreamResponse:
        """GET or POST pods/NAME/{exec,attach,portforward}: a WebSocket relayed to the
        pod's kubelet (apiserver/podstream.py)."""
        q = Query(request.query)
        ports: list[int] = []
        if kind == "portforward":
            try:
                ports = rc.parse_ports(request.query.getall("ports", []))
            except ValueError as exc:
                raise BadRequestError(str(exc)) from None
        options = StreamOptions(
            container=q.text("container"),
            command=request.query.getall("command", []) if kind == "exec" else (),
            stdin=q.flag("stdin"),
            stdout=q.flag("stdout"),
            stderr=q.flag("stderr"),
            tty=q.flag("tty"),
            ports=ports,
        )
        nodes = self.services[NODE.kind]

        async def get_pod(namespace: str, name: str) -> pod_pb2.Pod:
            req = message_from(meta_pb2.GetRequest, {"namespace": namespace, "name": name})
            return await service.get(req)  # type: ignore[return-value]

        async def get_node(name: str) -> node_pb2.Node:
            return await nodes.get(meta_pb2.GetRequest(name=name))  # type: ignore[return-value]

        streams = PodStreams(get_pod, get_node, self.kubelet_credentials)
        return await streams.serve(
            request, kind, target.namespace or "", target.name or "", options
        )

    # ---- replicasets/scale, deployments/scale ----------------------------------------------------

    def _scale(self, rs: dict[str, Any], info: KindInfo) -> dict[str, Any]:
        """autoscaling/v1 Scale of an object, from its kind's scale paths (a CRD's
        subresources.scale, or spec.replicas / status.replicas / spec.selector)."""
        paths = info.scale or Scale()
        meta = rs.get("metadata", {})
        scale_meta = {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        }
        status: dict[str, Any] = {
            "replicas": _whole(tables.json_path_value(rs, paths.status_replicas_path)) or 0
        }
        selector = (
            tables.json_path_value(rs, paths.label_selector_path)
            if paths.label_selector_path
            else None
        )
        if isinstance(selector, dict):
            selector = label_selector_text(selector)
        if selector and isinstance(selector, str):
            status["selector"] = selector
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": scale_meta,
            "spec": {"replicas": _whole(tables.json_path_value(rs, paths.spec_replicas_path)) or 0},
            "status": status,
        }

    async def _get_rs(self, target: Target, service: ResourceStore) -> dict[str, Any]:
        get = message_from(
            meta_pb2.GetRequest, {"namespace": target.namespace or "", "name": target.name}
        )
        rs = await service.get(get)
        return self.codecs[store_key(service.info)].object_dict(rs)

    async def get_scale(
        self, request: web.Request, target: Target, q: Query, service: ResourceStore
    ) -> web.Response:
        rs = await self._get_rs(target, service)
        fmt = self._accept(request, table=False)
        return self._respond(fmt, dumps(self._scale(rs, service.info)))

    async def update_scale(
        self, request: web.Request, target: Target, q: Query, service: ResourceStore
    ) -> web.Response:
        if request.method == "PATCH":
            media = self._patch_type(request)
            body, _ = await self._body(request, [media])
            if media == STRATEGIC_PATCH:
                media = MERGE_PATCH  # Scale has no lists: a strategic merge is a merge
        else:
            body, media = await self._body(request, _WITH_PROTOBUF)
        if request.method == "PATCH" and media == APPLY_PATCH:
            raise unsupported_media_type([JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH])
        ctx = self._context(request, q)
        kcodec = self.codecs[store_key(service.info)]

        async def scaled(current: Message | None) -> Message:
            assert current is not None
            rs = kcodec.object_dict(current)
            scale = self._scale(rs, service.info)
            if request.method == "PATCH":
                new_scale = patch.apply_patch(media, scale, body, None)
            else:
                new_scale = _object_body(body, media)
            if not isinstance(new_scale, dict):
                raise BadRequestError("the Scale must be an object")
            for part in ("spec", "metadata"):
                if not isinstance(new_scale.get(part) or {}, dict):
                    raise BadRequestError(
                        f'Scale in version "v1" cannot be handled as a Scale: {part}: expected '
                        f"an object, got {json.dumps(new_scale[part])[:100]}"
                    )
            replicas = (new_scale.get("spec") or {}).get("replicas", 0)
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise InvalidError(
                    f'Scale.autoscaling "{target.name}" is invalid: spec.replicas: Invalid '
                    f"value: {json.dumps(replicas)}: must be greater than or equal to 0",
                    [
                        FieldError(
                            "spec.replicas",
                            f"Invalid value: {json.dumps(replicas)}: must be greater than or "
                            "equal to 0",
                        )
                    ],
                )
            # A resourceVersion the Scale names is the client's precondition.
            wanted_rv = (new_scale.get("metadata") or {}).get("resourceVersion", "")
            _set_path(rs, (service.info.scale or Scale()).spec_replicas_path, replicas)
            rs["metadata"]["resourceVersion"] = wanted_rv or rs["metadata"].get(
                "resourceVersion", ""
            )
            obj, _ = kcodec.decode(rs, "Ignore")
            return obj

        assert target.name is not None
        updated, _ = await service.guaranteed_update(
            target.namespace or "", target.name, scaled, ctx
        )
        fmt = self._accept(request, table=False)
        return self._respond(fmt, dumps(self._scale(kcodec.object_dict(updated), service.info)))

    # ---- kinds tinykube does not model ------------------------------------------------------

    async def _unmodeled(
        self, request: web.Request, target: Target, q: Query
    ) -> web.StreamResponse:
        res = target.resource
        method = request.method
        if method != "GET":
            raise method_not_allowed(
                f"tinykube does not store {res.plural}; lists and watches of them are always empty"
            )
        if target.name is not None:
            raise NotFoundError(
                f'{res.plural}{"." + res.group if res.group else ""} "{target.name}" not found'
            )
        revision = str(max((s.cache.state_revision for s in self.services.values()), default=0))
        if q.flag("watch"):
            return await self._empty_watch(request, target, q, revision)
        fmt = self._accept(request, table=True)
        if fmt == AS_TABLE:
            table = {
                "kind": "Table",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": revision},
                "columnDefinitions": [
                    {
                        "name": "Name",
                        "type": "string",
                        "format": "name",
                        "description": "Name must be unique within a namespace.",
                        "priority": 0,
                    },
                    {
                        "name": "Age",
                        "type": "string",
                        "format": "",
                        "description": "CreationTimestamp of the object.",
                        "priority": 0,
                    },
                ],
                "rows": [],
            }
            return self._respond(fmt, dumps(table))
        body = {
            "kind": f"{res.kind}List",
            "apiVersion": res.group_version,
            "metadata": {"resourceVersion": revision},
            "items": [],
        }
        return self._respond(fmt, dumps(body))

    async def _empty_watch(
        self, request: web.Request, target: Target, q: Query, revision: str
    ) -> web.StreamResponse:
        timeout = self._timeout(q)
        fmt = self._watch_format(request, target)
        resp = await self._start_stream(request, fmt)
        res = target.resource
        if q.flag("sendInitialEvents") and q.flag("allowWatchBookmarks"):
            bookmark = {
                "kind": res.kind,
                "apiVersion": res.group_version,
                "metadata": {
                    "resourceVersion": revision,
                    "annotations": {INITIAL_EVENTS_END: "true"},
                },
            }
            await resp.write(
                self._stream_bytes(fmt, [encode_json_event("BOOKMARK", dumps(bookmark))])
            )
        else:
            # An empty chunk makes clients see the stream open (headers flushed).
            await resp.write(b"")
        with contextlib.suppress(TimeoutError):
            await asyncio.sleep(timeout)
        return resp


def _whole(value: Any) -> Any:
    """A JSON number as Go decodes an int64 field: 3.0 is 3."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted JSON path (".spec.replicas"), making the objects on the way."""
    keys = path.lstrip(".").split(".")
    for key in keys[:-1]:
        nxt = obj.get(key)
        if not isinstance(nxt, dict):
            nxt = obj[key] = {}
        obj = nxt
    obj[keys[-1]] = value


def store_key(info: KindInfo) -> str:
    """A kind's key in the apiserver's store table: the kind for the built-in ones, the
    service name (group, version and kind) for a CRD's, whose kind may repeat across versions
    and groups (apiserver/crd/serving.py)."""
    return info.service if info.custom else info.kind
