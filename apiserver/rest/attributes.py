"""What a REST request asks, as authorization attributes: kube-apiserver's RequestInfoFactory.

`rest_attributes(method, path, query)` parses a request the way kube's
k8s.io/apiserver/pkg/endpoints/request/requestinfo.go does, before any routing:

- /api/<version>/... (the core group) and /apis/<group>/<version>/... are resource requests;
  every other path (/healthz, /version, /openapi/v3, /api, /apis/apps) is a non-resource
  request whose verb is the lowercased HTTP method.
- The verb comes from the method (POST create, GET and HEAD get, PUT update, PATCH patch,
  DELETE delete); a GET without a name is list, or watch with ?watch=true (any value but
  "false" and "0"); a DELETE without a name is deletecollection; the legacy
  /api/v1/watch/... paths are watch.
- /namespaces/<ns>/<resource>/<name>/<subresource>: the namespace, resource, name and
  subresource ("status", "binding", "eviction", "log", "scale"); /api/v1/namespaces/<name> is the
  namespace resource itself (its own namespace is <name>), as are .../namespaces/<name>/status and
  /finalize.
- A GET of pods/exec, pods/attach or pods/portforward (a WebSocket upgrade) is `create`.
- A list or watch whose field selector pins metadata.name=<x> names <x>.

Pure functions, so front ends and tests agree on what a request means.
"""

from __future__ import annotations

from collections.abc import Mapping

from apiserver.auth.authorizer import Attributes, non_resource, selected_name

_SPECIAL_VERBS = ("proxy", "watch")
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
_STREAMING_SUBRESOURCES = ("exec", "attach", "portforward")
_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


def rest_attributes(method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """The attributes of `method path?query` (the query's first value per parameter)."""
    parts = [p for p in path.strip("/").split("/") if p] if path.strip("/") else []
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource(method.lower(), path)
    rest = parts[1:]
    group = ""
    if parts[0] == "apis":
        if len(rest) < 3:
            return non_resource(method.lower(), path)
        group, rest = rest[0], rest[1:]
    rest = rest[1:]  # the version
    if rest[0] in _SPECIAL_VERBS:
        if len(rest) < 2:
            # kube refuses to guess ("unable to determine kind and namespace"): the request
            # is then authorized as what it literally is.
            return non_resource(method.lower(), path)
        verb, rest = rest[0], rest[1:]
    else:
        verb = _METHOD_VERBS.get(method.upper(), "")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 and verb != "proxy" else ""
    field_selector = ""
    if not name and verb == "get":
        watch = query.get("watch")
        verb = "watch" if watch is not None and watch.lower() not in ("false", "0") else "list"
    if verb in ("list", "watch"):
        field_selector = query.get("fieldSelector", "")
        name = selected_name(field_selector)
    if not name and verb == "delete":
        verb = "deletecollection"
    if verb == "get" and resource == "pods" and subresource in _STREAMING_SUBRESOURCES:
        # kubectl's WebSocket upgrades are GETs; kube authorizes them as `create` (its
        # AuthorizePodWebsocketUpgradeCreatePermission), as the POSTs of SPDY are.
        verb = "create"
    return Attributes(
        verb=verb,
        resource=resource,
        api_group=group,
        subresource=subresource,
        namespace=namespace,
        name=name,
        field_selector=field_selector,
    )
