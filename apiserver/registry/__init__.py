"""The registry of kinds' behaviour: one strategy class per kind, as kube's
`pkg/registry/<group>/<kind>/strategy.go`.

Each kind's module (`pod.py`, `service.py`, ...) holds its defaults, validation (create,
update, status update), update rules, status reset and selectable fields in a subclass of
`base.Strategy`. `STRATEGIES` maps each kind to its class (a kind listed twice is an error
when this package is imported), and `strategy_for(info)` is the one lookup the apiserver uses.
`base.Strategy` is abstract: a kind with nothing particular to it still has a class saying so
(its `check` finds nothing), named in the table like every other.

The table is built once at import and only read afterwards; strategies hold no mutable state,
so one per kind serves every concurrent request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf.message import Message

from apiserver.registry import base
from apiserver.registry.admissionpolicy import (
    ValidatingAdmissionPolicyBindingStrategy,
    ValidatingAdmissionPolicyStrategy,
)
from apiserver.registry.admissionregistration import WebhookConfigurationStrategy
from apiserver.registry.base import META_FIELDS
from apiserver.registry.configmap import ConfigMapStrategy
from apiserver.registry.controllerrevision import ControllerRevisionStrategy
from apiserver.registry.customresourcedefinition import CustomResourceDefinitionStrategy
from apiserver.registry.daemonset import DaemonSetStrategy
from apiserver.registry.deployment import DeploymentStrategy
from apiserver.registry.endpoints import EndpointsStrategy
from apiserver.registry.endpointslice import EndpointSliceStrategy
from apiserver.registry.event import EventStrategy
from apiserver.registry.job import JobStrategy
from apiserver.registry.lease import LeaseStrategy
from apiserver.registry.namespace import NamespaceStrategy
from apiserver.registry.node import NodeStrategy
from apiserver.registry.pod import PodStrategy
from apiserver.registry.poddisruptionbudget import PodDisruptionBudgetStrategy
from apiserver.registry.priorityclass import PriorityClassStrategy
from apiserver.registry.rbac import BindingStrategy, RoleStrategy
from apiserver.registry.replicaset import ReplicaSetStrategy
from apiserver.registry.secret import SecretStrategy
from apiserver.registry.service import ServiceStrategy
from apiserver.registry.serviceaccount import ServiceAccountStrategy
from tinykube.kinds import (
    BY_KIND,
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    CONFIG_MAP,
    CONTROLLER_REVISION,
    CUSTOM_RESOURCE_DEFINITION,
    DAEMON_SET,
    DEPLOYMENT,
    ENDPOINT_SLICE,
    ENDPOINTS,
    EVENT,
    JOB,
    LEASE,
    MUTATING_WEBHOOK_CONFIGURATION,
    NAMESPACE,
    NODE,
    POD,
    POD_DISRUPTION_BUDGET,
    PRIORITY_CLASS,
    REPLICA_SET,
    ROLE,
    ROLE_BINDING,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    VALIDATING_ADMISSION_POLICY,
    VALIDATING_ADMISSION_POLICY_BINDING,
    VALIDATING_WEBHOOK_CONFIGURATION,
    KindInfo,
)

# A strategy of any kind, as the store holds one (each kind's class is `base.Strategy[M]`).
Strategy = base.Strategy[Any]
StrategyClass = type[Strategy]


class DuplicateKindError(ValueError):
    """A kind was given two strategies."""


def build_table(rows: Iterable[tuple[KindInfo, StrategyClass]]) -> dict[str, StrategyClass]:
    """Kind name -> strategy class, refusing a kind listed twice."""
    table: dict[str, StrategyClass] = {}
    for info, cls in rows:
        if info.kind in table:
            raise DuplicateKindError(
                f"kind {info.kind} has two strategies: {table[info.kind].__name__} and "
                f"{cls.__name__}"
            )
        table[info.kind] = cls
    return table


STRATEGIES: dict[str, StrategyClass] = build_table(
    (
        (POD, PodStrategy),
        (NODE, NodeStrategy),
        (NAMESPACE, NamespaceStrategy),
        (EVENT, EventStrategy),
        (SERVICE, ServiceStrategy),
        (ENDPOINTS, EndpointsStrategy),
        (ENDPOINT_SLICE, EndpointSliceStrategy),
        (CONFIG_MAP, ConfigMapStrategy),
        (SECRET, SecretStrategy),
        (SERVICE_ACCOUNT, ServiceAccountStrategy),
        (REPLICA_SET, ReplicaSetStrategy),
        (DEPLOYMENT, DeploymentStrategy),
        (DAEMON_SET, DaemonSetStrategy),
        (CONTROLLER_REVISION, ControllerRevisionStrategy),
        (JOB, JobStrategy),
        (LEASE, LeaseStrategy),
        (POD_DISRUPTION_BUDGET, PodDisruptionBudgetStrategy),
        (PRIORITY_CLASS, PriorityClassStrategy),
        (ROLE, RoleStrategy),
        (CLUSTER_ROLE, RoleStrategy),
        (ROLE_BINDING, BindingStrategy),
        (CLUSTER_ROLE_BINDING, BindingStrategy),
        (MUTATING_WEBHOOK_CONFIGURATION, WebhookConfigurationStrategy),
        (VALIDATING_WEBHOOK_CONFIGURATION, WebhookConfigurationStrategy),
        (VALIDATING_ADMISSION_POLICY, ValidatingAdmissionPolicyStrategy),
        (VALIDATING_ADMISSION_POLICY_BINDING, ValidatingAdmissionPolicyBindingStrategy),
        (CUSTOM_RESOURCE_DEFINITION, CustomResourceDefinitionStrategy),
    )
)


def strategy_for(info: KindInfo, *, default_grace_seconds: int = 30) -> Strategy:
    """The strategy of `info`'s kind; `default_grace_seconds` is the pods' default
    terminationGracePeriodSeconds."""
    cls = STRATEGIES.get(info.kind)
    if cls is None:
        raise LookupError(
            f"kind {info.kind} has no strategy: add it to STRATEGIES in apiserver/registry/"
        )
    return cls(info, default_grace_seconds=default_grace_seconds)


# Each kind's field selector keys, and the key the watch cache indexes by (where one is).
SELECTABLE_FIELDS: dict[str, tuple[str, ...]] = {
    kind: cls.selectable_fields for kind, cls in STRATEGIES.items()
}
INDEX_FIELD: dict[str, str] = {
    kind: cls.index_field for kind, cls in STRATEGIES.items() if cls.index_field is not None
}


def fields_of(kind: str) -> Callable[[Message], dict[str, str]]:
    """A function giving the selectable field values of an object of `kind`."""
    return strategy_for(BY_KIND[kind]).field_values


__all__ = [
    "INDEX_FIELD",
    "META_FIELDS",
    "SELECTABLE_FIELDS",
    "STRATEGIES",
    "DuplicateKindError",
    "Strategy",
    "build_table",
    "fields_of",
    "strategy_for",
]
