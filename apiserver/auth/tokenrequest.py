"""TokenRequest (serviceaccounts/token) and what service account tokens are checked against.

`TokenRequests.create(namespace, name, body, ctx)` answers
POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token as kube's
pkg/registry/core/serviceaccount/storage/token.go does: the body is an
authentication.k8s.io/v1 TokenRequest; its metadata name and namespace, when set, must match the
URL's (422); `spec.expirationSeconds` defaults to 3600 and must be at least 600 and at most 2^32
(422, kube's messages), and is shortened to `--service-account-max-token-expiration`;
`spec.audiences` default to the apiserver's `--api-audiences`; `spec.boundObjectRef` binds the
token to a Pod (run by this account: else 400) or a Secret of the namespace, or a Node, which
must exist (404) and have the uid given, if one is (409); a pod's node is named in the token
too. The
ServiceAccount must exist (404). The answer is the request with `status.token` and
`status.expirationTimestamp`; a dry run answers without a token. A kubelet (a node identity)
may ask only for tokens bound to a pod on its node (NodeRestriction, apiserver/auth/node.py).
Reads go to etcd (the stores' `get`), so a token is never minted for an object the cache has
not seen yet.

`CacheLookup` is the authenticator's view of accounts, pods and secrets: the apiserver's watch
caches, read synchronously on the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.message import Message

from apiserver.auth.authorizer import Identity
from apiserver.auth.node import admit_node_token
from apiserver.auth.tokens import (
    DEFAULT_EXPIRATION_SECONDS,
    MAX_EXPIRATION_SECONDS,
    MIN_EXPIRATION_SECONDS,
    Found,
    Ref,
    TokenIssuer,
    claims,
)
from apiserver.requestcontext import INTERNAL, RequestContext
from apiserver.resources import ResourceStore
from apiserver.watchcache import WatchCache
from tinykube.clock import Clock
from tinykube.errors import (
    BadRequestError,
    ConflictError,
    FieldError,
    ForbiddenError,
    InvalidError,
    NotFoundError,
)
from tinykube.kinds import NODE, POD, SECRET, SERVICE_ACCOUNT
from tinykube.v1 import meta_pb2

GROUP = "authentication.k8s.io"
VERSION = "v1"
KIND = "TokenRequest"


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _found(obj: Message) -> Found:
    meta = obj.metadata  # type: ignore[attr-defined]
    deleted = None
    if meta.HasField("deletionTimestamp"):
        deleted = datetime.fromtimestamp(meta.deletionTimestamp.seconds, UTC)
    return Found(meta.uid, deleted)


class CacheLookup:
    """`ObjectLookup` over the watch caches (keys `<prefix>/<plural>/<ns>/<name>`)."""

    def __init__(self, caches: Mapping[str, WatchCache], prefix: str) -> None:
        self._caches = caches
        self._prefix = prefix

    def _get(self, kind: str, plural: str, namespace: str, name: str) -> Found | None:
        cache = self._caches.get(kind)
        if cache is None or not name:
            return None
        hit = cache.state.get(f"{self._prefix}/{plural}/{namespace}/{name}".encode())
        return _found(hit.obj) if hit is not None else None

    def service_account(self, namespace: str, name: str) -> Found | None:
        return self._get(SERVICE_ACCOUNT.kind, SERVICE_ACCOUNT.plural, namespace, name)

    def pod(self, namespace: str, name: str) -> Found | None:
        return self._get(POD.kind, POD.plural, namespace, name)

    def secret(self, namespace: str, name: str) -> Found | None:
        cache = self._caches.get(SECRET.kind)
        if cache is None or not name:
            return None
        hit = cache.state.get(f"{self._prefix}/{SECRET.plural}/{namespace}/{name}".encode())
        if hit is None:
            return None
        found = _found(hit.obj)
        token = hit.obj.data.get("token", b"")  # type: ignore[attr-defined]
        return Found(found.uid, found.deleted_at, token)

    async def refresh(self) -> None:
        """Wait (bounded by the caches' wait timeout) until the caches of accounts, pods,
        secrets and nodes hold everything etcd holds now."""
        caches = [
            self._caches[k]
            for k in (SERVICE_ACCOUNT.kind, POD.kind, SECRET.kind, NODE.kind)
            if k in self._caches
        ]
        if not caches:
            return
        revision = await caches[0].storage.current_revision()
        for cache in caches:
            await cache.wait_for_revision(revision)

    def node(self, name: str) -> Found | None:
        cache = self._caches.get(NODE.kind)
        if cache is None or not name:
            return None
        hit = cache.state.get(f"{self._prefix}/{NODE.plural}/{name}".encode())
        return _found(hit.obj) if hit is not None else None


def _invalid(name: str, causes: list[FieldError]) -> InvalidError:
    body = str(causes[0]) if len(causes) == 1 else "[" + ", ".join(map(str, causes)) + "]"
    return InvalidError(f'{KIND}.{GROUP} "{name}" is invalid: {body}', causes)


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key, "")
    return value if isinstance(value, str) else ""


class TokenRequests:
    """serviceaccounts/token over the stores, signing with `issuer`."""

    def __init__(
        self, services: Mapping[str, ResourceStore], issuer: TokenIssuer, clock: Clock
    ) -> None:
        self.services = services
        self.issuer = issuer
        self.clock = clock

    async def _get(self, kind: str, namespace: str, name: str) -> Message:
        return await self.services[kind].get(meta_pb2.GetRequest(namespace=namespace, name=name))

    def _spec(self, name: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """The request's spec, defaulted and validated (kube's defaults and validation)."""
        for key, go_type in (("metadata", "v1.ObjectMeta"), ("spec", "v1.TokenRequestSpec")):
            value = body.get(key)
            if value is not None and not isinstance(value, Mapping):
                shown = "array" if isinstance(value, list) else type(value).__name__
                shown = {"str": "string", "int": "number", "float": "number"}.get(shown, shown)
                raise BadRequestError(
                    f'{KIND} in version "{VERSION}" cannot be handled as a {KIND}: json: cannot '
                    f"unmarshal {shown} into Go struct field {KIND}.{key} of type {go_type}"
                )
        meta = body.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        causes: list[FieldError] = []
        if _text(meta, "name") and meta.get("name") != name:
            causes.append(
                FieldError(
                    "metadata.name",
                    f'Invalid value: "{meta["name"]}": must match the service account name '
                    "if specified",
                )
            )
        if _text(meta, "namespace") and meta.get("namespace") != namespace:
            causes.append(
                FieldError(
                    "metadata.namespace",
                    f'Invalid value: "{meta["namespace"]}": must match the service account '
                    "namespace if specified",
                )
            )
        raw = body.get("spec")
        spec = dict(raw) if isinstance(raw, Mapping) else {}
        seconds = spec.get("expirationSeconds")
        if seconds is None:
            seconds = DEFAULT_EXPIRATION_SECONDS
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            causes.append(
                FieldError(
                    "spec.expirationSeconds", f"Invalid value: {seconds!r}: must be an integer"
                )
            )
        elif seconds < MIN_EXPIRATION_SECONDS:
            causes.append(
                FieldError(
                    "spec.expirationSeconds",
                    f"Invalid value: {seconds}: may not specify a duration less than 10 minutes",
                )
            )
        elif seconds > MAX_EXPIRATION_SECONDS:
            causes.append(
                FieldError(
                    "spec.expirationSeconds",
                    f"Invalid value: {seconds}: may not specify a duration larger than 2^32 "
                    "seconds",
                )
            )
        audiences = spec.get("audiences") or []
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            causes.append(FieldError("spec.audiences", "Invalid value: must be a list of strings"))
        ref = spec.get("boundObjectRef")
        if ref is not None and not isinstance(ref, Mapping):
            causes.append(FieldError("spec.boundObjectRef", "Invalid value: must be an object"))
        if causes:
            raise _invalid(name, causes)
        spec["expirationSeconds"] = seconds
        spec["audiences"] = list(audiences) or list(self.issuer.audiences)
        return spec

    async def _admit_node(
        self, requester: Identity | None, namespace: str, name: str, spec: Mapping[str, Any]
    ) -> None:
        """NodeRestriction: a kubelet's token must be bound to a pod on its node."""
        if requester is None:
            return
        ref = spec.get("boundObjectRef")
        bound = ref if isinstance(ref, Mapping) else None
        pod = None
        if bound is not None and bound.get("kind") == POD.kind and _text(bound, "name"):
            try:
                pod = await self._get(POD.kind, namespace, _text(bound, "name"))
            except NotFoundError:
                pod = None
        refused = admit_node_token(requester, namespace, name, bound, pod)
        if refused is not None:
            raise ForbiddenError(refused)

    async def create(
        self,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        ctx: RequestContext = INTERNAL,
    ) -> dict[str, Any]:
        """The TokenRequest answered for `ctx.identity`; a dry run (`ctx.dry_run`) answers
        without a token."""
        spec = self._spec(name, namespace, body)
        await self._admit_node(ctx.identity, namespace, name, spec)
        sa = await self._get(SERVICE_ACCOUNT.kind, namespace, name)
        pod_ref = secret_ref = node_ref = None
        ref = spec.get("boundObjectRef")
        if isinstance(ref, Mapping):
            api_version, kind = _text(ref, "apiVersion"), _text(ref, "kind")
            group, _, version = api_version.rpartition("/")
            ref_name, ref_uid = _text(ref, "name"), _text(ref, "uid")
            if group == "" and kind == POD.kind:
                pod = await self._get(POD.kind, namespace, ref_name)
                self._check_uid(pod, "Pod", ref_name, ref_uid)
                if pod.spec.serviceAccountName != name:  # type: ignore[attr-defined]
                    raise BadRequestError(
                        f'cannot bind token for serviceaccount "{name}" to pod running with '
                        "different serviceaccount name."
                    )
                pod_ref = Ref(ref_name, pod.metadata.uid)  # type: ignore[attr-defined]
                node_name = pod.spec.nodeName  # type: ignore[attr-defined]
                if node_name:
                    try:
                        node = await self._get(NODE.kind, "", node_name)
                    except NotFoundError:
                        node = None  # as kube: no node claim when the node is gone
                    if node is not None:
                        node_ref = Ref(node_name, node.metadata.uid)  # type: ignore[attr-defined]
            elif group == "" and kind == NODE.kind:
                node = await self._get(NODE.kind, "", ref_name)
                self._check_uid(node, "Node", ref_name, ref_uid)
                node_ref = Ref(ref_name, node.metadata.uid)  # type: ignore[attr-defined]
            elif group == "" and kind == SECRET.kind:
                secret = await self._get(SECRET.kind, namespace, ref_name)
                self._check_uid(secret, "Secret", ref_name, ref_uid)
                secret_ref = Ref(ref_name, secret.metadata.uid)  # type: ignore[attr-defined]
            else:
                raise BadRequestError(
                    f"cannot bind token to object of type {group}/{version}, Kind={kind}"
                )
        seconds = int(spec["expirationSeconds"])
        limit = self.issuer.max_expiration_seconds
        if limit > 0 and seconds > limit:
            seconds = limit
            spec["expirationSeconds"] = seconds
        now = self.clock.now()
        status: dict[str, Any] = {
            "token": "",
            "expirationTimestamp": _rfc3339(
                now.replace(microsecond=0) + timedelta(seconds=seconds)
            ),
        }
        if not ctx.dry_run:
            token_claims = claims(
                issuer=self.issuer.issuer,
                namespace=namespace,
                service_account=Ref(name, sa.metadata.uid),  # type: ignore[attr-defined]
                audiences=spec["audiences"],
                now=now,
                expiration_seconds=seconds,
                pod=pod_ref,
                secret=secret_ref,
                node=node_ref,
            )
            status["token"] = self.issuer.sign(token_claims)
        return {
            "kind": KIND,
            "apiVersion": f"{GROUP}/{VERSION}",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": spec,
            "status": status,
        }

    @staticmethod
    def _check_uid(obj: Message, kind: str, name: str, uid: str) -> None:
        actual = obj.metadata.uid  # type: ignore[attr-defined]
        if uid and uid != actual:
            raise ConflictError(
                f'Operation cannot be fulfilled on {kind} "{name}": the UID in the bound object '
                f"reference ({uid}) does not match the UID in record. The object might have been "
                "deleted and then recreated"
            )
