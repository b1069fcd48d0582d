"""The RBAC authorizer fed by the four kinds' watch caches never drifts from what they hold.

Seeded random histories of etcd events (creates, updates that change a binding's subjects or
roleRef, deletes and re-creates, bindings before their roles, several objects in one batch, a
codec that keeps almost no decoded message so `prev` is decoded again) go through real
WatchCaches (`_apply`, as their etcd watch does; now and then a batch is lost, as behind a
compaction, and a relist brings the cache back to etcd's state) and the listeners
`RbacAuthorizer.attach` installs. After every batch, what the authorizer grants each identity
(kube's RulesFor: its rules and the roles its bindings name that do not exist) must equal what
an authorizer built afresh from the caches' current state grants. No etcd, no sockets.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from apiserver.auth.authorizer import Identity
from apiserver.auth.rbac import RbacAuthorizer
from apiserver.metrics import Metrics
from apiserver.registry import fields_of
from apiserver.storage import EVENT_DELETE, EVENT_PUT, WatchEvent
from apiserver.watchcache import Codec, WatchCache
from tinykube.kinds import CLUSTER_ROLE, CLUSTER_ROLE_BINDING, RBAC_GROUP, ROLE, ROLE_BINDING
from tinykube.v1 import meta_pb2, rbac_pb2

KINDS = {
    ROLE.kind: (rbac_pb2.Role, True),
    CLUSTER_ROLE.kind: (rbac_pb2.ClusterRole, False),
    ROLE_BINDING.kind: (rbac_pb2.RoleBinding, True),
    CLUSTER_ROLE_BINDING.kind: (rbac_pb2.ClusterRoleBinding, False),
}
NAMESPACES = ("a", "b")
NAMES = ("r1", "r2", "r", "r#1")  # "r" binding's second subject and "r#1" must not collide
USERS = ("x", "y")
IDENTITIES = [
    Identity("x"),
    Identity("y", ("g",)),
    Identity("system:serviceaccount:a:x"),
    Identity("z", ("g", "h")),
]


class _Listing:
    """What a relist reads: etcd's keys under a prefix, at a revision (no etcd)."""

    def __init__(self, kvs: dict[bytes, tuple[bytes, int]], revision: int) -> None:
        self.kvs = [_Kv(key, value, mod) for key, (value, mod) in sorted(kvs.items())]
        self.revision = revision


class _Kv:
    def __init__(self, key: bytes, value: bytes, mod_revision: int) -> None:
        self.key, self.value, self.mod_revision = key, value, mod_revision


class _Storage:
    def __init__(self) -> None:
        self.listing: _Listing | None = None

    async def list_prefix(self, prefix: bytes) -> _Listing:
        assert self.listing is not None
        return self.listing


def make_caches(storage: _Storage) -> dict[str, WatchCache]:
    caches = {}
    for kind, (message, namespaced) in KINDS.items():
        cache = WatchCache(
            kind=kind,
            prefix=f"/registry/{kind}/".encode(),
            # Keep almost no decoded message: listeners decode `prev` from its bytes again.
            codec=Codec(message, namespaced, fields_of(kind), decoded_kept=1),
            storage=storage,  # type: ignore[arg-type]
            metrics=Metrics(),
            window_size=50,
            watcher_queue_size=10,
            bookmark_interval=60,
            wait_timeout=0.1,
        )
        cache.synced.set()
        caches[kind] = cache
    return caches


def subject(rng: random.Random) -> rbac_pb2.Subject:
    kind = rng.choice(("User", "Group", "ServiceAccount"))
    if kind == "ServiceAccount":
        return rbac_pb2.Subject(kind=kind, name="x", namespace=rng.choice(("", "a")))
    name = rng.choice(("g", "h")) if kind == "Group" else rng.choice(USERS)
    return rbac_pb2.Subject(kind=kind, name=name, apiGroup=RBAC_GROUP)


def random_object(rng: random.Random, kind: str) -> Any:
    message, namespaced = KINDS[kind]
    obj = message(
        metadata=meta_pb2.ObjectMeta(
            name=rng.choice(NAMES), namespace=rng.choice(NAMESPACES) if namespaced else ""
        )
    )
    if kind in (ROLE.kind, CLUSTER_ROLE.kind):
        for _ in range(rng.randint(0, 2)):
            obj.rules.add(verbs=[rng.choice(("get", "list"))], apiGroups=[""], resources=["pods"])
    else:
        ref_kind = rng.choice((ROLE.kind, CLUSTER_ROLE.kind)) if namespaced else CLUSTER_ROLE.kind
        obj.roleRef.CopyFrom(
            rbac_pb2.RoleRef(apiGroup=RBAC_GROUP, kind=ref_kind, name=rng.choice(NAMES[:2]))
        )
        obj.subjects.extend(subject(rng) for _ in range(rng.randint(0, 4)))
    return obj


def etcd_key(cache: WatchCache, obj: Any) -> bytes:
    meta = obj.metadata
    path = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
    return cache.prefix + path.encode()


def granted(rbac: RbacAuthorizer) -> list[Any]:
    out = []
    for identity in IDENTITIES:
        for namespace in ("", *NAMESPACES):
            rules, missing = rbac.rules_for(identity, namespace)
            out.append((identity, namespace, sorted(map(repr, rules)), sorted(missing)))
    return out


@pytest.mark.parametrize("seed", range(25))
async def test_the_index_follows_the_caches_through_any_history(seed: int) -> None:
    rng = random.Random(seed)
    storage = _Storage()
    caches = make_caches(storage)
    etcd: dict[str, dict[bytes, tuple[bytes, int]]] = {kind: {} for kind in KINDS}
    live = RbacAuthorizer()
    live.attach(caches)
    revision = 1
    for _batch in range(50):
        kind = rng.choice(list(KINDS))
        cache = caches[kind]
        if rng.random() < 0.1:
            # A relist (after compaction): the listeners get None and reset the kind.
            storage.listing = _Listing(etcd[kind], revision)
            await cache._relist()
            continue
        events: list[WatchEvent] = []
        for _ in range(rng.randint(1, 3)):  # one etcd txn: one revision, several keys
            obj = random_object(rng, kind)
            key = etcd_key(cache, obj)
            if any(e.key == key for e in events):
                continue
            if key in etcd[kind] and rng.random() < 0.3:
                events.append(WatchEvent(EVENT_DELETE, key, b"", revision))
            else:
                events.append(WatchEvent(EVENT_PUT, key, obj.SerializeToString(), revision))
        for event in events:
            if event.type == EVENT_DELETE:
                del etcd[kind][event.key]
            else:
                etcd[kind][event.key] = (event.value, event.revision)
        revision += 1
        if rng.random() < 0.1:
            continue  # lost (compacted away before the watch got it): the next relist has it
        cache._apply(events)
        fresh = RbacAuthorizer()
        for each, each_cache in caches.items():
            fresh.reset(each, (c.obj for c in each_cache.state.values()))
        assert granted(live) == granted(fresh), f"seed {seed}: drifted after {events}"
