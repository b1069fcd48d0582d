"""ControllerRevisions (apps/v1): validation and the immutable data.

The DaemonSet controller records each template it rolls out as one. Pure functions.
"""

from __future__ import annotations

import json

from google.protobuf import json_format

from apiserver.registry.base import Strategy
from apiserver.validation import invalid, required
from tinykube.errors import FieldError
from tinykube.manifest import whole_numbers
from tinykube.v1 import controllerrevision_pb2

_NONNEGATIVE = "must be greater than or equal to 0"


def validate_controller_revision(cr: controllerrevision_pb2.ControllerRevision) -> list[FieldError]:
    """ValidateControllerRevision (the metadata is checked by the caller)."""
    errs: list[FieldError] = []
    if not cr.HasField("data"):
        errs.append(required("data", "data is mandatory"))
    if cr.revision < 0:
        errs.append(invalid("revision", cr.revision, _NONNEGATIVE))
    return errs


Revision = controllerrevision_pb2.ControllerRevision


class ControllerRevisionStrategy(Strategy[Revision]):
    def check(self, obj: Revision) -> list[FieldError]:
        return validate_controller_revision(obj)

    def check_update(self, new: Revision, old: Revision) -> list[FieldError]:
        if new.data != old.data:
            shown = json.dumps(whole_numbers(json_format.MessageToDict(new.data)), sort_keys=True)
            return [FieldError("data", f"Invalid value: {shown}: field is immutable")]
        return []
