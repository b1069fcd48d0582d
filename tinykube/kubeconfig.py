"""kubeconfig files: written for kubectl and the components, read by tinykube as kubectl reads them.

`write_kubeconfig(path, server, ...)` writes a one-cluster, one-user, one-context kubeconfig
with the credentials embedded (`certificate-authority-data`, `client-certificate-data`,
`client-key-data`, as kubeadm's admin.conf), naming the cluster, user and context "tinykube".
`server` is the REST API's URL, what kubectl and client-go dial. tinykube's own clients speak
gRPC on another port, recorded in the cluster's `extensions` under `tinykube.io/grpc`
(`{server: host:port}`, or with several apiservers `{servers: [host:port, ...]}`: tinykube's
clients fail over between them, tinykube/client.py); kubectl keeps extensions it does not know
and ignores them (it has the one `server`, as with kube, where several apiservers sit behind a
load balancer's address).

`load(path)` reads kubeconfig files as kubectl does: an explicit path, else every file in
`$KUBECONFIG` (colon-separated, merged: the first file to define a cluster, user or context
name, or the current-context, wins); the current context (or `context=`) picks the cluster and
user; `certificate-authority`, `client-certificate` and `client-key` paths are relative to the
file that names them, the `-data` forms are base64 PEM; `token` and `tokenFile` give a bearer
token; `tls-server-name` overrides the name checked in the server's certificate. An `http://`
server means plaintext. It returns a `ClientConfig`: the REST URL, the gRPC address (the
extension's addresses, else the server URL's host:port), the namespace and the
`credentials.Credentials`.

Pure apart from reading and writing the files.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from tinykube.credentials import PLAINTEXT, Credentials, TLSConfigError, read_file
from tinykube.flags import split_addresses

NAME = "tinykube"
GRPC_EXTENSION = "tinykube.io/grpc"
ENV = "KUBECONFIG"


class KubeconfigError(TLSConfigError):
    """A kubeconfig that cannot be used; the message names the file and the field."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(
    server: str,
    *,
    name: str = NAME,
    namespace: str = "default",
    user: str = "",
    ca: bytes | None = None,
    cert: bytes | None = None,
    key: bytes | None = None,
    token: str | None = None,
    grpc_server: str | Sequence[str] = "",
) -> dict[str, Any]:
    """The kubeconfig document for a cluster whose REST API is at `server` (a URL);
    `grpc_server` is the gRPC address, or several ("a:1,b:2" or a list)."""
    cluster: dict[str, Any] = {}
    if ca is not None:
        cluster["certificate-authority-data"] = _b64(ca)
    cluster["server"] = server
    grpc_servers = split_addresses(grpc_server)
    if len(grpc_servers) == 1:
        cluster["extensions"] = [{"name": GRPC_EXTENSION, "extension": {"server": grpc_servers[0]}}]
    elif grpc_servers:
        cluster["extensions"] = [
            {"name": GRPC_EXTENSION, "extension": {"servers": list(grpc_servers)}}
        ]
    creds: dict[str, Any] = {}
    if cert is not None:
        creds["client-certificate-data"] = _b64(cert)
    if key is not None:
        creds["client-key-data"] = _b64(key)
    if token:
        creds["token"] = token
    user = user or name
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": user, "user": creds}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": user, "namespace": namespace}}
        ],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(
    path: Path,
    server: str,
    *,
    name: str = NAME,
    user: str = "",
    ca: bytes | None = None,
    cert: bytes | None = None,
    key: bytes | None = None,
    token: str | None = None,
    grpc_server: str | Sequence[str] = "",
) -> Path:
    """Write the kubeconfig for `server` to `path` atomically (mode 0600, as kubectl writes
    its own: it holds a private key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = kubeconfig(
        server,
        name=name,
        user=user,
        ca=ca,
        cert=cert,
        key=key,
        token=token,
        grpc_server=grpc_server,
    )
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(yaml.safe_dump(doc, sort_keys=False))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


@dataclass(frozen=True)
class ClientConfig:
    """What a kubeconfig's current context says about reaching the cluster."""

    server: str  # the cluster's server URL (the REST API)
    grpc_server: str  # host:port of the gRPC API; "a:1,b:2" with several apiservers
    namespace: str
    credentials: Credentials
    context: str = ""

    @property
    def grpc_servers(self) -> tuple[str, ...]:
        """Every apiserver's gRPC address, in the kubeconfig's order."""
        return split_addresses(self.grpc_server)


def paths_from_env(env: dict[str, str] | None = None) -> list[Path]:
    """The files `$KUBECONFIG` lists, in order (empty when unset)."""
    value = (env if env is not None else os.environ).get(ENV, "")
    return [Path(p) for p in value.split(os.pathsep) if p]


def _named(doc: dict[str, Any], section: str, field: str, source: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    entries = doc.get(section) or []
    if not isinstance(entries, list):
        raise KubeconfigError(f"{source}: {section} must be a list")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name"):
            body = entry.get(field) or {}
            if not isinstance(body, dict):
                raise KubeconfigError(f"{source}: {section}[{entry['name']}].{field}: not a map")
            found[str(entry["name"])] = (body, source)
    return found


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise KubeconfigError(f"kubeconfig {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"kubeconfig {path}: not YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise KubeconfigError(f"kubeconfig {path}: not a kubeconfig (a map at the top)")
    return doc


def _material(body: dict[str, Any], field: str, source: Path, *, what: str) -> bytes | None:
    data = body.get(f"{field}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except ValueError as exc:
            raise KubeconfigError(f"{source}: {field}-data: not base64") from exc
    ref = body.get(field)
    if ref:
        file = Path(str(ref))
        try:
            return read_file(
                file if file.is_absolute() else source.parent / file, f"{source}: {what}"
            )
        except TLSConfigError as exc:
            raise KubeconfigError(str(exc)) from exc
    return None


def _grpc_servers(extension: Any, source: Path, cluster: str) -> str:
    """The addresses of a `tinykube.io/grpc` extension, comma-joined: its `server` (one
    address, or several separated by commas) and its `servers` (a list), in that order."""
    if extension is None:
        return ""
    if not isinstance(extension, dict):
        raise KubeconfigError(f'{source}: cluster "{cluster}": {GRPC_EXTENSION}: not a map')
    servers = extension.get("servers") or []
    if isinstance(servers, str):
        servers = [servers]
    if not isinstance(servers, list) or not all(isinstance(a, str) for a in servers):
        raise KubeconfigError(
            f'{source}: cluster "{cluster}": {GRPC_EXTENSION}.servers: '
            "must be a list of host:port addresses"
        )
    return ",".join(split_addresses([str(extension.get("server") or ""), *servers]))


def load(
    path: str | os.PathLike[str] | Sequence[Path] | None = None,
    *,
    context: str = "",
    env: dict[str, str] | None = None,
) -> ClientConfig:
    """The current context of the kubeconfig at `path` (or `$KUBECONFIG`'s files, merged)."""
    if path is None:
        files = paths_from_env(env)
        if not files:
            raise KubeconfigError("no kubeconfig: pass --kubeconfig or set $KUBECONFIG")
    elif isinstance(path, (str, os.PathLike)):
        files = [Path(path)]
    else:
        files = list(path)
    clusters: dict[str, Any] = {}
    users: dict[str, Any] = {}
    contexts: dict[str, Any] = {}
    current = ""
    for file in files:
        if path is None and not file.exists():
            continue  # kubectl skips $KUBECONFIG entries that do not exist
        doc = _read(file)
        for merged, found in (
            (clusters, _named(doc, "clusters", "cluster", file)),
            (users, _named(doc, "users", "user", file)),
            (contexts, _named(doc, "contexts", "context", file)),
        ):
            for key, value in found.items():
                merged.setdefault(key, value)
        current = current or str(doc.get("current-context") or "")
    where = ", ".join(str(f) for f in files)
    name = context or current
    if not name:
        raise KubeconfigError(f"kubeconfig {where}: no current-context is set")
    if name not in contexts:
        raise KubeconfigError(f'kubeconfig {where}: context "{name}" does not exist')
    ctx, _ = contexts[name]
    cluster_name = str(ctx.get("cluster") or "")
    if cluster_name not in clusters:
        raise KubeconfigError(f'kubeconfig {where}: cluster "{cluster_name}" does not exist')
    cluster, cluster_src = clusters[cluster_name]
    user, user_src = users.get(str(ctx.get("user") or ""), ({}, files[0]))
    server = str(cluster.get("server") or "")
    if not server:
        raise KubeconfigError(f'{cluster_src}: cluster "{cluster_name}" has no server')
    url = urlsplit(server if "://" in server else f"https://{server}")
    grpc_server = ""
    for ext in cluster.get("extensions") or []:
        if isinstance(ext, dict) and ext.get("name") == GRPC_EXTENSION:
            grpc_server = _grpc_servers(ext.get("extension"), cluster_src, cluster_name)
    if not grpc_server and url.hostname:
        host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
        grpc_server = f"{host}:{url.port or (443 if url.scheme == 'https' else 80)}"
    if url.scheme == "http":
        credentials = PLAINTEXT
    else:
        token = user.get("token")
        if not token and user.get("tokenFile"):
            token_file = Path(str(user["tokenFile"]))
            if not token_file.is_absolute():
                token_file = user_src.parent / token_file
            token = read_file(token_file, f"{user_src}: tokenFile").decode().strip()
        cert = _material(user, "client-certificate", user_src, what="client-certificate")
        key_pem = _material(user, "client-key", user_src, what="client-key")
        if (cert is None) != (key_pem is None):
            raise KubeconfigError(
                f"{user_src}: client-certificate and client-key must be given together"
            )
        credentials = Credentials(
            ca=_material(
                cluster, "certificate-authority", cluster_src, what="certificate-authority"
            ),
            cert=cert,
            key=key_pem,
            token=str(token) if token else None,
            server_name=str(cluster.get("tls-server-name") or "") or None,
        )
    return ClientConfig(
        server=server,
        grpc_server=grpc_server,
        namespace=str(ctx.get("namespace") or "default"),
        credentials=credentials,
        context=name,
    )
