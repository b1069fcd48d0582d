"""The generic part of every kind's strategy, as kube's `rest.RESTCreateStrategy` and friends.

`Strategy[M]` is what the store calls between its etcd read and its compare-and-swap write:
server-owned metadata on create, what Update keeps (metadata the server owns, the stored
status) and what UpdateStatus keeps (everything but the status), a spec change bumping
metadata.generation, the metadata and JSON-printability checks every kind gets, and the
selectable fields of field selectors. A kind's module subclasses it with the kind's message
as `M` and overrides only the hooks it needs (`default`, `on_update`, `on_status_update`,
`check`, `check_update`, `check_updated`, `check_status`, `fields`, `name_problems`). The
public methods take any `Message`, as the store holds them, and narrow it to `M` in one place
(`typed`).

Pure functions of their arguments, run once per write attempt; no I/O, no shared state.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from datetime import datetime
from typing import ClassVar, Generic, Protocol, TypeVar

from google.protobuf.message import Message

from apiserver import validation
from tinykube.errors import FieldError
from tinykube.kinds import KindInfo
from tinykube.meta import set_timestamp
from tinykube.v1 import meta_pb2

M = TypeVar("M", bound=Message)

# Fields every kind supports in field selectors.
META_FIELDS = ("metadata.name", "metadata.namespace")


class _Object(Protocol):
    """What every kind's message has: its type header and metadata."""

    apiVersion: str
    kind: str

    @property
    def metadata(self) -> meta_pb2.ObjectMeta: ...


def header(obj: Message) -> _Object:
    """`obj`'s apiVersion, kind and metadata, typed (every kind's message has them)."""
    return obj  # type: ignore[return-value]  # (cast() is a call; this runs per request)


def part(obj: Message, name: str) -> Message:
    """A message field of `obj` that the kind may or may not have ("spec", "status")."""
    field: Message = getattr(obj, name)
    return field


class Strategy(ABC, Generic[M]):
    """Create, update and status-update rules of one kind (the generic ones here). Abstract:
    every kind says what it validates (`check`), if only that nothing is particular to it."""

    # The field selector keys the kind supports (kube's SelectableFields / GetAttrs).
    selectable_fields: ClassVar[tuple[str, ...]] = META_FIELDS
    # The field selector term the watch cache indexes watchers by, if any.
    index_field: ClassVar[str | None] = None
    # Whether a create drops the client's status (the kind's controller or kubelet owns it).
    reset_status_on_create: ClassVar[bool] = False

    def __init__(self, info: KindInfo, *, default_grace_seconds: int = 30) -> None:
        self.info = info
        self.default_grace_seconds = default_grace_seconds
        self._message = info.message
        self._has_spec = "spec" in info.message.DESCRIPTOR.fields_by_name

    def typed(self, obj: Message) -> M:
        """`obj` as the kind's message (the one place a `Message` is narrowed to `M`)."""
        if type(obj) is not self._message:
            raise TypeError(f"{self.info.kind} strategy given a {type(obj).__name__}")
        return obj  # type: ignore[return-value]  # (cast() is a call; this runs per request)

    # ---- hooks a kind overrides ----------------------------------------------------------------

    def default(self, obj: M, now: datetime) -> None:
        """The kind's defaults on create, after the generic metadata is set."""

    def default_created(self, obj: M, now: datetime) -> None:
        """`default` for an object the store already gave its decode-time defaults and that
        nothing but the built-in admission plugins changed since (they set whole fields, as
        kube's do; only a mutating webhook's object is decoded, so defaulted, again). A kind
        whose `default` repeats `decode_defaults` overrides this to skip the repeat: a pod's
        spec walked twice per create was measurable (bench/opcost.py)."""
        self.default(obj, now)

    def decode_defaults(self, obj: M) -> None:
        """The kind's defaulting functions (kube's SetDefaults_<Kind>), which kube-apiserver
        applies when it decodes a request body, so mutating admission already sees them.
        The store applies them to a create's or update's object before admission; `default`
        and `on_update` apply them again to what admission made (as kube defaults a mutating
        webhook's patched object)."""

    def on_update(self, new: M, old: M) -> None:
        """The kind's defaults and carried-over fields on update, before the generation bump."""

    def on_status_update(self, merged: M, new: M) -> None:
        """What an UpdateStatus takes from `new` besides the status."""

    @abstractmethod
    def check(self, obj: M) -> list[FieldError]:
        """What is wrong with `obj` as it would be stored, beyond metadata."""

    def check_update(self, new: M, old: M) -> list[FieldError]:
        """What may not change between `old` and `new`, beyond name and namespace."""
        return []

    def check_updated(self, new: M, old: M) -> list[FieldError]:
        """The kind's checks of an update's result: by default `check`, then `check_update`
        (a kind whose kube validation checks the changes first says so here)."""
        return self.check(new) + self.check_update(new, old)

    def check_status(self, new: M, old: M) -> list[FieldError]:
        """What is wrong after an UpdateStatus: by default the whole object is checked."""
        return self.validate_object(new)

    def fields(self, obj: M) -> dict[str, str]:
        """The values of `selectable_fields` for `obj`."""
        meta = header(obj).metadata
        return {"metadata.name": meta.name, "metadata.namespace": meta.namespace}

    def name_problems(self, path: str, name: str) -> list[FieldError]:
        """kube's ValidateNameFunc of the kind: a DNS subdomain unless the kind says."""
        return validation.dns1123_subdomain(path, name)

    # ---- decoding ------------------------------------------------------------------------------

    def set_defaults(self, obj: Message) -> None:
        """Apply the kind's decode-time defaults (`decode_defaults`) to `obj` in place."""
        self.decode_defaults(self.typed(obj))

    # ---- create --------------------------------------------------------------------------------

    def prepare_for_create(self, obj: Message, now: datetime, *, defaulted: bool = False) -> None:
        """Fill server-owned metadata and defaults in place. `defaulted`: `obj` has had its
        decode-time defaults since anything but built-in admission changed it
        (`default_created`)."""
        head = header(obj)
        head.apiVersion = self.info.api_version
        head.kind = self.info.kind
        meta = head.metadata
        meta.uid = str(uuid.uuid4())
        meta.resourceVersion = ""
        meta.generation = 1
        set_timestamp(meta.creationTimestamp, now)
        meta.ClearField("deletionTimestamp")
        meta.ClearField("deletionGracePeriodSeconds")
        if not self.info.namespaced:
            meta.namespace = ""
        if self.reset_status_on_create:
            obj.ClearField("status")
        if defaulted:
            self.default_created(self.typed(obj), now)
        else:
            self.default(self.typed(obj), now)

    def canonicalize(self, obj: Message) -> None:
        """What depends on the final name (a generateName create names the object after
        prepare_for_create)."""

    def validate_generic(self, obj: M) -> list[FieldError]:
        """The checks every kind gets: metadata, and times and numbers JSON can print."""
        errs = validation.validate_metadata(
            header(obj).metadata, namespaced=self.info.namespaced, name_problems=self.name_problems
        )
        errs.extend(validation.printable("", obj))
        return errs

    def validate_object(self, obj: M) -> list[FieldError]:
        """Every problem with `obj` as it would be stored: the generic checks, then the kind's."""
        return self.validate_generic(obj) + self.check(obj)

    def validate_create(self, obj: Message) -> list[FieldError]:
        return self.validate_object(self.typed(obj))

    # ---- update --------------------------------------------------------------------------------

    def prepare_for_update(self, new: Message, old: Message) -> None:
        """Update: keep server-owned metadata and the stored status; a spec change bumps
        metadata.generation."""
        self._keep_server_metadata(new, old)
        if self.info.has_status:
            new.ClearField("status")
            part(new, "status").CopyFrom(part(old, "status"))
        self.on_update(self.typed(new), self.typed(old))
        if self._has_spec and part(new, "spec") != part(old, "spec"):
            header(new).metadata.generation = header(old).metadata.generation + 1

    def _keep_server_metadata(self, new: Message, old: Message) -> None:
        head = header(new)
        nm = head.metadata
        om = header(old).metadata
        head.apiVersion = self.info.api_version
        head.kind = self.info.kind
        nm.uid = om.uid
        nm.creationTimestamp.CopyFrom(om.creationTimestamp)
        nm.generation = om.generation
        nm.generateName = om.generateName
        # Deletion is driven by Delete, never by an Update.
        if om.HasField("deletionTimestamp"):
            nm.deletionTimestamp.CopyFrom(om.deletionTimestamp)
        else:
            nm.ClearField("deletionTimestamp")
        if om.HasField("deletionGracePeriodSeconds"):
            nm.deletionGracePeriodSeconds = om.deletionGracePeriodSeconds
        else:
            nm.ClearField("deletionGracePeriodSeconds")
        if not self.info.namespaced:
            nm.namespace = ""

    def validate_update(self, new: Message, old: Message) -> list[FieldError]:
        typed_new = self.typed(new)
        errs = self.validate_generic(typed_new)
        nm, om = header(new).metadata, header(old).metadata
        if nm.name != om.name:
            errs.append(validation.invalid("metadata.name", nm.name, "field is immutable"))
        if nm.namespace != om.namespace:
            errs.append(
                validation.invalid("metadata.namespace", nm.namespace, "field is immutable")
            )
        errs.extend(self.check_updated(typed_new, self.typed(old)))
        return errs

    # ---- status and finalize -------------------------------------------------------------------

    def prepare_for_status_update(self, new: Message, old: Message) -> Message:
        """UpdateStatus: the stored object with only the status replaced."""
        merged = type(old)()
        merged.CopyFrom(old)
        part(merged, "status").CopyFrom(part(new, "status"))
        self.on_status_update(self.typed(merged), self.typed(new))
        return merged

    def validate_status_update(self, new: Message, old: Message) -> list[FieldError]:
        # `new` is `old` with its status replaced (prepare_for_status_update): nothing
        # immutable can have changed.
        return self.check_status(self.typed(new), self.typed(old))

    def prepare_for_finalize(self, new: Message, old: Message) -> Message:
        """Finalize: the stored object with only spec.finalizers replaced. Only namespaces
        have the subresource; the store routes no other kind here."""
        raise TypeError(f"{self.info.kind} has no finalize subresource")

    def validate_finalize(self, new: Message, old: Message) -> list[FieldError]:
        """What is wrong with a Finalize's result (namespaces only)."""
        return []

    # ---- field selectors -----------------------------------------------------------------------

    def field_values(self, obj: Message) -> dict[str, str]:
        """The selectable field values of `obj`, for field selectors and the watch cache."""
        return self.fields(self.typed(obj))
