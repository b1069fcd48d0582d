"""The scheduler process's settings, built once in `__main__` from flags and environment."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from tinykube.tls import Security


def _default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


@dataclass
class Settings:
    apiserver: str = "127.0.0.1:6443"
    bind_address: str = "127.0.0.1"
    port: int = 10259
    metrics_port: int = 0
    config_file: str = ""
    leader_elect: bool = True
    lease_namespace: str = "kube-system"
    lease_name: str = "tinykube-scheduler"
    identity: str = field(default_factory=_default_identity)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    max_binds: int = 256
    request_timeout: float = 10.0
    # --kubeconfig, --insecure and the serving certificate (tinykube/tls.py)
    security: Security = field(default_factory=Security)

    @property
    def listen(self) -> str:
        return f"{self.bind_address}:{self.port}"
