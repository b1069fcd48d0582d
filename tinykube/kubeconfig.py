"""kubeconfig files for kubectl, client-go and the Python `kubernetes` client.

`write_kubeconfig(path, server)` writes a one-cluster, one-context kubeconfig in the format
kubectl reads (`kubectl --kubeconfig PATH` or `KUBECONFIG=PATH`), naming the cluster, user and
context "tinykube". Plain HTTP until the cluster has TLS: the user has no credentials. Pure
apart from writing the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

NAME = "tinykube"


def kubeconfig(server: str, *, name: str = NAME, namespace: str = "default") -> dict[str, Any]:
    """The kubeconfig document for a cluster whose REST API is at `server` (a URL)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": {}}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}
        ],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: str, *, name: str = NAME) -> Path:
    """Write the kubeconfig for `server` to `path` (mode 0600, as kubectl writes its own)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig(server, name=name), sort_keys=False))
    path.chmod(0o600)
    return path
