"""What the REST API serves, and the discovery documents that tell clients so.

`RESOURCES` lists every resource at its Kubernetes group, version and path: the kinds of
`tinykube.kinds` (stored; their verbs, short names, categories and subresources are the kind's
facts there) and the kinds Kubernetes clients routinely list that
tinykube does not model (`stored=False`: LIST and WATCH answer an empty list, GET is
NotFound, writes are 405). From it come the legacy documents (`/api`, `/api/v1`, `/apis`,
`/apis/<group>`, `/apis/<group>/<version>`) and aggregated discovery
(`apidiscovery.k8s.io/v2` APIGroupDiscoveryList, which kubectl asks for first), plus /version.
Everything here is computed once at start-up and immutable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apiserver.rest.codec import parse_accept
from apiserver.rest.eventsview import EVENTS_V1
from tinykube.kinds import ALL_KINDS, EVENT, READ_VERBS, KindInfo, Subresource

# The Kubernetes release whose API tinykube serves; "+tinykube" marks the implementation
# (build metadata in semver terms, as vendors' builds do: v1.37.0+k3s1).
KUBE_MAJOR = "1"
KUBE_MINOR = "37"
GIT_VERSION = f"v{KUBE_MAJOR}.{KUBE_MINOR}.0+tinykube"

AGGREGATED_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[Subresource, ...] = ()
    # The stored kind, or None for a kind tinykube lists as always empty.
    info: KindInfo | None = None
    # A resource that is neither stored nor listed (a review: create only) names its verbs.
    only_verbs: tuple[str, ...] = ()
    # Another version's view of the stored kind `info` (events.k8s.io/v1 Events): what the
    # REST codec reads and writes; None for the stored kind itself.
    view: KindInfo | None = None

    @property
    def stored(self) -> bool:
        return self.info is not None

    @property
    def verbs(self) -> tuple[str, ...]:
        if self.only_verbs:
            return self.only_verbs
        if self.info is None:
            return READ_VERBS
        return self.info.verbs

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def subresource(self, name: str) -> Subresource | None:
        return next((s for s in self.subresources if s.name == name), None)


def stored_resource(info: KindInfo) -> Resource:
    """The discovery entry of a stored kind (a built-in one, or a custom kind of a CRD)."""
    # tinykube's short names include the singular ("pod"); Kubernetes lists only real
    # abbreviations ("po") and serves the singular separately.
    shorts = tuple(s for s in info.short_names if s not in (info.kind.lower(), info.plural))
    return Resource(
        group=info.group,
        version=info.version,
        plural=info.plural,
        kind=info.kind,
        namespaced=info.namespaced,
        short_names=shorts,
        categories=info.categories,
        subresources=info.all_subresources,
        info=info,
    )


# Kinds kube-scheduler, kubectl and client-go programs list that tinykube does not model, in
# their real groups and versions. Listed in discovery so such clients start and see nothing.
UNMODELED: tuple[Resource, ...] = (
    Resource("", "v1", "persistentvolumes", "PersistentVolume", False, ("pv",)),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("pvc",)),
    Resource("", "v1", "replicationcontrollers", "ReplicationController", True, ("rc",), ("all",)),
    Resource("apps", "v1", "statefulsets", "StatefulSet", True, ("sts",), ("all",)),
    Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, ("sc",)),
    Resource("storage.k8s.io", "v1", "csinodes", "CSINode", False),
    Resource("storage.k8s.io", "v1", "csidrivers", "CSIDriver", False),
    Resource("storage.k8s.io", "v1", "csistoragecapacities", "CSIStorageCapacity", True),
    Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True),
    Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False),
    Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
)

# Answered, never stored: `kubectl auth can-i` posts one (apiserver/auth/review.py).
SELF_SUBJECT_ACCESS_REVIEW = Resource(
    "authorization.k8s.io",
    "v1",
    "selfsubjectaccessreviews",
    "SelfSubjectAccessReview",
    False,
    only_verbs=("create",),
)

# Answered, never stored: `kubectl auth can-i --list` posts one (apiserver/auth/review.py).
SELF_SUBJECT_RULES_REVIEW = Resource(
    "authorization.k8s.io",
    "v1",
    "selfsubjectrulesreviews",
    "SelfSubjectRulesReview",
    False,
    only_verbs=("create",),
)

# Answered, never stored, for webhooks and proxies (apiserver/rest/authapi.py); `kubectl auth
# whoami` posts a SelfSubjectReview.
TOKEN_REVIEW = Resource(
    "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False, only_verbs=("create",)
)
SELF_SUBJECT_REVIEW = Resource(
    "authentication.k8s.io",
    "v1",
    "selfsubjectreviews",
    "SelfSubjectReview",
    False,
    only_verbs=("create",),
)
SUBJECT_ACCESS_REVIEW = Resource(
    "authorization.k8s.io",
    "v1",
    "subjectaccessreviews",
    "SubjectAccessReview",
    False,
    only_verbs=("create",),
)
LOCAL_SUBJECT_ACCESS_REVIEW = Resource(
    "authorization.k8s.io",
    "v1",
    "localsubjectaccessreviews",
    "LocalSubjectAccessReview",
    True,
    only_verbs=("create",),
)
AUTH_REVIEWS = (
    TOKEN_REVIEW,
    SELF_SUBJECT_REVIEW,
    SUBJECT_ACCESS_REVIEW,
    LOCAL_SUBJECT_ACCESS_REVIEW,
)

# events.k8s.io/v1 Events: the stored core Events in kube's other version of them.
EVENTS_V1_RESOURCE = Resource(
    EVENTS_V1.group, "v1", "events", "Event", True, ("ev",), info=EVENT, view=EVENTS_V1
)

RESOURCES: tuple[Resource, ...] = (
    *(stored_resource(i) for i in ALL_KINDS),
    EVENTS_V1_RESOURCE,
    *UNMODELED,
    TOKEN_REVIEW,
    SELF_SUBJECT_REVIEW,
    LOCAL_SUBJECT_ACCESS_REVIEW,
    SELF_SUBJECT_ACCESS_REVIEW,
    SELF_SUBJECT_RULES_REVIEW,
    SUBJECT_ACCESS_REVIEW,
)

# Named groups in Kubernetes' discovery priority order (the core group is served at /api): the
# kube-aggregator's GroupPriorityMinimum, highest first (apps 17800, events 17750, ..., storage
# 16800, scheduling 16600, coordination 16500, ...). Groups not listed come after, by name.
_GROUP_ORDER = (
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "resource.k8s.io",
)


@dataclass(frozen=True)
class GroupVersion:
    group: str
    version: str
    resources: tuple[Resource, ...] = field(default=())

    @property
    def path(self) -> str:
        """ "api/v1", "apis/apps/v1": the URL prefix (and the OpenAPI v3 document name)."""
        return f"apis/{self.group}/{self.version}" if self.group else f"api/{self.version}"

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def resource(self, plural: str) -> Resource | None:
        return next((r for r in self.resources if r.plural == plural), None)


def group_versions(resources: tuple[Resource, ...] = RESOURCES) -> list[GroupVersion]:
    """Every served group/version, core first, then groups in Kubernetes' priority order."""
    keys: list[tuple[str, str]] = []
    for r in resources:
        if (r.group, r.version) not in keys:
            keys.append((r.group, r.version))

    def rank(key: tuple[str, str]) -> tuple[int, int, str]:
        group = key[0]
        if not group:
            return (0, 0, "")
        if group in _GROUP_ORDER:
            return (1, _GROUP_ORDER.index(group), group)
        return (2, 0, group)

    keys.sort(key=rank)
    return [
        GroupVersion(g, v, tuple(r for r in resources if (r.group, r.version) == (g, v)))
        for g, v in keys
    ]


class Discovery:
    """The discovery documents, built once."""

    def __init__(self, resources: tuple[Resource, ...] = RESOURCES) -> None:
        self.group_versions = group_versions(resources)
        self.by_path = {gv.path: gv for gv in self.group_versions}
        self.kinds = [r.info for r in resources if r.info is not None and r.view is None]
        # What the OpenAPI documents describe: the stored kinds and the views of them.
        self.schemas = [r.view or r.info for r in resources if r.info is not None]

    def lookup(self, group: str, version: str) -> GroupVersion | None:
        return self.by_path.get(GroupVersion(group, version).path)

    def groups(self) -> list[str]:
        seen: list[str] = []
        for gv in self.group_versions:
            if gv.group and gv.group not in seen:
                seen.append(gv.group)
        return seen

    # ---- legacy discovery -------------------------------------------------------------------

    def api_versions(self, server_address: str) -> dict[str, Any]:
        return {
            "kind": "APIVersions",
            "versions": [gv.version for gv in self.group_versions if not gv.group],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
            ],
        }

    def api_group(self, group: str) -> dict[str, Any] | None:
        versions = [
            {"groupVersion": gv.group_version, "version": gv.version}
            for gv in self.group_versions
            if gv.group == group
        ]
        if not group or not versions:
            return None
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": versions,
            "preferredVersion": versions[0],
        }

    def api_group_list(self) -> dict[str, Any]:
        groups = []
        for name in self.groups():
            doc = self.api_group(name)
            assert doc is not None
            groups.append({k: doc[k] for k in ("name", "versions", "preferredVersion")})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def resource_list(self, gv: GroupVersion) -> dict[str, Any]:
        entries: list[dict[str, Any]] = []
        for r in gv.resources:
            entry: dict[str, Any] = {
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(r.verbs),
            }
            if r.short_names:
                entry["shortNames"] = list(r.short_names)
            if r.categories:
                entry["categories"] = list(r.categories)
            entries.append(entry)
            for sub in r.subresources:
                sub_entry: dict[str, Any] = {
                    "name": f"{r.plural}/{sub.name}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                }
                if sub.group:
                    sub_entry["group"] = sub.group
                    sub_entry["version"] = sub.version
                sub_entry["kind"] = sub.kind
                sub_entry["verbs"] = list(sub.verbs)
                entries.append(sub_entry)
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv.group_version,
            "resources": entries,
        }

    # ---- aggregated discovery (apidiscovery.k8s.io/v2) --------------------------------------

    def _resource_discovery(self, gv: GroupVersion, r: Resource) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "resource": r.plural,
            "responseKind": {"group": gv.group, "version": gv.version, "kind": r.kind},
            "scope": "Namespaced" if r.namespaced else "Cluster",
            "singularResource": r.singular,
            "verbs": list(r.verbs),
        }
        if r.short_names:
            doc["shortNames"] = list(r.short_names)
        if r.categories:
            doc["categories"] = list(r.categories)
        if r.subresources:
            doc["subresources"] = [
                {
                    "subresource": s.name,
                    "responseKind": {
                        "group": s.group if s.group else gv.group,
                        "version": s.version if s.version else gv.version,
                        "kind": s.kind,
                    },
                    "verbs": list(s.verbs),
                }
                for s in r.subresources
            ]
        return doc

    def aggregated(self, core: bool) -> dict[str, Any]:
        """The APIGroupDiscoveryList of /api (core) or /apis (every named group)."""
        items: list[dict[str, Any]] = []
        names = [""] if core else self.groups()
        for name in names:
            versions = [
                {
                    "version": gv.version,
                    "resources": [self._resource_discovery(gv, r) for r in gv.resources],
                    "freshness": "Current",
                }
                for gv in self.group_versions
                if gv.group == name
            ]
            items.append({"metadata": {"name": name} if name else {}, "versions": versions})
        return {
            "kind": "APIGroupDiscoveryList",
            "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {},
            "items": items,
        }


def wants_aggregated(accept: str) -> bool:
    """Whether an Accept header asks for apidiscovery.k8s.io/v2 before anything we serve
    as legacy discovery (a plain JSON entry listed first wins, as Kubernetes negotiates)."""
    for media in parse_accept(accept):
        p = media.params
        if p.get("as") == "APIGroupDiscoveryList":
            if p.get("g") == "apidiscovery.k8s.io" and p.get("v") == "v2":
                return True
            continue
        if media.type in ("application/json", "*/*", "application/*"):
            return False
    return False


def version_info(platform: str, build_date: str = "1970-01-01T00:00:00Z") -> dict[str, str]:
    """/version, shaped as Kubernetes' version.Info."""
    return {
        "major": KUBE_MAJOR,
        "minor": KUBE_MINOR,
        "emulationMajor": KUBE_MAJOR,
        "emulationMinor": KUBE_MINOR,
        "minCompatibilityMajor": KUBE_MAJOR,
        "minCompatibilityMinor": str(int(KUBE_MINOR) - 1),
        "gitVersion": GIT_VERSION,
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": build_date,
        "goVersion": "",
        "compiler": "cpython",
        "platform": platform,
    }
