"""Registry credentials from a pod's imagePullSecrets, as kube's credentialprovider keyring.

`credentials(secrets)` reads kubernetes.io/dockerconfigjson (`.dockerconfigjson`: `{"auths":
{registry: {...}}}`) and kubernetes.io/dockercfg (`.dockercfg`: `{registry: {...}}`) Secrets,
each entry's `username`/`password` or base64 `auth` ("user:password"). `matching(creds, image)`
is kube's keyring lookup: the entries whose registry (a host[:port], optionally with a path,
any `https://` scheme dropped, `*` globs in the host) matches the image's registry host and a
prefix of its repository path, longest key first. The kubelet tries them in order (then no
credentials at all when none match), as kube's puller does. Pure functions.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
from dataclasses import dataclass

from tinykube.v1 import secret_pb2

DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
DOCKER_CFG = "kubernetes.io/dockercfg"
DEFAULT_REGISTRY = "docker.io"
# Docker Hub's legacy keys, all meaning docker.io.
_HUB_KEYS = ("index.docker.io", "registry-1.docker.io", "registry.hub.docker.com")


@dataclass(frozen=True)
class Credential:
    # The key as written in the secret, normalised: host[:port][/path].
    registry: str
    username: str
    password: str


def _entries(secret: secret_pb2.Secret) -> dict[str, object]:
    try:
        if secret.type == DOCKER_CONFIG_JSON and ".dockerconfigjson" in secret.data:
            doc = json.loads(secret.data[".dockerconfigjson"])
            auths = doc.get("auths", {}) if isinstance(doc, dict) else {}
            return auths if isinstance(auths, dict) else {}
        if secret.type == DOCKER_CFG and ".dockercfg" in secret.data:
            doc = json.loads(secret.data[".dockercfg"])
            return doc if isinstance(doc, dict) else {}
    except ValueError:
        return {}
    return {}


def _normalise(key: str) -> str:
    for scheme in ("https://", "http://"):
        if key.startswith(scheme):
            key = key[len(scheme) :]
    key = key.rstrip("/")
    host, _, path = key.partition("/")
    if host in _HUB_KEYS:
        host = DEFAULT_REGISTRY
    # docker's legacy key for Hub is https://index.docker.io/v1/
    if host == DEFAULT_REGISTRY and path == "v1":
        path = ""
    return f"{host}/{path}" if path else host


def credentials(secrets: list[secret_pb2.Secret]) -> list[Credential]:
    out: list[Credential] = []
    for secret in secrets:
        for key, entry in _entries(secret).items():
            if not isinstance(entry, dict):
                continue
            username = str(entry.get("username", ""))
            password = str(entry.get("password", ""))
            auth = entry.get("auth")
            if isinstance(auth, str) and auth and not username:
                try:
                    user, _, pw = base64.b64decode(auth).decode().partition(":")
                except (binascii.Error, UnicodeDecodeError):
                    continue
                username, password = user, pw
            out.append(Credential(_normalise(str(key)), username, password))
    return out


def image_registry(image: str) -> tuple[str, str]:
    """The image's registry host and repository path (docker's reference rules: the first
    component is a registry if it holds a '.' or ':' or is localhost)."""
    name = image.split("@", 1)[0]
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = DEFAULT_REGISTRY, name if rest else f"library/{name}"
    path = path.rsplit(":", 1)[0] if ":" in path.rsplit("/", 1)[-1] else path
    return host, path


def matching(creds: list[Credential], image: str) -> list[Credential]:
    host, path = image_registry(image)
    found = []
    for cred in creds:
        key_host, _, key_path = cred.registry.partition("/")
        if not fnmatch.fnmatchcase(host, key_host):
            continue
        if key_path and not (path == key_path or path.startswith(key_path + "/")):
            continue
        found.append(cred)
    # kube's keyring: the most specific key first.
    found.sort(key=lambda c: len(c.registry), reverse=True)
    return found
