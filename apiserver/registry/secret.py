"""Secrets (core/v1): the strategy over apiserver/configdata.py's rules.

No generation (kube's strategy sets none); `type` defaults to Opaque and stringData is merged
into data on every write (configdata.prepare_secret); the type's keys, sizes and `immutable`
are checked by configdata's ValidateSecret and ValidateSecretUpdate. Pure functions.
"""

from __future__ import annotations

from datetime import datetime

from apiserver import configdata
from apiserver.registry.base import META_FIELDS, Strategy
from tinykube.errors import FieldError
from tinykube.v1 import secret_pb2


class SecretStrategy(Strategy[secret_pb2.Secret]):
    selectable_fields = (*META_FIELDS, "type")

    def default(self, obj: secret_pb2.Secret, now: datetime) -> None:
        obj.metadata.generation = 0
        configdata.prepare_secret(obj)

    def on_update(self, new: secret_pb2.Secret, old: secret_pb2.Secret) -> None:
        new.metadata.generation = 0
        configdata.prepare_secret(new)

    def check(self, obj: secret_pb2.Secret) -> list[FieldError]:
        return configdata.validate_secret(obj)

    def check_update(self, new: secret_pb2.Secret, old: secret_pb2.Secret) -> list[FieldError]:
        return configdata.validate_secret_update(new, old)

    def fields(self, obj: secret_pb2.Secret) -> dict[str, str]:
        return {
            "metadata.name": obj.metadata.name,
            "metadata.namespace": obj.metadata.namespace,
            "type": obj.type,
        }

    def check_updated(self, new: secret_pb2.Secret, old: secret_pb2.Secret) -> list[FieldError]:
        # kube's ValidateSecretUpdate: what may not change first, then the new object.
        return self.check_update(new, old) + self.check(new)
