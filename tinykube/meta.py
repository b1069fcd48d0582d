"""Field helpers for the few Kubernetes API shapes protobuf's Python classes cannot spell plainly.

- `continue`, the list-paging token of ListMeta and ListRequest, is a Python keyword: the
  generated attribute exists only through getattr/setattr.
- IntOrString fields (ServicePort.targetPort) are `google.protobuf.Value`s, so that their JSON
  is a number or a string as in Kubernetes; these helpers read and write them as `int | str`.
- Kubernetes' metav1.Time has whole seconds (RFC 3339, `2026-12-01T10:00:00Z`); `timestamp`
  truncates so that every time the API prints has that form.
- generateName's suffix (`generate_name`) and the integers controllers keep in annotations
  (`annotation_int`), as Kubernetes spells them.

Pure functions, no state (but `generate_name`'s randomness).
"""

from __future__ import annotations

import calendar
import secrets
from collections.abc import Mapping
from datetime import datetime

from google.protobuf.struct_pb2 import Value
from google.protobuf.timestamp_pb2 import Timestamp

from tinykube.v1 import meta_pb2

CONTINUE = "continue"


def get_continue(msg: meta_pb2.ListMeta | meta_pb2.ListRequest) -> str:
    """The `continue` token of a list or a list request ("" when not set)."""
    return str(getattr(msg, CONTINUE))


def set_continue(msg: meta_pb2.ListMeta | meta_pb2.ListRequest, token: str) -> None:
    setattr(msg, CONTINUE, token)


def list_request(
    *,
    namespace: str = "",
    label_selector: str = "",
    field_selector: str = "",
    limit: int = 0,
    continue_token: str = "",
    resource_version: str = "",
) -> meta_pb2.ListRequest:
    """A ListRequest, `continue` included."""
    request = meta_pb2.ListRequest(
        namespace=namespace,
        labelSelector=label_selector,
        fieldSelector=field_selector,
        limit=limit,
        resourceVersion=resource_version,
    )
    if continue_token:
        set_continue(request, continue_token)
    return request


# ---- IntOrString ----------------------------------------------------------------------------


def int_or_string(value: Value) -> int | str | None:
    """The IntOrString a Value holds: an int for a whole number, the text for a string, None when
    unset (or JSON null). Anything else (a fraction, a bool, a list, an object) is returned as
    None too; validation refuses those before they are stored."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        number = value.number_value
        if number.is_integer():
            return int(number)
    return None


def int_or_string_value(value: int | str) -> Value:
    """A Value holding an IntOrString."""
    out = Value()
    set_int_or_string(out, value)
    return out


def set_int_or_string(target: Value, value: int | str) -> None:
    if isinstance(value, str):
        target.string_value = value
    else:
        target.number_value = value


def int_or_string_problem(value: Value) -> str | None:
    """Why a set Value is not an IntOrString ("" means it is one), for validation messages."""
    kind = value.WhichOneof("kind")
    if kind is None or kind == "string_value":
        return None
    if kind == "number_value":
        number = value.number_value
        if not number.is_integer():
            return "must be an integer or a string"
        return None
    return "must be an integer or a string"


# ---- timestamps -----------------------------------------------------------------------------


def timestamp(when: datetime) -> Timestamp:
    """A Timestamp of `when` (naive means UTC) in whole seconds, as Kubernetes' metav1.Time."""
    ts = Timestamp()
    set_timestamp(ts, when)
    return ts


def set_timestamp(target: Timestamp, when: datetime) -> None:
    """`when` to the whole second (as metav1.Time); a naive `when` is UTC. Set directly, not
    with Timestamp.FromDatetime, which costs 2.5x as much on every create and bind."""
    if when.tzinfo is None:
        target.seconds = calendar.timegm(when.timetuple())
    else:
        target.seconds = int(when.replace(microsecond=0).timestamp())
    target.nanos = 0


# Kubernetes' generateName alphabet (k8s.io/apimachinery's rand: no vowels, so no words, and no
# easily confused characters); a generated name is the base plus 5 of them.
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
GENERATED_LENGTH = 5


def generate_name(base: str) -> str:
    """generateName + 5 random characters, as Kubernetes' name generator does."""
    base = base[: 63 - GENERATED_LENGTH]
    return base + "".join(secrets.choice(NAME_ALPHABET) for _ in range(GENERATED_LENGTH))


def annotation_int(annotations: Mapping[str, str], key: str) -> int | None:
    """The integer an annotation holds (a revision, a template generation, a replica count);
    None when it is absent or not a number."""
    text = annotations.get(key)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None
