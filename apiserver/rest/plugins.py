"""The integration point of the REST modules built separately: patches, OpenAPI, Tables.

`apiserver.rest.patch`, `apiserver.rest.openapi` and `apiserver.rest.tables` are imported
if they exist; until one does, its feature answers as Kubernetes does for an unsupported
request (PATCH: 415 with no accepted patch types, OpenAPI: 404, Table: the client's
fallback media type or 406). Imported once at start-up; nothing here changes afterwards.

The interfaces the router calls:
- patch.PATCH_CONTENT_TYPES: frozenset[str]
- patch.apply_patch(content_type, original: dict, patch: bytes, descriptor) -> dict, raising
  tinykube.errors.BadRequestError / InvalidError; `descriptor` is the kind's message
  DESCRIPTOR, or None for autoscaling/v1 Scale (which the router patches only as JSON patch
  or merge patch: Scale has no lists, so a strategic merge patch of it is a merge patch).
- openapi.OpenAPI(kinds: Sequence[KindInfo]) with v2_json() -> bytes, v3_index() -> bytes
  and v3_document(path) -> bytes | None for paths "api/v1", "apis/apps/v1".
- tables.column_definitions(info) -> list[dict]
- tables.table(info, objects, *, resource_version, continue_token, include_object, now)
  -> dict (a meta.k8s.io/v1 Table).
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType

log = logging.getLogger(__name__)


def optional_module(name: str) -> ModuleType | None:
    """`apiserver.rest.<name>` if it exists, else None (a missing module, not a broken one:
    an ImportError raised inside the module propagates)."""
    full = f"apiserver.rest.{name}"
    try:
        return importlib.import_module(full)
    except ModuleNotFoundError as exc:
        if exc.name != full:
            raise
        log.info("REST API: %s is not available yet", full)
        return None
