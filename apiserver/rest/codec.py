"""The REST front end's codec: Kubernetes JSON (and YAML) to and from tinykube's messages.

Objects are printed by `tinykube.manifest.to_dict`'s rules (int64 as numbers, map keys sorted,
empty fields left out) with `kind` and `apiVersion` first, as kube-apiserver writes them; lists
and watch events are assembled from each object's JSON bytes, so the watch cache encodes an
object version once (`KindCodec` is its `JsonEncoder`) and every LIST and REST watcher shares
the bytes. Request bodies are JSON or YAML (or Kubernetes protobuf, which kubeproto.py turns
into the same JSON dict); unknown fields are refused, reported or dropped as `fieldValidation`
asks, with the field paths Kubernetes prints. Media types (Accept and Content-Type) are parsed
and negotiated here too (a protobuf answer is encoded from the JSON by kubeproto.py). Pure
functions and immutable objects.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml
from google.protobuf.message import Message

from apiserver import configdata
from tinykube.errors import BadRequestError
from tinykube.kinds import KindInfo
from tinykube.manifest import ManifestError, load_document, parse_as, to_dict

JSON = "application/json"
YAML = "application/yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
TABLE_GROUP = "meta.k8s.io"
# Request body types for create and update.
BODY_TYPES = (JSON, YAML)
# What kube-apiserver names in 415/406 answers.
ACCEPTED_TYPES = [JSON, YAML, PROTOBUF]


def dumps(data: Any) -> bytes:
    """Compact JSON, as kube-apiserver sends it."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


class KindCodec:
    """One kind's objects as Kubernetes JSON (the watch cache's JsonEncoder)."""

    def __init__(
        self, info: KindInfo, unknown_fields: Callable[[dict[str, Any]], list[str]] | None = None
    ) -> None:
        self.info = info
        # A custom kind's schema pruning: the paths of the fields it would drop (in place).
        self.unknown_fields = unknown_fields
        self._head = {"kind": info.kind, "apiVersion": info.api_version}
        self._list_head = (
            b'{"kind":"'
            + info.kind.encode()
            + b'List","apiVersion":"'
            + info.api_version.encode()
            + b'","metadata":'
        )

    def object_dict(self, obj: Message) -> dict[str, Any]:
        data = to_dict(obj)
        out: dict[str, Any] = dict(self._head)
        for key, value in data.items():
            if key not in ("kind", "apiVersion"):
                out[key] = value
        return out

    def object_json(self, obj: Message) -> bytes:
        return dumps(self.object_dict(obj))

    def bookmark_json(self, revision: int, annotations: dict[str, str] | None = None) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(revision)}
        if annotations:
            meta["annotations"] = annotations
        return dumps({**self._head, "metadata": meta})

    def list_json(
        self,
        resource_version: str,
        items: list[bytes],
        continue_token: str = "",
        remaining: int | None = None,
    ) -> bytes:
        """`<Kind>List` from the items' JSON bytes, without re-encoding them."""
        head = self.list_head(resource_version, continue_token, remaining)
        return head + b",".join(items) + b"]}"

    def list_head(
        self, resource_version: str, continue_token: str = "", remaining: int | None = None
    ) -> bytes:
        """`list_json`'s bytes before the first item (`...,"items":[`); `]}` closes them."""
        meta: dict[str, Any] = {"resourceVersion": resource_version}
        if continue_token:
            meta["continue"] = continue_token
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        return self._list_head + dumps(meta) + b',"items":['

    def list_dict(
        self, resource_version: str, items: list[dict[str, Any]], continue_token: str = ""
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": resource_version}
        if continue_token:
            meta["continue"] = continue_token
        return {
            "kind": f"{self.info.kind}List",
            "apiVersion": self.info.api_version,
            "metadata": meta,
            "items": items,
        }

    def decode(
        self, doc: dict[str, Any], validation: str, *, patched: bool = False
    ) -> tuple[Message, list[str]]:
        """A request body (already parsed) as a message, and the warnings to send.

        `validation` is fieldValidation: Strict refuses unknown fields (400, Kubernetes'
        "strict decoding error"), Warn drops them with one warning each, Ignore drops them.
        A create or update body's strict error names the kind, as kube-apiserver's decoder
        does; a `patched` object's (the result of a PATCH) does not.
        """
        info = self.info
        api_version = doc.get("apiVersion")
        if api_version not in (None, "", info.api_version):
            raise BadRequestError(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({info.api_version})"
            )
        kind = doc.get("kind")
        if kind not in (None, "", info.kind):
            raise BadRequestError(
                f"the kind in the data ({kind}) does not match the expected kind ({info.kind})"
            )
        if info.kind in configdata.KINDS:
            doc = configdata.checked_json_body(info, doc)
        try:
            obj, unknown = parse_as(info, doc, drop_unknown=True)
        except ManifestError as exc:
            raise BadRequestError(f"{_cannot_handle(info)}: {exc}") from exc
        if self.unknown_fields is not None:
            unknown = [*unknown, *self.unknown_fields(copy.deepcopy(doc))]
        messages = [f'unknown field "{path}"' for path in unknown]
        if messages and validation == "Strict":
            error = "strict decoding error: " + ", ".join(messages)
            if not patched:
                error = f"{_cannot_handle(info)}: {error}"
            raise BadRequestError(error)
        return obj, messages if validation == "Warn" else []


def _cannot_handle(info: KindInfo) -> str:
    return f'{info.kind} in version "{info.version}" cannot be handled as a {info.kind}'


def parse_body(body: bytes, media_type: str) -> Any:
    """A JSON or YAML request body as plain data; malformed input is a 400 with its position."""
    if not body.strip():
        raise BadRequestError("the request body is empty; an object is required")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequestError(f"the request body is not UTF-8: byte {exc.start}") from None
    if media_type == YAML:
        try:
            return load_document(text)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            raise BadRequestError(
                f"error converting YAML to JSON: yaml: {where}{exc.problem or exc}"
            ) from None
        except yaml.YAMLError as exc:
            raise BadRequestError(f"error converting YAML to JSON: yaml: {exc}") from None
        except RecursionError:
            raise BadRequestError(_TOO_DEEP.format("YAML")) from None
    try:
        return json.loads(text, parse_constant=_not_json, parse_float=_finite_float)
    except _NotJsonNumber as exc:
        raise BadRequestError(f"couldn't get version/kind; json parse error: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BadRequestError(
            f"couldn't get version/kind; json parse error: {exc.msg} at line {exc.lineno}, "
            f"column {exc.colno} (offset {exc.pos})"
        ) from None
    except ValueError:  # the only other ValueError: an integer past the parser's digit limit
        raise BadRequestError(
            "couldn't get version/kind; json parse error: a number has too many digits"
        ) from None
    except RecursionError:
        raise BadRequestError(_TOO_DEEP.format("JSON")) from None


class _NotJsonNumber(ValueError):
    pass


def _not_json(literal: str) -> Any:
    """Python's parser takes NaN and Infinity; JSON (and Go's parser) has neither."""
    raise _NotJsonNumber(f"invalid character {literal[0]!r} looking for beginning of value")


def _finite_float(text: str) -> float:
    """A JSON number; one past a double (1e400) fits no Kubernetes field, as Go's parser says."""
    value = float(text)
    if math.isinf(value):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise _NotJsonNumber(f"cannot unmarshal number {shown}: it is out of range")
    return value


# A body nested deeper than the parser's recursion limit (a hostile one: objects kubectl
# sends are a few dozen levels deep).
_TOO_DEEP = "couldn't get version/kind; {} parse error: the document is nested too deeply"


def parse_object_body(body: bytes, media_type: str) -> dict[str, Any]:
    data = parse_body(body, media_type)
    if not isinstance(data, dict):
        raise BadRequestError(f"the request body must be an object, got {_json_type(data)}")
    return data


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null" if value is None else type(value).__name__


# ---- media types ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MediaType:
    """`type/subtype;k=v;...` with lower-cased type and parameter names."""

    type: str
    params: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return ";".join([self.type, *(f"{k}={v}" for k, v in self.params.items())])


def parse_media_type(text: str) -> MediaType:
    parts = [p.strip() for p in text.split(";")]
    params: dict[str, str] = {}
    for part in parts[1:]:
        if "=" in part:
            key, _, value = part.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
    return MediaType(parts[0].lower(), params)


def parse_accept(header: str) -> list[MediaType]:
    """The media ranges of an Accept header, in the client's order (q is ignored, as
    kube-apiserver's negotiation effectively does for the types it serves)."""
    return [parse_media_type(p) for p in header.split(",") if p.strip()]


# What a GET/LIST/WATCH answer is printed as.
AS_JSON = "json"
AS_YAML = "yaml"
AS_TABLE = "table"
# Kubernetes protobuf; "protobuf|json" (or "|yaml") when the client also takes that format,
# for an answer whose kind has no protobuf form (kube-apiserver's negotiation likewise).
AS_PROTOBUF = "protobuf"


def protobuf_fallback(fmt: str) -> str | None:
    """For a protobuf answer format: the format to send if the kind has no protobuf form
    (None: 406); for any other format, None."""
    if not fmt.startswith(AS_PROTOBUF):
        return None
    return fmt.partition("|")[2] or None


def negotiate(header: str, *, table: bool) -> str | None:
    """AS_JSON, AS_YAML, AS_TABLE or AS_PROTOBUF (with its fallback) for an Accept header;
    None if none is acceptable.

    `table` says whether a Table can be served here (a server-side printer exists).
    Conversions tinykube does not offer (PartialObjectMetadata, Table as protobuf) are
    skipped, so a client that lists a fallback (kubectl always adds plain JSON) gets that
    instead.
    """
    if not header.strip():
        return AS_JSON
    media_types = parse_accept(header)
    for i, media in enumerate(media_types):
        if media.type == PROTOBUF and "as" not in media.params:
            rest = ", ".join(str(m) for m in media_types[i + 1 :] if m.type != PROTOBUF)
            fallback = negotiate(rest, table=False) if rest else None
            return AS_PROTOBUF + (f"|{fallback}" if fallback else "")
        fmt = _negotiate_one(media, table=table)
        if fmt is not None:
            return fmt
    return None


def _negotiate_one(media: MediaType, *, table: bool) -> str | None:
    as_ = media.params.get("as")
    if as_ is not None:
        if (
            table
            and as_ == "Table"
            and media.params.get("g") == TABLE_GROUP
            and media.params.get("v") == "v1"
            and media.type in (JSON, "application/*", "*/*")
        ):
            return AS_TABLE
        return None
    if media.type in (JSON, "application/*", "*/*"):
        return AS_JSON
    if media.type == YAML:
        return AS_YAML
    return None


def content_type_of(header: str) -> str:
    """The bare media type of a Content-Type header ("" if absent)."""
    return parse_media_type(header).type if header.strip() else ""


def unknown_protobuf_fields(info: KindInfo, paths: list[str], validation: str) -> list[str]:
    """Fields of a protobuf body that no table names (a newer Kubernetes' field) under
    fieldValidation, as unknown JSON fields are: Strict refuses, Warn warns, Ignore drops."""
    messages = [f'unknown field "{path}"' for path in paths]
    if messages and validation == "Strict":
        raise BadRequestError(
            f"{_cannot_handle(info)}: strict decoding error: " + ", ".join(messages)
        )
    return messages if validation == "Warn" else []
