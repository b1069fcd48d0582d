"""The HTTP side of pods/ephemeralcontainers (the rules are apiserver/ephemeral.py).

GET answers the pod; PUT decodes a pod, PATCH patches the stored one (JSON, merge or strategic
merge; a resourceVersion race is retried as other patches are); of the result only
`spec.ephemeralContainers` is taken (`ephemeral.prepare`) and checked. The write goes through
the store's ordinary update with `EPHEMERAL_WRITE` set for its duration, so that the pod update
validation (apiserver/validation.py) lets the already checked ephemeral containers change.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from apiserver import ephemeral
from apiserver.rest import codec as codecs
from apiserver.rest import patch
from apiserver.rest.status import method_not_allowed
from apiserver.validation import EPHEMERAL_WRITE
from tinykube.errors import BadRequestError, ConflictError
from tinykube.v1 import meta_pb2, pod_pb2

_PATCH_ATTEMPTS = 5


async def serve(handlers: Any, request: web.Request, target: Any, q: Any, service: Any) -> Any:
    """GET, PUT or PATCH pods/NAME/ephemeralcontainers (the rest/handlers.py hook)."""
    get = meta_pb2.GetRequest(namespace=target.namespace or "", name=target.name or "")
    if request.method == "GET":
        return await handlers.get(request, target, q, service)
    if request.method not in ("PUT", "PATCH"):
        raise method_not_allowed()
    dry_run = handlers._dry_run(q)
    manager = handlers._field_manager(request, q)
    if request.method == "PUT":
        obj, warnings = await handlers._decoded(request, target, q)
        handlers._check_name(target, obj)
        handlers._namespace_for(target, obj)
        current = await service.get(get)
        updated = await _write(service, obj, current, dry_run=dry_run, manager=manager)
        return await handlers._answer_object(request, target, q, updated, warnings=warnings)
    content_type = codecs.content_type_of(request.headers.get("Content-Type", ""))
    if content_type == "application/apply-patch+yaml":
        raise BadRequestError("server-side apply is not served for pods/ephemeralcontainers")
    body, media = await handlers._patch_body(request)
    validation = q.choice("fieldValidation", ("Strict", "Warn", "Ignore"), "Warn")
    kcodec = handlers._codec(target)
    for attempt in range(_PATCH_ATTEMPTS):
        current = await service.get(get)
        original = kcodec.object_dict(current)
        patched = patch.apply_patch(media, original, body, kcodec.info.message.DESCRIPTOR)
        if not isinstance(patched, dict):
            raise BadRequestError("the patch must produce an object")
        obj, warnings = kcodec.decode(patched, validation, patched=True)
        handlers._check_name(target, obj)
        handlers._namespace_for(target, obj)
        ours = original.get("metadata", {}).get("resourceVersion", "")
        theirs = patched.get("metadata", {}).get("resourceVersion", "")
        try:
            updated = await _write(service, obj, current, dry_run=dry_run, manager=manager)
        except ConflictError:
            if theirs != ours or attempt == _PATCH_ATTEMPTS - 1:
                raise
            continue
        return await handlers._answer_object(request, target, q, updated, warnings=warnings)
    raise AssertionError("unreachable")


async def _write(
    service: Any, obj: pod_pb2.Pod, current: pod_pb2.Pod, *, dry_run: bool, manager: str
) -> pod_pb2.Pod:
    new = ephemeral.prepare(obj, current)
    errs = ephemeral.validate_update(new, current)
    if errs:
        raise ephemeral.invalid_error(current, errs)
    if dry_run:
        return new
    token = EPHEMERAL_WRITE.set(True)
    try:
        req = service.info.update_request(**{service.info.request_field: new})
        updated: pod_pb2.Pod = await service.update(req, field_manager=manager)
    finally:
        EPHEMERAL_WRITE.reset(token)
    return updated
