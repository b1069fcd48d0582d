"""The namespaces' store: `ResourceStore` with the namespace lifecycle, as kube-apiserver's
pkg/registry/core/namespace/storage: a namespace's first Delete only marks it (deletionTimestamp,
phase Terminating) while spec.finalizers remain, the namespace controller empties it and
finalizes it through namespaces/finalize (`finalize`), and the update that leaves a terminating
namespace without finalizers removes it. The NamespaceLifecycle admission refuses deleting the
system namespaces. Every write takes the request's `RequestContext`; a dry run writes nothing.
"""

from __future__ import annotations

from google.protobuf.message import Message

from apiserver.deletion import check_policy
from apiserver.requestcontext import INTERNAL, RequestContext
from apiserver.resources import _CAS_ATTEMPTS, ResourceStore, _check_grace_period
from tinykube.errors import FieldError, InvalidError
from tinykube.meta import timestamp
from tinykube.v1 import meta_pb2


class NamespaceStore(ResourceStore):
    """The namespaces' `ResourceStore`, with finalize and the deletion lifecycle."""

    async def finalize(self, request: Message, ctx: RequestContext = INTERNAL) -> Message:
        """Namespaces only (Kubernetes' namespaces/finalize): replace spec.finalizers. A
        namespace being deleted that is left without finalizers is removed."""
        return await self._replace(request, ctx, "finalize")

    async def _start_namespace_deletion(
        self, request: meta_pb2.DeleteRequest, key: bytes, ctx: RequestContext, *, admit: bool
    ) -> Message | None:
        """A namespace's first Delete, as kube-apiserver's namespace storage: set
        deletionTimestamp and phase Terminating (the namespace controller then empties it and
        finalizes it). Returns the namespace as stored, or None when the generic delete
        applies: it is already terminating with no spec.finalizers left, or had none."""
        cur = await self._current(key, cached=not ctx.dry_run)
        for _attempt in range(_CAS_ATTEMPTS):
            if cur is None:
                raise self._not_found(request.name)
            ns = cur.obj
            meta = ns.metadata  # type: ignore[attr-defined]
            problem = self._precondition_failure(request.name, request.preconditions, meta)
            if problem is not None:
                if not cur.authoritative:
                    cur = await self._current(key, cached=False)
                    continue
                raise problem
            if not ns.spec.finalizers:  # type: ignore[attr-defined]
                return None
            if meta.HasField("deletionTimestamp"):
                return ns  # terminating already; the controller finishes it
            if admit and self.webhooks_see("DELETE", "", request.name):
                if not cur.authoritative:
                    # The webhooks judge the namespace etcd holds, not a cached copy.
                    cur = await self._current(key, cached=False)
                    continue
                # The admission webhooks of the DELETE (once: a lost race below retries only
                # the write).
                await self.delete_webhooks(request, ns, ctx)
                admit = False
            meta.deletionTimestamp.CopyFrom(timestamp(self.clock.now()))
            ns.status.phase = "Terminating"  # type: ignore[attr-defined]
            # No propagation finalizers: tinykube's garbage collector does not track namespaces
            # (Kubernetes' would), and one would hold the namespace forever.
            if ctx.dry_run:
                return ns
            result = await self.storage.update(key, self._stored_value(ns), cur.revision)
            if result.succeeded:
                meta.resourceVersion = str(result.revision)
                if self.admission is not None:
                    self.admission.namespace_deleting(meta.name)
                return ns
            cur = self._after_failure(result)
        raise self._conflict(request.name)

    def _prepare_update(
        self, subresource: str, obj: Message, old: Message
    ) -> tuple[Message, list[FieldError]]:
        if subresource == "finalize":
            new = self.strategy.prepare_for_finalize(obj, old)
            return new, self.strategy.validate_finalize(new, old)
        return super()._prepare_update(subresource, obj, old)

    def _held_by_spec(self, obj: Message) -> bool:
        return bool(obj.spec.finalizers)  # type: ignore[attr-defined]

    async def delete(
        self,
        request: meta_pb2.DeleteRequest,
        ctx: RequestContext = INTERNAL,
        *,
        admit: bool = True,
    ) -> Message:
        """Start the namespace's deletion (see `_start_namespace_deletion`), or delete it as
        any object once it has no spec.finalizers left."""
        if not request.name:
            raise InvalidError(f"{self.info.kind} name is required")
        check_policy(request.propagationPolicy)
        _check_grace_period(request)
        if self.admission is not None:
            self.admission.check_delete(self.info, request.name)
        marked = await self._start_namespace_deletion(
            request, self.key("", request.name), ctx, admit=admit
        )
        if marked is not None:
            return marked
        return await super().delete(request, ctx, admit=admit)
