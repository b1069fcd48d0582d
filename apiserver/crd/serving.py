"""Custom objects served through the same store as the built-in kinds.

A custom kind is built at run time from its CRD (kube's customresource_handler.go builds a
REST storage per CRD the same way): `custom_kind(crd)` makes a `KindInfo` whose message is a
protobuf type made for it (`tinykube.custom.g<N>.<Kind>`: apiVersion, kind, metadata as the
built-in kinds' ObjectMeta, and every other top-level property of the schema, `spec` and
`status` included, as a google.protobuf.Value holding any JSON). Because it is a message like
any other, the generic machinery works unchanged over it: the store's one write pipeline
(`ResourceStore.guaranteed_update`: dry run, preconditions, finalizers, graceful deletion,
managedFields, compare-and-swap), the watch cache, label and field selectors, pagination,
the REST handlers (JSON and merge patches; strategic merge is refused with 415 as kube does),
discovery and RBAC by group and resource.

What differs is here:
- `CustomResourceStore` keeps the object's JSON in etcd (as kube does for custom objects),
  under kube's key shape `/registry/<group>/<plural>/[<namespace>/]<name>`, so the message
  type built for a changed schema reads what an older one wrote;
- `CustomResourceStrategy`: pruning and defaulting from the schema on every write, validation
  against the schema (apiserver/crd/schema.py) and its x-kubernetes-validations
  (apiserver/crd/cel.py: transition rules see the old object on update), and the status
  subresource (status writes change only the status, other writes keep the stored status;
  without the subresource the status is an ordinary field);
- `CustomResources` keeps the served kinds in step with the Established CRDs (called by the
  CRD controller after each pass, on every apiserver).

Every served version has its own kind (its schema, subresources and printer columns) and store
over the same etcd keys; objects are stored with the storage version's apiVersion and, as with
kube's conversion strategy None, only the apiVersion differs between versions.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    json_format,
    message_factory,
    struct_pb2,
)
from google.protobuf.message import Message

from apiserver import fieldmanager
from apiserver.crd import cel
from apiserver.crd import schema as crdschema
from apiserver.registry.base import Strategy
from apiserver.registry.customresourcedefinition import (
    is_established,
    schema_dict,
    storage_version,
)
from apiserver.requestcontext import RequestContext
from apiserver.resources import ResourceStore
from apiserver.storage import KV
from apiserver.watchcache import CachedObject, Codec
from tinykube.errors import FieldError, UnimplementedError
from tinykube.kinds import KindInfo, PrinterColumn, Scale
from tinykube.manifest import CUSTOM_PREFIX, UNKNOWN_FIELDS, custom_body, to_dict
from tinykube.v1 import apiextensions_pb2, meta_pb2

log = logging.getLogger(__name__)

CRD = apiextensions_pb2.CustomResourceDefinition
_HEAD = ("apiVersion", "kind", "metadata")
_builds = itertools.count(1)
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
# Loaded into the default pool before any custom type refers to them.
_DEPENDENCIES = (meta_pb2.DESCRIPTOR.name, struct_pb2.DESCRIPTOR.name)
CUSTOM_PACKAGE = CUSTOM_PREFIX.rstrip(".")


def _top_level(schema: dict[str, Any], has_status: bool) -> list[str]:
    props = [p for p in (schema.get("properties") or {}) if p not in _HEAD]
    if has_status and "status" not in props:
        props.append("status")
    return sorted(props)


@dataclass(frozen=True)
class _Types:
    message: type[Message]
    list_message: type[Message]
    watch_event: type[Message]
    create_request: type[Message]


def _message_types(kind: str, props: list[str], keep_unknown: bool = False) -> _Types:
    """Protobuf types for one custom kind, in a package of their own (a new one per build, so
    a changed schema never collides with the old types). `keep_unknown` (the schema's root has
    x-kubernetes-preserve-unknown-fields): a Struct field, UNKNOWN_FIELDS, holds the top-level
    fields the schema does not name (tinykube/manifest.py fills it and spreads it back)."""
    package = f"{CUSTOM_PACKAGE}.g{next(_builds)}"
    fdp = descriptor_pb2.FileDescriptorProto(
        name=package.replace(".", "/") + ".proto", package=package, syntax="proto3"
    )
    fdp.dependency.extend(_DEPENDENCIES)
    f = descriptor_pb2.FieldDescriptorProto
    string, msg = f.TYPE_STRING, f.TYPE_MESSAGE
    optional, repeated = f.LABEL_OPTIONAL, f.LABEL_REPEATED
    obj = fdp.message_type.add(name=kind)
    obj.field.add(name="apiVersion", json_name="apiVersion", number=1, type=string, label=optional)
    obj.field.add(name="kind", json_name="kind", number=2, type=string, label=optional)
    obj.field.add(
        name="metadata", json_name="metadata", number=3, type=msg, label=optional,
        type_name=".tinykube.v1.ObjectMeta",
    )  # fmt: skip
    for i, prop in enumerate(props):
        name = prop if prop.isidentifier() else "f_" + _NOT_IDENTIFIER.sub("_", prop)
        obj.field.add(
            name=name, json_name=prop, number=4 + i, type=msg, label=optional,
            type_name=".google.protobuf.Value",
        )  # fmt: skip
    if keep_unknown and UNKNOWN_FIELDS not in props:
        obj.field.add(
            name=UNKNOWN_FIELDS, json_name=UNKNOWN_FIELDS, number=4 + len(props), type=msg,
            label=optional, type_name=".google.protobuf.Struct",
        )  # fmt: skip
    full = f".{package}.{kind}"
    lst = fdp.message_type.add(name=f"{kind}List")
    lst.field.add(
        name="metadata", json_name="metadata", number=1, type=msg, label=optional,
        type_name=".tinykube.v1.ListMeta",
    )  # fmt: skip
    lst.field.add(
        name="items", json_name="items", number=2, type=msg, label=repeated, type_name=full
    )
    event = fdp.message_type.add(name=f"{kind}WatchEvent")
    event.field.add(name="type", json_name="type", number=1, type=string, label=optional)
    event.field.add(
        name="object", json_name="object", number=2, type=msg, label=optional, type_name=full
    )
    request = fdp.message_type.add(name=f"{kind}Request")
    request.field.add(
        name="object", json_name="object", number=1, type=msg, label=optional, type_name=full
    )
    request.field.add(name="dryRun", json_name="dryRun", number=2, type=string, label=repeated)
    pool = descriptor_pool.Default()
    pool.Add(fdp)

    def cls(name: str) -> type[Message]:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))

    return _Types(cls(kind), cls(f"{kind}List"), cls(f"{kind}WatchEvent"), cls(f"{kind}Request"))


def _version(crd: CRD, name: str = "") -> apiextensions_pb2.CustomResourceDefinitionVersion:
    """The version called `name` (default: the storage version)."""
    name = name or storage_version(crd)
    return next(v for v in crd.spec.versions if v.name == name)


_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(name: str) -> tuple[int, int, int, str]:
    """kube's version ordering (discovery lists the preferred version first): GA before beta
    before alpha, higher numbers first, then versions not shaped like Kubernetes' by name."""
    m = _KUBE_VERSION.match(name)
    if m is None:
        return (3, 0, 0, name)
    level = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (level, -int(m.group(1)), -int(m.group(3) or 0), name)


def served_versions(crd: CRD) -> list[str]:
    """The CRD's served versions, preferred first."""
    return sorted((v.name for v in crd.spec.versions if v.served), key=version_priority)


def deprecation_warning(crd: CRD, name: str) -> str:
    """What kube warns on each request of a deprecated version: its deprecationWarning, or
    "<group>/<version> <Kind> is deprecated" naming a preferred served version to use."""
    version = _version(crd, name)
    if not version.deprecated:
        return ""
    if version.HasField("deprecationWarning"):
        return version.deprecationWarning
    group, kind = crd.spec.group, crd.status.acceptedNames.kind or crd.spec.names.kind
    text = f"{group}/{name} {kind} is deprecated"
    for other in served_versions(crd):
        if other != name and not _version(crd, other).deprecated:
            if version_priority(other) < version_priority(name):
                text += f"; use {group}/{other} {kind}"
            break
    return text


def store_key(info: KindInfo) -> str:
    """How the apiserver's store table names a custom kind's version (built-in kinds are named
    by kind; custom ones may share a kind across versions and groups)."""
    return info.service


def _scale(version: apiextensions_pb2.CustomResourceDefinitionVersion) -> Scale | None:
    if not version.subresources.HasField("scale"):
        return None
    paths = version.subresources.scale
    return Scale(paths.specReplicasPath, paths.statusReplicasPath, paths.labelSelectorPath)


def custom_kind(crd: CRD, version_name: str = "") -> KindInfo:
    """The served kind of one of `crd`'s versions (default: the storage version), with the
    CRD's accepted names."""
    version = _version(crd, version_name)
    names = crd.status.acceptedNames
    has_status = version.subresources.HasField("status")
    schema = schema_dict(version)
    keeps_unknown = schema.get("x-kubernetes-preserve-unknown-fields") is True
    types = _message_types(names.kind, _top_level(schema, has_status), keeps_unknown)
    # Server-side apply and managedFields follow the schema's list and map types.
    fieldmanager.register_custom_schema(
        types.message.DESCRIPTOR, schema, keeps_unknown=keeps_unknown
    )
    shorts = tuple(names.shortNames)
    return KindInfo(
        kind=names.kind,
        plural=names.plural,
        namespaced=crd.spec.scope == "Namespaced",
        message=types.message,
        list_message=types.list_message,
        watch_event=types.watch_event,
        create_request=types.create_request,
        update_request=types.create_request,
        request_field="object",
        service=f"{CUSTOM_PACKAGE}/{crd.spec.group}/{version.name}/{names.kind}",
        stub=object,  # no gRPC service of its own (the CustomResources service is generic)
        add_servicer=None,
        has_status=has_status,
        short_names=(*shorts, names.singular) if names.singular else shorts,
        group=crd.spec.group,
        version=version.name,
        categories=tuple(names.categories),
        subresources=(),
        scale=_scale(version),
        printer_columns=tuple(
            PrinterColumn(
                c.name,
                c.type,
                c.jsonPath,
                format=c.format,
                description=c.description,
                priority=c.priority,
            )
            for c in version.additionalPrinterColumns
        ),
        custom=True,
    )


def object_dict(obj: Message) -> dict[str, Any]:
    """A custom object as JSON (whole numbers as integers)."""
    return to_dict(obj, zero_fields=False)


def from_dict(message: type[Message], data: dict[str, Any]) -> Message:
    """A custom object from its JSON (tinykube/manifest.py's custom_body: integers beyond 2^53
    stay exact, unknown top-level fields are kept if the kind keeps them, else dropped)."""
    obj = message()
    desc = obj.DESCRIPTOR
    known = {f.json_name for f in desc.fields}
    body = custom_body(desc, data)
    json_format.ParseDict({k: v for k, v in body.items() if k in known}, obj)
    return obj


class CustomResourceStrategy(Strategy[Message]):
    """kube's customResourceStrategy: the schema's pruning, defaults and validation, the CEL
    rules, the status subresource."""

    def __init__(self, info: KindInfo, crd: CRD) -> None:
        super().__init__(info)
        version = _version(crd, info.version)
        self.schema = schema_dict(version)
        self.selectable = tuple(s.jsonPath.lstrip(".") for s in version.selectableFields)
        self.compiled = crdschema.compile_schema(self.schema) if self.schema else None
        self.rules = cel.compile_rules(self.schema, "")[0] if self.schema else None

    def _shape(self, obj: Message) -> None:
        """Prune and default `obj` in place (through its JSON)."""
        if self.compiled is None:
            return
        data = object_dict(obj)
        self.compiled.prune(data)
        self.compiled.default(data)
        obj.Clear()
        obj.MergeFrom(from_dict(type(obj), data))

    def unknown_fields(self, data: dict[str, Any]) -> list[str]:
        """The paths pruning drops from a request body (`data` is changed): what
        fieldValidation Strict refuses and Warn warns about."""
        return [] if self.compiled is None else self.compiled.prune(data)

    def decode_defaults(self, obj: Message) -> None:
        # kube's decoder for custom resources prunes and defaults from the structural schema.
        self._shape(obj)

    def default(self, obj: Message, now: datetime) -> None:
        if self.info.has_status:
            # kube's PrepareForCreate: the status is the status subresource's to write.
            obj.ClearField("status")
        self._shape(obj)

    def on_update(self, new: Message, old: Message) -> None:
        self._shape(new)

    def prepare_for_update(self, new: Message, old: Message) -> None:
        """kube's customResourceStrategy: any change besides metadata (and the status, with
        the status subresource) bumps metadata.generation, not only a spec change."""
        super().prepare_for_update(new, old)
        meta, old_meta = new.metadata, old.metadata  # type: ignore[attr-defined]
        if meta.generation != old_meta.generation:
            return
        skip = {"apiVersion", "kind", "metadata", *(("status",) if self.info.has_status else ())}
        for field in new.DESCRIPTOR.fields:
            if field.name in skip:
                continue
            if getattr(new, field.name) != getattr(old, field.name):
                meta.generation = old_meta.generation + 1
                return

    def on_status_update(self, merged: Message, new: Message) -> None:
        self._shape(merged)

    def _problems(self, new: Message, old: Message | None) -> list[FieldError]:
        errs: list[FieldError] = []
        data = object_dict(new)
        if self.compiled is not None:
            errs.extend(self.compiled.validate(data))
        if self.rules is not None:
            errs.extend(self.rules.validate(data, None if old is None else object_dict(old)))
        return errs

    def check(self, obj: Message) -> list[FieldError]:
        return self._problems(obj, None)

    def check_updated(self, new: Message, old: Message) -> list[FieldError]:
        return self._problems(new, old)

    def check_status(self, new: Message, old: Message) -> list[FieldError]:
        return self.validate_generic(new) + self._problems(new, old)

    def fields(self, obj: Message) -> dict[str, str]:
        out = super().fields(obj)
        if self.selectable:
            data = object_dict(obj)
            for path in self.selectable:
                value: Any = data
                for part in path.split("."):
                    value = value.get(part) if isinstance(value, dict) else None
                if value is not None and not isinstance(value, dict | list):
                    out[path] = json.dumps(value) if isinstance(value, bool) else str(value)
                else:
                    out[path] = ""
        return out


class JsonCodec(Codec):
    """A custom kind's watch-cache codec: its objects are JSON in etcd."""

    def decode(self, key: bytes, value: bytes, revision: int) -> CachedObject:
        obj = from_dict(self.message, json.loads(value))
        return super().decode(key, obj.SerializeToString(), revision)


class CustomResourceStore(ResourceStore):
    """A custom kind's store: the object's JSON in etcd, everything else the generic store's.
    While its CRD is being deleted (`terminating`) creates are refused, as kube's."""

    terminating = False
    # The apiVersion objects are stored with (the CRD's storage version; conversion None
    # changes only the apiVersion between versions).
    storage_api_version = ""
    # kube's Warning header on every request of a deprecated version ("" when not deprecated).
    deprecation_warning = ""

    async def _create(self, obj: Message, ctx: RequestContext) -> Message:
        if self.terminating:
            raise UnimplementedError(
                "create not allowed while custom resource definition is terminating"
            )
        return await super()._create(obj, ctx)

    def _decode(self, kv: KV) -> Message:
        obj = from_dict(self.info.message, json.loads(kv.value))
        obj.metadata.resourceVersion = str(kv.mod_revision)  # type: ignore[attr-defined]
        return obj

    def _stored_value(self, obj: Message) -> bytes:
        # The size check of the generic store, then the JSON kube would store.
        super()._stored_value(obj)
        data = object_dict(obj)
        data.get("metadata", {}).pop("resourceVersion", None)
        data["apiVersion"] = self.storage_api_version or self.info.api_version
        data["kind"] = self.info.kind
        return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


@dataclass
class Served:
    """One served custom kind and the CRD state it was built from."""

    crd_uid: str
    signature: str
    # One per served version, preferred first; `storage` is the storage version's.
    stores: list[CustomResourceStore]
    tasks: list[asyncio.Task[None]]
    storage: CustomResourceStore


def signature(crd: CRD) -> str:
    """What, when it changes, makes the served kind be rebuilt."""
    return (
        crd.spec.SerializeToString(deterministic=True).hex()
        + crd.status.acceptedNames.SerializeToString(deterministic=True).hex()
    )


def should_serve(crd: CRD) -> bool:
    return is_established(crd) and bool(crd.status.acceptedNames.kind)


class CustomResources:
    """The custom kinds this apiserver serves, kept in step with the CRDs.

    `make_store(info, crd)` builds and starts a store (its watch cache running) and
    `register`/`unregister` publish it to the front ends: the caller (apiserver/app.py) owns
    those. Keyed by the CRD's name."""

    def __init__(
        self,
        make_store: Callable[[KindInfo, CRD], tuple[CustomResourceStore, asyncio.Task[None]]],
        publish: Callable[[dict[str, CustomResourceStore]], None],
        builtin_kinds: frozenset[str],
    ) -> None:
        self.make_store = make_store
        self.publish = publish
        self.builtin_kinds = builtin_kinds
        self.served: dict[str, Served] = {}

    def stores(self) -> list[CustomResourceStore]:
        """The stores of the kinds served now."""
        return [store for s in self.served.values() for store in s.stores]

    def lookup(self, group: str, version: str, plural: str) -> ResourceStore | None:
        """The store serving `plural` in `group`/`version`, if one does."""
        for store in self.stores():
            info = store.info
            if (info.group, info.version, info.plural) == (group, version, plural):
                return store
        return None

    def store_of(self, crd_name: str) -> CustomResourceStore | None:
        served = self.served.get(crd_name)
        return None if served is None else served.storage

    def sync(self, crds: list[CRD]) -> None:
        wanted = {c.metadata.name: c for c in crds if should_serve(c)}
        changed = False
        for name in list(self.served):
            crd = wanted.get(name)
            served = self.served[name]
            if (
                crd is None
                or crd.metadata.uid != served.crd_uid
                or signature(crd) != served.signature
            ):
                for store in served.stores:
                    store.cache.stop_error = None  # its watches end cleanly, not UNAVAILABLE
                for task in served.tasks:
                    task.cancel()
                del self.served[name]
                changed = True
        for name, crd in wanted.items():
            if name in self.served:
                continue
            if crd.status.acceptedNames.kind in self.builtin_kinds:
                log.warning(
                    "CRD %s: kind %s is a built-in kind's name; not served",
                    name,
                    crd.status.acceptedNames.kind,
                )
                continue
            stores, tasks = [], []
            storage = storage_version(crd)
            for version in served_versions(crd):
                store, task = self.make_store(custom_kind(crd, version), crd)
                store.storage_api_version = f"{crd.spec.group}/{storage}"
                store.deprecation_warning = deprecation_warning(crd, version)
                stores.append(store)
                tasks.append(task)
            if not stores:
                continue
            by_version = {s.info.version: s for s in stores}
            self.served[name] = Served(
                crd.metadata.uid,
                signature(crd),
                stores,
                tasks,
                by_version.get(storage, stores[0]),
            )
            changed = True
        if changed:
            self.publish({store_key(s.info): s for s in self.stores()})

    async def stop(self) -> None:
        for served in self.served.values():
            for task in served.tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self.served.clear()
