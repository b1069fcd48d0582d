"""What a gRPC request asks, as authorization attributes: the gRPC front end's RequestInfo.

`grpc_attributes(method, request)` maps a tinykube method and its decoded request message to
the `Attributes` the authorizers check, with the verbs and names kube-apiserver derives from the
equivalent REST request (apiserver/rest/attributes.py), so one policy governs both front ends:

| method | verb | subresource | name |
|---|---|---|---|
| Create | create | | "" (as a POST: the name is in the body) |
| Get | get | | the request's |
| List | list | | metadata.name=<x> in the field selector, else "" |
| Watch, WatchBatch | watch | | as List |
| Update | update | | the object's |
| UpdateStatus | update | status | the object's |
| Delete | delete | | the request's |
| Pods/Bind | create | binding | the pod's |
| Pods/BindBatch | create | binding | each pod's (one attribute set per distinct pod) |
| Pods/UpdateStatusBatch | update | status | each pod's (one attribute set per distinct pod) |
| Pods/Evict | create | eviction | the pod's |
| Namespaces/Finalize | update | finalize | the namespace's |
| CreateStream, UpdateStream, UpdateStatusStream | per message, as the unary method | | |

A namespace's own requests carry its name as their namespace too, as kube-apiserver's
RequestInfo gives `/api/v1/namespaces/<name>`.

A namespaced kind's request without a namespace means "default" for a single object (as the
resource layer reads it) and "all namespaces" for List and Watch. Methods outside the kinds'
services (health, reflection) are not resource requests: they give no attributes, and the
caller decides (health checks are open to everyone). Pure functions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apiserver.auth.authorizer import Attributes, selected_name
from tinykube.kinds import ALL_KINDS, NAMESPACE, KindInfo

# Method name -> (verb, subresource).
METHOD_VERBS: dict[str, tuple[str, str]] = {
    "Create": ("create", ""),
    "Get": ("get", ""),
    "List": ("list", ""),
    "Watch": ("watch", ""),
    "WatchBatch": ("watch", ""),
    "Update": ("update", ""),
    "UpdateStatus": ("update", "status"),
    "Delete": ("delete", ""),
    "Bind": ("create", "binding"),
    "BindBatch": ("create", "binding"),
    "UpdateStatusBatch": ("update", "status"),
    "Evict": ("create", "eviction"),
    "Finalize": ("update", "finalize"),
    # Write streams: `grpc_attributes` is asked per message, which is its unary method's request.
    "CreateStream": ("create", ""),
    "UpdateStream": ("update", ""),
    "UpdateStatusStream": ("update", "status"),
}
_STREAM_SUFFIX = "Stream"

_BY_SERVICE: dict[str, KindInfo] = {info.service: info for info in ALL_KINDS}


# The generic service of custom objects: the kind is in each request (group, plural).
CUSTOM_RESOURCES = "tinykube.v1.CustomResources"


def _custom_attributes(name: str, request: Any) -> tuple[Attributes, ...]:
    """tinykube.v1.CustomResources: the resource and namespace the request names (ListKinds
    is discovery: no resource attributes, open as REST discovery is)."""
    verbs = METHOD_VERBS.get(name)
    if verbs is None:
        return ()
    verb, sub = verbs
    if name in ("List", "Watch"):
        selector = request.fieldSelector
        return (
            Attributes(
                verb,
                request.plural,
                request.group,
                sub,
                request.namespace,
                selected_name(selector),
                True,
                "",
                selector,
            ),
        )
    if name in ("Get", "Delete"):
        obj_name = request.name
    elif name == "Create":
        obj_name = ""
    namespace = request.namespace
    if name in ("Create", "Update", "UpdateStatus"):
        metadata = request.object.fields.get("metadata")
        fields = metadata.struct_value.fields if metadata is not None else {}
        namespace = namespace or (fields["namespace"].string_value if "namespace" in fields else "")
        if name != "Create":
            obj_name = fields["name"].string_value if "name" in fields else ""
    return (Attributes(verb, request.plural, request.group, sub, namespace, obj_name),)


def _split(method: str) -> tuple[str, str]:
    """ "/tinykube.v1.Pods/Get" -> ("tinykube.v1.Pods", "Get")."""
    service, _, name = method.lstrip("/").partition("/")
    return service, name


def grpc_api_group(method: str) -> str:
    """The API group of the kind a method serves ("" for the core group and non-kind methods)."""
    info = _BY_SERVICE.get(_split(method)[0])
    return info.group if info is not None else ""


def grpc_attributes(method: str, request: Any) -> tuple[Attributes, ...]:
    """The attributes to authorize for one call (empty: not a resource request)."""
    return attributes_for(method)(request)


def _none(request: Any) -> tuple[Attributes, ...]:
    return ()


def attributes_for(method: str) -> Callable[[Any], tuple[Attributes, ...]]:
    """`grpc_attributes` of `method` as a function of the request alone: what depends on the
    method only (its kind, verb, which fields name the object) is looked up once, which the
    gRPC front end does per method when it wraps its handler, not per call."""
    service, name = _split(method)
    if service == CUSTOM_RESOURCES:
        return lambda request: _custom_attributes(name, request)
    info = _BY_SERVICE.get(service)
    verbs = METHOD_VERBS.get(name)
    if info is None or verbs is None:
        return _none
    verb, sub = verbs
    plural, group, namespaced = info.plural, info.group, info.namespaced
    if name.endswith(_STREAM_SUFFIX):
        name = name[: -len(_STREAM_SUFFIX)]  # one message of a write stream: its unary request
    if name in ("List", "Watch", "WatchBatch"):

        def listing(request: Any) -> tuple[Attributes, ...]:
            selector = request.fieldSelector
            return (
                Attributes(
                    verb,
                    plural,
                    group,
                    sub,
                    request.namespace if namespaced else "",
                    selected_name(selector),
                    True,
                    "",
                    selector,
                ),
            )

        return listing
    if name in ("BindBatch", "UpdateStatusBatch"):
        items_field = "bindings" if name == "BindBatch" else "pods"

        def batch(request: Any) -> tuple[Attributes, ...]:
            seen: dict[tuple[str, str], Attributes] = {}
            for item in getattr(request, items_field):
                key = (
                    (item.metadata.namespace or "default") if namespaced else "",
                    item.metadata.name,
                )
                if key not in seen:
                    seen[key] = Attributes(verb, plural, group, sub, key[0], key[1])
            return tuple(seen.values())

        return batch
    is_namespace = info.kind == NAMESPACE.kind

    def one(namespace: str, obj_name: str) -> tuple[Attributes, ...]:
        namespace = (namespace or "default") if namespaced else ""
        if is_namespace:
            namespace = obj_name
        return (Attributes(verb, plural, group, sub, namespace, obj_name),)

    if name in ("Get", "Delete"):
        return lambda request: one(request.namespace, request.name)
    if name == "Create":
        field = info.request_field
        return lambda request: one(getattr(request, field).metadata.namespace, "")
    # The object's own metadata names it: Update, UpdateStatus, Finalize (the kind's request
    # field), Bind (the Binding), Evict (the Eviction).
    field = {"Bind": "binding", "Evict": "eviction"}.get(name, info.request_field)

    def named(request: Any) -> tuple[Attributes, ...]:
        meta = getattr(request, field).metadata
        return one(meta.namespace, meta.name)

    return named
