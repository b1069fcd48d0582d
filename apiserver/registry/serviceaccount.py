"""ServiceAccounts (core/v1): the strategy (defaults from apiserver/serviceaccount.py).

The token volume a pod gets for its account is the ServiceAccount admission's
(apiserver/admission.py). Pure functions.
"""

from __future__ import annotations

from datetime import datetime

from apiserver import serviceaccount
from apiserver.registry.base import Strategy
from tinykube.errors import FieldError
from tinykube.v1 import serviceaccount_pb2


class ServiceAccountStrategy(Strategy[serviceaccount_pb2.ServiceAccount]):
    def default(self, obj: serviceaccount_pb2.ServiceAccount, now: datetime) -> None:
        serviceaccount.prepare(obj)

    def on_update(
        self, new: serviceaccount_pb2.ServiceAccount, old: serviceaccount_pb2.ServiceAccount
    ) -> None:
        serviceaccount.prepare(new)

    def check(self, obj: serviceaccount_pb2.ServiceAccount) -> list[FieldError]:
        # kube's ValidateServiceAccount checks the metadata only.
        return []
