"""ConfigMaps (core/v1): the strategy over apiserver/configdata.py's rules.

No generation (kube's strategy sets none); keys, sizes and `immutable` are checked by
configdata's ValidateConfigMap and ValidateConfigMapUpdate. Pure functions.
"""

from __future__ import annotations

from datetime import datetime

from apiserver import configdata
from apiserver.registry.base import Strategy
from tinykube.errors import FieldError
from tinykube.v1 import configmap_pb2


class ConfigMapStrategy(Strategy[configmap_pb2.ConfigMap]):
    def default(self, obj: configmap_pb2.ConfigMap, now: datetime) -> None:
        obj.metadata.generation = 0

    def on_update(self, new: configmap_pb2.ConfigMap, old: configmap_pb2.ConfigMap) -> None:
        new.metadata.generation = 0

    def check(self, obj: configmap_pb2.ConfigMap) -> list[FieldError]:
        return configdata.validate_config_map(obj)

    def check_update(
        self, new: configmap_pb2.ConfigMap, old: configmap_pb2.ConfigMap
    ) -> list[FieldError]:
        return configdata.validate_config_map_update(new, old)

    def check_updated(
        self, new: configmap_pb2.ConfigMap, old: configmap_pb2.ConfigMap
    ) -> list[FieldError]:
        # kube's ValidateConfigMapUpdate: what may not change first, then the new object.
        return self.check_update(new, old) + self.check(new)
