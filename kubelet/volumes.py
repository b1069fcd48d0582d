"""A pod's volumes on its node, as the kubelet's volume manager prepares them.

`VolumeManager.setup(pod)` makes every volume of the pod ready before its containers start and
returns where each one is on the node; `teardown(uid)` removes them when the pod is gone. The
layout is kube's: `<root-dir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<volume>`.

- emptyDir: a directory; with medium Memory a tmpfs mounted there (sizeLimit its size) when
  the kubelet runs as root, else a plain directory (no way to mount without privileges).
- hostPath: the node's path itself, checked against `type` as kube's hostPath plugin does
  (DirectoryOrCreate and FileOrCreate create it; the others must exist and be of that kind).
- configMap, secret, downwardAPI, projected: files written by `AtomicWriter`, kube's atomic
  writer: the payload goes to a fresh hidden `..<timestamp>` directory, the `..data` symlink is
  swapped to it with one rename, and each top-level name is a symlink through `..data`, so a
  reader sees either the old set of files or the new one, never a mix. Items select keys
  (`key` to `path`, `mode`); defaultMode is 0644 when unset. With `cache` (the kubelet sets
  it: kubelet/objectcache.py, kube's watch-based manager) the ConfigMaps and Secrets come from
  watches of exactly the objects the node's pods mount, and a change rewrites the files at the
  pod's next sync (the cache wakes its worker); the volumes are also rewritten every `resync`
  seconds (downward API, tokens). Without a cache they are re-read with a GET every `resync`
  seconds. Either way a changed ConfigMap or Secret shows in the running container's files.
  A missing ConfigMap or Secret that is not optional stops the pod's containers from starting
  with kube's message (`configmap "x" not found`), retried.
- projected serviceAccountToken: a token from TokenRequest (`mint_token`, bound to the pod),
  fetched again once 80% of its lifetime has passed (kube's token manager), or after a day.
  The audience defaults to the apiserver's.

Concurrency: coroutines on the kubelet's loop; a pod's worker is the only caller for its pod.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import ssl
import stat
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import aiohttp

from kubelet.envvars import (
    ContainerConfigError,
    EnvAPI,
    _Fetcher,
    pod_field_value,
    resource_value,
)
from kubelet.objectcache import ObjectCache
from tinykube.podrefs import Reference, volume_references
from tinykube.quantity import parse_quantity
from tinykube.v1 import configmap_pb2, pod_pb2, secret_pb2

log = logging.getLogger(__name__)

DEFAULT_MODE = 0o644
DATA_DIR = "..data"
_DATA_TMP = "..data_tmp"

# (namespace, service account, audience ("" the apiserver's), expirationSeconds, pod name,
# pod uid) -> (token, its expiry as epoch seconds).
TokenMinter = Callable[[str, str, str, int, str, str], Awaitable[tuple[str, float]]]

PLUGIN_DIRS = {
    "emptyDir": "kubernetes.io~empty-dir",
    "configMap": "kubernetes.io~configmap",
    "secret": "kubernetes.io~secret",
    "downwardAPI": "kubernetes.io~downward-api",
    "projected": "kubernetes.io~projected",
}


class AtomicWriter:
    """kube's AtomicWriter over one target directory."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def current(self) -> dict[str, tuple[bytes, int]]:
        data = self.target / DATA_DIR
        out: dict[str, tuple[bytes, int]] = {}
        if not data.is_dir():
            return out
        for path in data.rglob("*"):
            if path.is_file():
                out[str(path.relative_to(data))] = (
                    path.read_bytes(),
                    stat.S_IMODE(path.stat().st_mode),
                )
        return out

    def write(self, payload: Mapping[str, tuple[bytes, int]]) -> bool:
        """Make the directory hold exactly `payload` (relative path -> content, mode); False
        when it already did (nothing written)."""
        self.target.mkdir(parents=True, exist_ok=True)
        if (self.target / DATA_DIR).exists() and self.current() == dict(payload):
            return False
        stamp = self.target / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.time_ns() % 10**9}"
        stamp.mkdir()
        for rel, (content, mode) in payload.items():
            path = stamp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            path.chmod(mode)
        tmp_link = self.target / _DATA_TMP
        with contextlib.suppress(FileNotFoundError):
            tmp_link.unlink()
        tmp_link.symlink_to(stamp.name)
        old = os.readlink(self.target / DATA_DIR) if (self.target / DATA_DIR).is_symlink() else ""
        tmp_link.replace(self.target / DATA_DIR)
        tops = {rel.split("/", 1)[0] for rel in payload}
        for top in tops:
            link = self.target / top
            if not link.is_symlink():
                link.symlink_to(f"{DATA_DIR}/{top}")
        for entry in self.target.iterdir():
            if entry.name.startswith("..") or entry.name in tops:
                continue
            if entry.is_symlink():
                entry.unlink()
        if old and old != stamp.name:
            shutil.rmtree(self.target / old, ignore_errors=True)
        return True


@dataclass
class _Token:
    token: str = ""
    issued: float = 0.0
    expires: float = 0.0

    def stale(self, now: float) -> bool:
        lifetime = self.expires - self.issued
        return not self.token or now >= self.issued + min(0.8 * lifetime, 86400.0)


@dataclass
class _PodVolumes:
    paths: dict[str, Path] = field(default_factory=dict)
    next_sync: float = 0.0
    tokens: dict[tuple[str, str], _Token] = field(default_factory=dict)
    tmpfs: list[Path] = field(default_factory=list)
    # What the cache held of the pod's ConfigMaps and Secrets at the last setup.
    versions: tuple[tuple[Reference, bool, str], ...] = ()


def _versions(cache: ObjectCache, pod: pod_pb2.Pod) -> tuple[tuple[Reference, bool, str], ...]:
    out = []
    for ref in sorted(volume_references(pod)):
        synced, obj = cache.get(ref)
        out.append((ref, synced, obj.metadata.resourceVersion if obj is not None else ""))
    return tuple(out)


class _CachedFetcher(_Fetcher):
    """Reads from the watch-based cache once its watch has synced, else GETs."""

    def __init__(self, api: EnvAPI | None, namespace: str, cache: ObjectCache) -> None:
        super().__init__(api, namespace)
        self.cache = cache

    async def config_map(self, name: str, optional: bool) -> configmap_pb2.ConfigMap | None:
        synced, obj = self.cache.get(("configmaps", self.namespace, name))
        if not synced:
            return await super().config_map(name, optional)
        if obj is None and not optional:
            raise ContainerConfigError(f'configmap "{name}" not found')
        found: configmap_pb2.ConfigMap | None = obj
        return found

    async def secret(self, name: str, optional: bool) -> secret_pb2.Secret | None:
        synced, obj = self.cache.get(("secrets", self.namespace, name))
        if not synced:
            return await super().secret(name, optional)
        if obj is None and not optional:
            raise ContainerConfigError(f'secret "{name}" not found')
        found: secret_pb2.Secret | None = obj
        return found


def _labels_text(values: Mapping[str, str]) -> str:
    """kube's fieldpath.FormatMap: `key="value"` lines, sorted, values Go-quoted."""
    lines = []
    for key in sorted(values):
        quoted = values[key].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines.append(f'{key}="{quoted}"')
    return "\n".join(lines)


class VolumeManager:
    """The volumes of the pods of one kubelet."""

    def __init__(
        self,
        pods_root: Path,
        *,
        resync: float = 5.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.root = pods_root
        self.resync = resync
        self.now = now
        self.api: EnvAPI | None = None
        self.mint_token: TokenMinter | None = None
        self.allocatable: Callable[[str], Mapping[str, str]] = lambda _node: {}
        self._pods: dict[str, _PodVolumes] = {}
        self.as_root = os.geteuid() == 0
        # The watch-based cache of the ConfigMaps and Secrets the pods mount
        # (kubelet/objectcache.py); None: GET them at each resync.
        self.cache: ObjectCache | None = None

    def volume_dir(self, uid: str, plugin: str, name: str) -> Path:
        return self.root / uid / "volumes" / PLUGIN_DIRS[plugin] / name

    def paths(self, uid: str) -> dict[str, Path]:
        state = self._pods.get(uid)
        return dict(state.paths) if state else {}

    async def setup(self, pod: pod_pb2.Pod, *, force: bool = False) -> dict[str, Path]:
        """Every volume of the pod ready; its node path per volume name. Raises
        ContainerConfigError (kube's message) when one cannot be made yet."""
        uid = pod.metadata.uid
        state = self._pods.setdefault(uid, _PodVolumes())
        now = self.now()
        fetcher: _Fetcher
        if self.cache is not None:
            self.cache.register(pod)
            fetcher = _CachedFetcher(self.api, pod.metadata.namespace, self.cache)
            versions = _versions(self.cache, pod)
        else:
            fetcher = _Fetcher(self.api, pod.metadata.namespace)
            versions = ()
        if (
            not force
            and now < state.next_sync
            and len(state.paths) == len(pod.spec.volumes)
            and versions == state.versions
        ):
            return dict(state.paths)
        for vol in pod.spec.volumes:
            state.paths[vol.name] = await self._setup_one(pod, vol, state, fetcher, now)
        state.next_sync = now + self.resync
        state.versions = versions
        return dict(state.paths)

    async def _setup_one(
        self,
        pod: pod_pb2.Pod,
        vol: pod_pb2.Volume,
        state: _PodVolumes,
        fetcher: _Fetcher,
        now: float,
    ) -> Path:
        uid = pod.metadata.uid
        kind = _source(vol)
        if kind == "hostPath":
            return _host_path(vol.hostPath)
        target = self.volume_dir(uid, kind, vol.name)
        if kind == "emptyDir":
            if not target.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                target.chmod(0o777)
                if vol.emptyDir.medium == "Memory" and self.as_root:
                    self._mount_tmpfs(target, vol.emptyDir.sizeLimit, state)
                self._own(pod, target, read_only=False)
            return target
        payload: dict[str, tuple[bytes, int]] = {}
        if kind == "configMap":
            src = vol.configMap
            mode = src.defaultMode if src.HasField("defaultMode") else DEFAULT_MODE
            cm = await fetcher.config_map(src.name, src.optional)
            data = {} if cm is None else _cm_data(cm)
            payload = _items(data, src.items, mode, "ConfigMap", pod, src.name, src.optional)
        elif kind == "secret":
            src_s = vol.secret
            mode = src_s.defaultMode if src_s.HasField("defaultMode") else DEFAULT_MODE
            sec = await fetcher.secret(src_s.secretName, src_s.optional)
            data = {} if sec is None else dict(sec.data)
            payload = _items(
                data, src_s.items, mode, "Secret", pod, src_s.secretName, src_s.optional
            )
        elif kind == "downwardAPI":
            mode = (
                vol.downwardAPI.defaultMode
                if vol.downwardAPI.HasField("defaultMode")
                else DEFAULT_MODE
            )
            payload = self._downward(pod, vol.downwardAPI.items, mode)
        else:
            payload = await self._projected(pod, vol, state, fetcher, now)
        if self._fs_group(pod) is not None:
            # The group's read bit is part of what is written (and compared next time).
            payload = {k: (c, m | stat.S_IRUSR | stat.S_IRGRP) for k, (c, m) in payload.items()}
        if AtomicWriter(target).write(payload):
            self._own(pod, target, read_only=True)
            log.info(
                "pod %s/%s: volume %s written", pod.metadata.namespace, pod.metadata.name, vol.name
            )
        return target

    def _fs_group(self, pod: pod_pb2.Pod) -> int | None:
        psc = pod.spec.securityContext
        return psc.fsGroup if psc.HasField("fsGroup") and self.as_root else None

    def _own(self, pod: pod_pb2.Pod, target: Path, *, read_only: bool) -> None:
        """kube's SetVolumeOwnership for the pod's fsGroup (a root kubelet only). kube's
        emptyDir, configMap, secret, downwardAPI and projected plugins pass no
        fsGroupChangePolicy (nil): these volumes are changed whole every time, whatever the pod
        says; the policy is for persistent volumes, which tinykube does not have yet."""
        gid = self._fs_group(pod)
        if gid is not None:
            set_volume_ownership(target, gid, None, read_only=read_only)

    def _downward(
        self,
        pod: pod_pb2.Pod,
        items: Iterable[pod_pb2.DownwardAPIVolumeFile],
        default_mode: int,
    ) -> dict[str, tuple[bytes, int]]:
        out: dict[str, tuple[bytes, int]] = {}
        for item in items:
            mode = item.mode if item.HasField("mode") else default_mode
            if item.HasField("fieldRef"):
                path = item.fieldRef.fieldPath
                if path == "metadata.labels":
                    text = _labels_text(pod.metadata.labels)
                elif path == "metadata.annotations":
                    text = _labels_text(pod.metadata.annotations)
                else:
                    text = pod_field_value(pod, item.fieldRef, "", "")
            else:
                ref = item.resourceFieldRef
                container = next(
                    (
                        c
                        for c in (*pod.spec.containers, *pod.spec.initContainers)
                        if c.name == ref.containerName
                    ),
                    None,
                )
                if container is None:
                    raise ContainerConfigError(f"container {ref.containerName} not found")
                text = resource_value(pod, container, ref, self.allocatable(pod.spec.nodeName))
            out[item.path] = (text.encode(), mode)
        return out

    async def _projected(
        self,
        pod: pod_pb2.Pod,
        vol: pod_pb2.Volume,
        state: _PodVolumes,
        fetcher: _Fetcher,
        now: float,
    ) -> dict[str, tuple[bytes, int]]:
        proj = vol.projected
        mode = proj.defaultMode if proj.HasField("defaultMode") else DEFAULT_MODE
        out: dict[str, tuple[bytes, int]] = {}
        for src in proj.sources:
            if src.HasField("configMap"):
                cm = await fetcher.config_map(src.configMap.name, src.configMap.optional)
                data = {} if cm is None else _cm_data(cm)
                out.update(
                    _items(
                        data,
                        src.configMap.items,
                        mode,
                        "ConfigMap",
                        pod,
                        src.configMap.name,
                        src.configMap.optional,
                    )
                )
            elif src.HasField("secret"):
                sec = await fetcher.secret(src.secret.name, src.secret.optional)
                data = {} if sec is None else dict(sec.data)
                out.update(
                    _items(
                        data,
                        src.secret.items,
                        mode,
                        "Secret",
                        pod,
                        src.secret.name,
                        src.secret.optional,
                    )
                )
            elif src.HasField("downwardAPI"):
                out.update(self._downward(pod, src.downwardAPI.items, mode))
            elif src.HasField("serviceAccountToken"):
                tok = src.serviceAccountToken
                key = (vol.name, tok.path)
                cached = state.tokens.setdefault(key, _Token())
                if cached.stale(now):
                    if self.mint_token is None:
                        raise ContainerConfigError(
                            "failed to fetch token: the kubelet has no TokenRequest client"
                        )
                    seconds = tok.expirationSeconds if tok.HasField("expirationSeconds") else 3600
                    try:
                        token, expires = await self.mint_token(
                            pod.metadata.namespace,
                            pod.spec.serviceAccountName or "default",
                            tok.audience,
                            seconds,
                            pod.metadata.name,
                            pod.metadata.uid,
                        )
                    except ContainerConfigError:
                        if not cached.token:
                            raise
                        log.warning(
                            "pod %s/%s: token refresh failed; keeping the old one",
                            pod.metadata.namespace,
                            pod.metadata.name,
                        )
                    else:
                        cached.token, cached.issued, cached.expires = token, now, expires
                out[tok.path] = (cached.token.encode(), mode)
        return out

    def _mount_tmpfs(self, target: Path, size: str, state: _PodVolumes) -> None:
        options = "mode=0777" + (f",size={_bytes(size)}" if size else "")
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ContainerConfigError(f"mount tmpfs at {target}: {result.stderr.strip()}")
        state.tmpfs.append(target)

    def teardown(self, uid: str) -> None:
        """Unmount the pod's tmpfs volumes and remove its volume directories."""
        if self.cache is not None:
            self.cache.unregister(uid)
        state = self._pods.pop(uid, None)
        volumes = self.root / uid / "volumes"
        mounted = list(state.tmpfs) if state else []
        if volumes.is_dir() and self.as_root:
            mounted += [
                p for p in (volumes / PLUGIN_DIRS["emptyDir"]).glob("*") if os.path.ismount(p)
            ]
        for target in dict.fromkeys(mounted):
            subprocess.run(["umount", str(target)], capture_output=True, check=False)
        shutil.rmtree(volumes, ignore_errors=True)


# kube's volume_linux.go masks: group read and write (read only for read-only volumes), and
# the execute (search) bits directories get.
_RW_MASK = 0o660
_RO_MASK = 0o440
_EXEC_MASK = 0o110


def set_volume_ownership(
    target: Path, gid: int, change_policy: str | None, *, read_only: bool
) -> bool:
    """kube's SetVolumeOwnership: every file and directory under `target` gets group `gid`
    (lchown, symlinks not followed), files group-readable (and -writable unless read-only),
    directories also searchable and setgid so new files inherit the group. With
    `change_policy` OnRootMismatch, nothing is done when the root already has the group,
    those permission bits and setgid (kube's skipPermissionChange); None or Always: the whole
    tree every time. False when it was skipped."""
    if change_policy == "OnRootMismatch" and not _requires_permission_change(
        target, gid, read_only
    ):
        log.debug("skipping permission and ownership change for volume %s", target)
        return False
    mask = _RO_MASK if read_only else _RW_MASK
    for root, dirs, files in os.walk(target):
        for name in [*dirs, *files, ""]:
            path = os.path.join(root, name) if name else root
            try:
                os.lchown(path, -1, gid)
                info = os.lstat(path)
                if stat.S_ISLNK(info.st_mode):
                    # chmod would change the file it points at, overriding its mode.
                    continue
                mode = stat.S_IMODE(info.st_mode) | mask
                if stat.S_ISDIR(info.st_mode):
                    mode |= stat.S_ISGID | _EXEC_MASK
                os.chmod(path, mode)
            except OSError as exc:
                log.warning("fsGroup %d on %s: %s", gid, path, exc)
    return True


def _requires_permission_change(target: Path, gid: int, read_only: bool) -> bool:
    """kube's requiresPermissionChange: the root's group differs, or it is not a directory,
    or its mode lacks the group bits the volume needs or setgid."""
    try:
        info = os.stat(target)
    except OSError:
        return True
    if info.st_gid != gid or not stat.S_ISDIR(info.st_mode):
        return True
    want = (_RO_MASK if read_only else _RW_MASK) | _EXEC_MASK
    return (stat.S_IMODE(info.st_mode) & want) != want or not info.st_mode & stat.S_ISGID


def _source(vol: pod_pb2.Volume) -> str:
    for kind in ("hostPath", "emptyDir", "secret", "downwardAPI", "configMap", "projected"):
        if vol.HasField(kind):
            return kind
    raise ContainerConfigError(f"volume {vol.name}: no volume source")


def _cm_data(cm: object) -> dict[str, bytes]:
    data = {k: v.encode() for k, v in cm.data.items()}  # type: ignore[attr-defined]
    data.update(cm.binaryData)  # type: ignore[attr-defined]
    return data


def _items(
    data: Mapping[str, bytes],
    items: Iterable[pod_pb2.KeyToPath],
    mode: int,
    kind: str,
    pod: pod_pb2.Pod,
    name: str,
    optional: bool,
) -> dict[str, tuple[bytes, int]]:
    if not items:
        return {key: (value, mode) for key, value in data.items()}
    out: dict[str, tuple[bytes, int]] = {}
    for item in items:
        if item.key not in data:
            if optional:
                continue
            raise ContainerConfigError(
                f"configmap references non-existent config key: {item.key}"
                if kind == "ConfigMap"
                else f"references non-existent secret key: {item.key}"
            )
        out[item.path] = (data[item.key], item.mode if item.HasField("mode") else mode)
    return out


def _bytes(size: str) -> int:
    return int(parse_quantity(size))


def _host_path(src: pod_pb2.HostPathVolumeSource) -> Path:
    path = Path(src.path)
    kind = src.type if src.HasField("type") else ""
    if kind == "DirectoryOrCreate":
        path.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate" and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o644)
    checks = {
        "Directory": (Path.is_dir, "is not a directory"),
        "File": (Path.is_file, "is not a file"),
        "Socket": (Path.is_socket, "is not a socket file"),
        "CharDevice": (Path.is_char_device, "is not a character device"),
        "BlockDevice": (Path.is_block_device, "is not a block device"),
        "DirectoryOrCreate": (Path.is_dir, "is not a directory"),
        "FileOrCreate": (Path.is_file, "is not a file"),
    }
    if kind in checks:
        check, what = checks[kind]
        if not path.exists():
            raise ContainerConfigError(f"hostPath type check failed: {src.path} does not exist")
        if not check(path):
            raise ContainerConfigError(f"hostPath type check failed: {src.path} {what}")
    return path


@dataclass(frozen=True)
class ContainerMount:
    """One volumeMount resolved: where the container sees it and what on the node it is."""

    container_path: str
    host_path: Path
    read_only: bool


def container_mounts(
    container: pod_pb2.Container, paths: Mapping[str, Path]
) -> list[ContainerMount]:
    """The container's mounts, in order; a subPath is made inside the volume when missing (as
    kube's kubelet does for a directory subPath). Raises ContainerConfigError for a mount of a
    volume not prepared, or a relative mountPath (a Linux kubelet refuses it)."""
    out = []
    for m in container.volumeMounts:
        if m.name not in paths:
            raise ContainerConfigError(
                f"cannot find volume {m.name!r} to mount into container {container.name!r}"
            )
        if not m.mountPath.startswith("/"):
            raise ContainerConfigError(
                f"mount path {m.mountPath!r} of container {container.name!r} is not absolute"
            )
        host = paths[m.name]
        if m.subPath:
            host = host / m.subPath
            if not host.exists():
                host.mkdir(parents=True, exist_ok=True)
        out.append(ContainerMount(m.mountPath, host, m.readOnly))
    return out


class RestTokenMinter:
    """A TokenMinter that asks the apiserver's REST API (TokenRequest, bound to the pod) with
    the kubelet's own credentials; the Node authorizer lets it ask only for its pods. One
    keep-alive HTTP client for all pods (a TLS handshake per token cost each pod start a few
    milliseconds of CPU on both ends); `close` it when the kubelet stops."""

    def __init__(self, server: str, ssl_context: ssl.SSLContext | None) -> None:
        self.server = server.rstrip("/")
        self.ssl_context = ssl_context
        self._session: aiohttp.ClientSession | None = None

    async def __call__(
        self, namespace: str, account: str, audience: str, seconds: int, pod: str, uid: str
    ) -> tuple[str, float]:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid},
            },
        }
        url = f"{self.server}/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        try:
            async with self._session.post(url, json=body, ssl=self.ssl_context or False) as resp:
                answer = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ContainerConfigError(f"failed to fetch token: {exc}") from None
        if resp.status != 201:
            message = answer.get("message", "") if isinstance(answer, dict) else ""
            raise ContainerConfigError(f"failed to fetch token: {message or resp.status}")
        status = answer["status"]
        expires = datetime.fromisoformat(status["expirationTimestamp"].replace("Z", "+00:00"))
        return str(status["token"]), expires.timestamp()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def rest_token_minter(server: str, ssl_context: ssl.SSLContext | None) -> RestTokenMinter:
    return RestTokenMinter(server, ssl_context)
