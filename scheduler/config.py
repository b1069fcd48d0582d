"""The scheduler's configuration file (YAML), in the shape of KubeSchedulerConfiguration.

    percentageOfNodesToScore: 0          # 0: adaptive, as kube-scheduler
    podInitialBackoffSeconds: 1
    podMaxBackoffSeconds: 10
    profiles:
      - schedulerName: tinykube
        plugins:
          disabled: [{name: ImageLocality}]          # "*" disables every default
          enabled: [{name: NodeResourcesFit, weight: 2}]
        pluginConfig:
          - name: NodeResourcesFit
            args: {scoringStrategy: {type: MostAllocated}}

Enabled plugins keep kube-scheduler's default order; new ones are appended. Every validation
error names the field (`profiles[0].plugins.enabled[1].name: unknown plugin "Foo"`). Only one
profile is supported. Pure; no I/O besides reading the file in `load_config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scheduler.framework import Registry
from scheduler.plugins import DEFAULT_PLUGINS, default_registry
from scheduler.podinfo import DEFAULT_SCHEDULER_NAME


class ConfigError(ValueError):
    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field = field_path


@dataclass
class ProfileConfig:
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    # (name, weight) in run order; weight is used only by score plugins
    plugins: list[tuple[str, int]] = field(
        default_factory=lambda: [(n, w or 0) for n, w in DEFAULT_PLUGINS.items()]
    )
    args: dict[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass
class SchedulerConfig:
    percentage_of_nodes_to_score: int = 0
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    profile: ProfileConfig = field(default_factory=ProfileConfig)


def _expect(obj: Any, typ: type | tuple[type, ...], path: str) -> Any:
    if not isinstance(obj, typ):
        names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise ConfigError(path, f"expected {names}, got {type(obj).__name__}")
    return obj


_TOP = {
    "apiVersion",
    "kind",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "profiles",
}


def parse_config(doc: Any, registry: Registry | None = None) -> SchedulerConfig:
    registry = registry or default_registry()
    if doc is None:
        return SchedulerConfig()
    _expect(doc, dict, "<root>")
    for k in doc:
        if k not in _TOP:
            raise ConfigError(str(k), "unknown field")
    cfg = SchedulerConfig()
    pct = doc.get("percentageOfNodesToScore", 0)
    if isinstance(pct, bool) or not isinstance(pct, int) or not 0 <= pct <= 100:
        raise ConfigError("percentageOfNodesToScore", f"must be an integer in 0..100, got {pct!r}")
    cfg.percentage_of_nodes_to_score = pct
    for key, attr in (
        ("podInitialBackoffSeconds", "pod_initial_backoff_seconds"),
        ("podMaxBackoffSeconds", "pod_max_backoff_seconds"),
    ):
        if key in doc:
            v = doc[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
                raise ConfigError(key, f"must be a positive number, got {v!r}")
            setattr(cfg, attr, float(v))
    if cfg.pod_max_backoff_seconds < cfg.pod_initial_backoff_seconds:
        raise ConfigError("podMaxBackoffSeconds", "must not be less than podInitialBackoffSeconds")
    profiles = _expect(doc.get("profiles", []) or [], list, "profiles")
    if len(profiles) > 1:
        raise ConfigError("profiles", "only one profile is supported")
    if profiles:
        cfg.profile = _parse_profile(profiles[0], "profiles[0]", registry)
    return cfg


def _parse_profile(doc: Any, path: str, registry: Registry) -> ProfileConfig:
    _expect(doc, dict, path)
    for k in doc:
        if k not in ("schedulerName", "plugins", "pluginConfig"):
            raise ConfigError(f"{path}.{k}", "unknown field")
    prof = ProfileConfig()
    name = doc.get("schedulerName", DEFAULT_SCHEDULER_NAME)
    prof.scheduler_name = _expect(name, str, f"{path}.schedulerName")
    plugins = _expect(doc.get("plugins", {}) or {}, dict, f"{path}.plugins")
    order = list(prof.plugins)
    for i, item in enumerate(
        _expect(plugins.get("disabled", []) or [], list, f"{path}.plugins.disabled")
    ):
        p = f"{path}.plugins.disabled[{i}]"
        nm = _expect(_expect(item, dict, p).get("name"), str, f"{p}.name")
        if nm == "*":
            order = []
            continue
        if nm not in registry:
            raise ConfigError(f"{p}.name", f"unknown plugin {nm!r}")
        order = [(n, w) for n, w in order if n != nm]
    for i, item in enumerate(
        _expect(plugins.get("enabled", []) or [], list, f"{path}.plugins.enabled")
    ):
        p = f"{path}.plugins.enabled[{i}]"
        _expect(item, dict, p)
        nm = _expect(item.get("name"), str, f"{p}.name")
        if nm not in registry:
            raise ConfigError(f"{p}.name", f"unknown plugin {nm!r}")
        weight = item.get("weight", DEFAULT_PLUGINS.get(nm) or 1)
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise ConfigError(f"{p}.weight", f"must be an integer in 1..100, got {weight!r}")
        names = [n for n, _ in order]
        if nm in names:
            order[names.index(nm)] = (nm, weight)
        else:
            order.append((nm, weight))
    prof.plugins = order
    for i, item in enumerate(
        _expect(doc.get("pluginConfig", []) or [], list, f"{path}.pluginConfig")
    ):
        p = f"{path}.pluginConfig[{i}]"
        _expect(item, dict, p)
        nm = _expect(item.get("name"), str, f"{p}.name")
        if nm not in registry:
            raise ConfigError(f"{p}.name", f"unknown plugin {nm!r}")
        prof.args[nm] = _expect(item.get("args", {}) or {}, dict, f"{p}.args")
    return prof


def load_config(path: str | Path | None) -> SchedulerConfig:
    if not path:
        return SchedulerConfig()
    with open(path) as f:
        return parse_config(yaml.safe_load(f))
