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
    service, name = _split(method)
    if service == CUSTOM_RESOURCES:
        return _custom_attributes(name, request)
    info = _BY_SERVICE.get(service)
    verbs = METHOD_VERBS.get(name)
    if info is None or verbs is None:
        return ()
    verb, sub = verbs
    plural, group, namespaced = info.plural, info.group, info.namespaced
    if name.endswith(_STREAM_SUFFIX):
        name = name[: -len(_STREAM_SUFFIX)]  # one message of a write stream: its unary request
    if name in ("List", "Watch", "WatchBatch"):
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
    if name in ("Get", "Delete"):
        namespace, obj_name = request.namespace, request.name
    elif name == "Create":
        namespace, obj_name = getattr(request, info.request_field).metadata.namespace, ""
    elif name in ("Update", "UpdateStatus", "Finalize"):
        meta = getattr(request, info.request_field).metadata
        namespace, obj_name = meta.namespace, meta.name
    elif name == "Bind":
        meta = request.binding.metadata
        namespace, obj_name = meta.namespace, meta.name
    elif name in ("BindBatch", "UpdateStatusBatch"):
        seen: dict[tuple[str, str], Attributes] = {}
        items = request.bindings if name == "BindBatch" else request.pods
        for item in items:
            key = (
                (item.metadata.namespace or "default") if namespaced else "",
                item.metadata.name,
            )
            if key not in seen:
                seen[key] = Attributes(verb, plural, group, sub, key[0], key[1])
        return tuple(seen.values())
    else:  # Evict
        meta = request.eviction.metadata
        namespace, obj_name = meta.namespace, meta.name
    namespace = (namespace or "default") if namespaced else ""
    if info.kind == NAMESPACE.kind:
        namespace = obj_name
    return (Attributes(verb, plural, group, sub, namespace, obj_name),)
