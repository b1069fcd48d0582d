"""The kubelet's pod lifecycle above any container runtime (kube's kuberuntime manager).

`KubeRuntime.sync_pod` is the one decision function, as kube's computePodActions with
SyncPod: observe exits, make the pod's sandbox ready (`_prepare_pod`; a runtime without
sandboxes has nothing to do), run init containers one at a time in order, each to success, then
start the app containers, restart them as restartPolicy Always/OnFailure/Never says with the
crash-loop back-off (10 s doubling to 300 s by default, reset after a container ran for twice
the maximum; waiting reason CrashLoopBackOff), stop and start again at once a running container
whose image changed (kube's container hash), show a failed pull's back-off as ImagePullBackOff,
and settle the pod's final phase. A container whose ConfigMap or Secret is missing waits with
CreateContainerConfigError, tried again after the initial back-off.

Runtimes (kubelet/process.py: local processes; kubelet/cri.py: a CRI runtime such as
containerd) differ only in how a container is started (`_launch`), observed (`_exit_status`,
`_adopted`) and stopped (`kill_pod`, `kill_container`, `_kill_changed`).

Every change is written to `<root>/pods/<uid>/state.json` (restart counts, last terminations,
what identifies each running instance), so a restarted kubelet adopts what still runs instead
of starting duplicates. A container found gone when the kubelet starts (`load`: the node
rebooted) is no crash: it starts again at once, restart count + 1, without back-off.

Concurrency: one event loop; a pod's worker is the only caller for its pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
from pathlib import Path

from google.protobuf.message import DecodeError

from kubelet.envvars import (
    CONFIG_ERROR_REASON,
    ContainerConfigError,
    EnvSources,
    make_environment,
)
from kubelet.lifecycle import (
    DEFAULT_GRACE_SECONDS,
    MIN_GRACE_SECONDS,
    ExecHook,
    run_hook,
    termination_message,
)
from kubelet.runtime import (
    RUNNING,
    TERMINATED,
    WAITING,
    ContainerRecord,
    PodRecord,
    Termination,
    as_container,
    definition_changed,
    initialized,
    pod_phase,
)
from kubelet.volumes import ContainerMount, VolumeManager, container_mounts
from tinykube.clock import Clock
from tinykube.v1 import pod_pb2

log = logging.getLogger(__name__)


class KubeRuntime:
    """The pod lifecycle; subclasses supply the container primitives."""

    # What an ephemeral container without a command runs (an image's entrypoint for a runtime
    # with images; the process runtime has none).
    ephemeral_default_command: tuple[str, ...] = ()

    def __init__(
        self,
        root_dir: Path,
        *,
        clock: Clock | None = None,
        backoff_initial: float = 10.0,
        backoff_max: float = 300.0,
        poll_interval: float = 0.5,
        node_ip: str = "127.0.0.1",
        env_sources: EnvSources | None = None,
    ) -> None:
        self.root = root_dir / "pods"
        self.node_ip = node_ip
        self.env_sources = env_sources or EnvSources(host_ip=lambda _node: node_ip)
        # pod uid -> container -> the variables its running instance was started with, for its
        # exec probes (after a kubelet restart: the spec's static ones).
        self._envs: dict[str, dict[str, dict[str, str]]] = {}
        # pod uid -> container -> the mounts its running instance was started with.
        self._mounts: dict[str, dict[str, list[ContainerMount]]] = {}
        self.clock = clock or Clock()
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.poll_interval: float | None = poll_interval
        self._pods: dict[str, PodRecord] = {}
        # (pod uid, container) found running in state.json but gone when `load` ran (the
        # node rebooted, or `tinykube up` stopped everything): restarted at once, no back-off.
        self._gone_at_load: set[tuple[str, str]] = set()
        # The pods' volumes (kubelet/volumes.py), under each pod's directory.
        self.volumes = VolumeManager(self.root)
        # pod uid -> why its volumes could not be set up at the last sync ("" when they were).
        self._volume_errors: dict[str, str] = {}
        # pod uid -> the pod as last synced: what the kill paths read preStop hooks from.
        self._specs: dict[str, pod_pb2.Pod] = {}
        # (pod uid, container) -> the message of a failed postStart hook, until the killed
        # container's exit is observed (it then waits with reason PostStartHookError).
        self._hook_failures: dict[tuple[str, str], str] = {}

    # ---- persistence ----
    def _pod_dir(self, uid: str) -> Path:
        return self.root / uid

    def _save(self, rec: PodRecord) -> None:
        directory = self._pod_dir(rec.uid)
        directory.mkdir(parents=True, exist_ok=True)
        data = {
            "uid": rec.uid,
            "namespace": rec.namespace,
            "name": rec.name,
            "start_time": rec.start_time,
            "final_phase": rec.final_phase,
            "final_reason": rec.final_reason,
            "final_message": rec.final_message,
            "sandbox_id": rec.sandbox_id,
            "pod_ips": rec.pod_ips,
            "containers": {n: c.to_json() for n, c in rec.containers.items()},
            "init_containers": {n: c.to_json() for n, c in rec.init_containers.items()},
            "ephemeral_containers": {n: c.to_json() for n, c in rec.ephemeral_containers.items()},
        }
        tmp = directory / "state.json.tmp"
        tmp.write_text(json.dumps(data))
        tmp.replace(directory / "state.json")

    def _save_spec(self, pod: pod_pb2.Pod) -> None:
        """Keep the pod as first synced in `<uid>/pod.pb`, so a restarted kubelet can stop
        its containers as the spec says (preStop hooks, grace period) even when the object
        is gone by then: kube's kubelet restores the same from its containers' labels."""
        directory = self._pod_dir(pod.metadata.uid)
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / "pod.pb.tmp"
        tmp.write_bytes(pod.SerializeToString())
        tmp.replace(directory / "pod.pb")

    def _load_spec(self, uid: str) -> None:
        try:
            data = (self._pod_dir(uid) / "pod.pb").read_bytes()
        except OSError:
            return
        pod = pod_pb2.Pod()
        try:
            pod.ParseFromString(data)
        except DecodeError as exc:
            log.warning("ignoring the unreadable spec of pod %s: %s", uid, exc)
            return
        self._specs[uid] = pod

    def orphan_grace(self, uid: str) -> float:
        pod = self._specs.get(uid)
        if pod is None:
            return 0.0
        if pod.spec.HasField("terminationGracePeriodSeconds"):
            return float(pod.spec.terminationGracePeriodSeconds)
        return float(DEFAULT_GRACE_SECONDS)

    def load(self) -> list[str]:
        if not self.root.is_dir():
            return []
        for state in sorted(self.root.glob("*/state.json")):
            try:
                data = json.loads(state.read_text())
                rec = PodRecord(
                    uid=data["uid"],
                    namespace=data["namespace"],
                    name=data["name"],
                    start_time=data["start_time"],
                    final_phase=data.get("final_phase", ""),
                    final_reason=data.get("final_reason", ""),
                    final_message=data.get("final_message", ""),
                    sandbox_id=data.get("sandbox_id", ""),
                    pod_ips=list(data.get("pod_ips", [])),
                    containers={
                        n: ContainerRecord.from_json(c) for n, c in data["containers"].items()
                    },
                    init_containers={
                        n: ContainerRecord.from_json(c)
                        for n, c in data.get("init_containers", {}).items()
                    },
                    ephemeral_containers={
                        n: ContainerRecord.from_json(c)
                        for n, c in data.get("ephemeral_containers", {}).items()
                    },
                )
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable state %s: %s", state, exc)
                continue
            self._pods[rec.uid] = rec
            self._load_spec(rec.uid)
            running = [
                c
                for c in (
                    *rec.init_containers.values(),
                    *rec.containers.values(),
                    *rec.ephemeral_containers.values(),
                )
                if c.state == RUNNING
            ]
            adopted = [c.name for c in running if self._adopted(c)]
            self._gone_at_load.update((rec.uid, c.name) for c in running if c.name not in adopted)
            log.info(
                "restored pod %s/%s (%s); adopted running containers: %s",
                rec.namespace,
                rec.name,
                rec.uid,
                ", ".join(adopted) or "none",
            )
        return list(self._pods)

    def known_pods(self) -> list[str]:
        return list(self._pods)

    def record(self, uid: str) -> PodRecord | None:
        return self._pods.get(uid)

    def instance_log(self, uid: str, container: str, instance: int) -> Path:
        """The log file of one instance (restart count) of a container."""
        return self._pod_dir(uid) / "logs" / container / f"{instance}.log"

    def log_path(self, uid: str, container: str, *, previous: bool = False) -> Path | None:
        """The instance `kubectl logs` shows, from this runtime's own record.

        The current instance is the running or terminated one, or, while a crashed container
        waits to restart, the one that crashed (Kubernetes shows lastState then, for plain and
        `--previous` alike). Previous is the instance before a running or terminated one. None
        if there is no previous instance.
        """
        rec = self._pods.get(uid)
        crec = None
        if rec is not None:
            crec = rec.containers.get(container) or rec.init_containers.get(container)
        if crec is None:
            return None if previous else self.instance_log(uid, container, 0)
        current = crec.restart_count
        if previous and crec.state != WAITING:
            if crec.last is None or current == 0:
                return None
            current -= 1
        elif previous and crec.last is None:
            return None
        return self.instance_log(uid, container, current)

    # ---- the lifecycle ----
    def _now(self) -> float:
        return self.clock.now().timestamp()

    def _backoff(self, crec: ContainerRecord) -> float:
        delay = min(self.backoff_initial * (2**crec.backoff_exp), self.backoff_max)
        crec.backoff_exp += 1
        return float(delay)

    async def _observe_exits(
        self,
        pod: pod_pb2.Pod,
        rec: PodRecord,
        records: dict[str, ContainerRecord],
        init: bool,
        *,
        restarts: bool = True,
    ) -> bool:
        changed = False
        policy = pod.spec.restartPolicy or "Always"
        for crec in records.values():
            if crec.state != RUNNING:
                continue
            term = await self._exit_status(rec.uid, crec)
            if term is None:
                continue
            term = self._with_message(rec.uid, crec, term)
            changed = True
            log.info(
                "pod %s/%s container %s exited with %d",
                rec.namespace,
                rec.name,
                crec.name,
                term.exit_code,
            )
            if term.finished_at - crec.started_at >= 2 * self.backoff_max:
                crec.backoff_exp = 0  # it ran long enough to forget earlier crashes
            if init:
                # An init container that succeeded is done; one that failed is retried unless
                # the pod's restartPolicy is Never.
                restart = term.exit_code != 0 and policy != "Never"
            else:
                restart = policy == "Always" or (policy == "OnFailure" and term.exit_code != 0)
            restart = restart and restarts
            lost_at_load = (rec.uid, crec.name) in self._gone_at_load
            self._gone_at_load.discard((rec.uid, crec.name))
            hook_failure = self._hook_failures.pop((rec.uid, crec.name), "")
            if restart and hook_failure:
                # kube's reason cache: the start failed (PostStartHookError) until the next.
                crec.last = term
                crec.terminated = None
                crec.next_start = term.finished_at + self._backoff(crec)
                crec.state = WAITING
                crec.waiting_reason = "PostStartHookError"
                crec.waiting_message = hook_failure
            elif restart and lost_at_load:
                # Lost while no kubelet ran, not a crash: start it again now, as a kubelet
                # does after a node reboot (the restart count still grows).
                crec.last = term
                crec.terminated = None
                crec.next_start = term.finished_at
                crec.state = WAITING
                crec.waiting_reason = "ContainerCreating"
                crec.waiting_message = ""
            elif restart:
                rec.events.append(
                    (
                        "Warning",
                        "BackOff",
                        f"Back-off restarting failed container {crec.name} in pod "
                        f"{rec.name}_{rec.namespace}({rec.uid})",
                    )
                )
                crec.last = term
                crec.terminated = None
                delay = self._backoff(crec)
                crec.next_start = term.finished_at + delay
                crec.state = WAITING
                crec.waiting_reason = "CrashLoopBackOff"
                crec.waiting_message = (
                    f"back-off {delay:g}s restarting failed container={crec.name} "
                    f"pod={rec.name}_{rec.namespace}({rec.uid})"
                )
            else:
                crec.state = TERMINATED
                crec.terminated = term
        return changed

    def _config_error(self, rec: PodRecord, crec: ContainerRecord, message: str) -> None:
        """The container cannot be configured (kube's CreateContainerConfigError): it waits
        and is tried again after the initial back-off (not doubled: kube's pod worker retries
        a failed sync every 10 s)."""
        crec.state = WAITING
        crec.waiting_reason = CONFIG_ERROR_REASON
        crec.waiting_message = message
        crec.next_start = self._now() + self.backoff_initial
        log.warning("pod %s/%s container %s: %s", rec.namespace, rec.name, crec.name, message)
        rec.events.append(("Warning", "Failed", f"Error: {message}"))

    async def _start(
        self, pod: pod_pb2.Pod, rec: PodRecord, container: pod_pb2.Container, crec: ContainerRecord
    ) -> None:
        if self._volume_errors.get(rec.uid):
            self._config_error(rec, crec, self._volume_errors[rec.uid])
            return
        try:
            resolved = await make_environment(pod, container, self.env_sources)
            mounts = container_mounts(container, self.volumes.paths(rec.uid))
        except ContainerConfigError as exc:
            self._config_error(rec, crec, str(exc))
            return
        message_mount = self._message_file(rec.uid, container, crec)
        if message_mount is not None:
            mounts = [*mounts, message_mount]
        self._envs.setdefault(rec.uid, {})[container.name] = resolved
        self._mounts.setdefault(rec.uid, {})[container.name] = mounts
        await self._launch(pod, rec, container, crec, resolved)
        if crec.state == RUNNING and container.lifecycle.HasField("postStart"):
            await self._post_start(pod, rec, container, crec)

    # ---- lifecycle hooks and termination messages (kubelet/lifecycle.py) ----

    def _message_file(
        self, uid: str, container: pod_pb2.Container, crec: ContainerRecord
    ) -> ContainerMount | None:
        """A fresh empty file (mode 0666) for the instance about to start, seen by the
        container at its terminationMessagePath, as kube's makeMounts makes it
        (`<pod dir>/containers/<name>/<random id>`); the previous instance's is removed (its
        message is already in the container's lastState)."""
        if crec.message_file:
            with contextlib.suppress(OSError):
                os.unlink(crec.message_file)
        crec.message_file = ""
        crec.message_policy = container.terminationMessagePolicy or "File"
        if not container.terminationMessagePath:
            return None
        directory = self._pod_dir(uid) / "containers" / container.name
        path = directory / secrets.token_hex(4)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path.touch()
            path.chmod(0o666)
        except OSError as exc:
            log.warning("termination-log file %s: %s", path, exc)
            return None
        crec.message_file = str(path)
        return ContainerMount(container.terminationMessagePath, path, False)

    def _with_message(self, uid: str, crec: ContainerRecord, term: Termination) -> Termination:
        """The termination with what the container left at its terminationMessagePath (or its
        log's tail) appended to the runtime's message, as kube's convertToKubeContainerStatus."""
        text = termination_message(
            crec.message_file,
            crec.message_policy,
            term.exit_code,
            term.reason,
            self.instance_log(uid, crec.name, crec.restart_count),
        )
        if text:
            term.message = f"{term.message}: {text}" if term.message else text
        return term

    def _hook_ip(self, uid: str) -> str:
        rec = self._pods.get(uid)
        return rec.pod_ips[0] if rec is not None and rec.pod_ips else self.node_ip

    async def _run_hook(
        self,
        pod: pod_pb2.Pod,
        container: pod_pb2.Container,
        crec: ContainerRecord,
        handler: pod_pb2.LifecycleHandler,
    ) -> str:
        return await run_hook(
            handler,
            pod,
            container,
            exec_hook=self._exec_hook(pod, container, crec),
            pod_ip=self._hook_ip(pod.metadata.uid),
            sleep=self.clock.sleep,
        )

    async def _post_start(
        self, pod: pod_pb2.Pod, rec: PodRecord, container: pod_pb2.Container, crec: ContainerRecord
    ) -> None:
        """kube's startContainer step 4: run the postStart hook; if it fails, kill the
        container (its preStop hook runs first, as kube's killContainer does) and have it
        wait with reason PostStartHookError once its exit is observed."""
        message = await self._run_hook(pod, container, crec, container.lifecycle.postStart)
        if not message:
            return
        log.warning("pod %s/%s container %s: %s", rec.namespace, rec.name, crec.name, message)
        rec.events.append(("Warning", "FailedPostStartHook", "PostStartHook failed"))
        self._hook_failures[(rec.uid, crec.name)] = message
        grace = (
            pod.spec.terminationGracePeriodSeconds
            if pod.spec.HasField("terminationGracePeriodSeconds")
            else 30
        )
        await self.kill_container(rec.uid, crec.name, float(grace), "FailedPostStartHook")

    async def _pre_stop(self, uid: str, crec: ContainerRecord, grace: float) -> float:
        """Run the container's preStop hook inside `grace` (kube's executePreStopHook); the
        grace left for stopping it: what the hook did not use, in whole seconds as kube
        counts, at least MIN_GRACE_SECONDS. No hook, or no grace: `grace` unchanged."""
        pod = self._specs.get(uid)
        container = None
        if pod is not None:
            container = next((c for c in pod.spec.containers if c.name == crec.name), None)
        if pod is None or container is None or grace <= 0:
            return grace
        if not container.lifecycle.HasField("preStop"):
            return grace
        started = self.clock.monotonic()
        try:
            async with asyncio.timeout(grace):
                message = await self._run_hook(pod, container, crec, container.lifecycle.preStop)
        except TimeoutError:
            log.info(
                "pod %s container %s: preStop hook not completed in grace period %gs",
                uid,
                crec.name,
                grace,
            )
        else:
            if message:
                log.warning("pod %s container %s: %s", uid, crec.name, message)
                rec = self._pods.get(uid)
                if rec is not None:
                    # Not the hook's output: it may hold secrets (kube words it so too).
                    rec.events.append(("Warning", "FailedPreStopHook", "PreStopHook failed"))
        used = int(self.clock.monotonic() - started)
        return float(max(MIN_GRACE_SECONDS, grace - used))

    async def _setup_volumes(self, pod: pod_pb2.Pod, rec: PodRecord) -> None:
        """Prepare (or refresh) the pod's volumes; a failure is kept for the containers that
        start next, which wait with CreateContainerConfigError and kube's message. Before the
        pod's first container, the time it took is one of the pod's startup stages."""
        if not pod.spec.volumes:
            return
        if not rec.containers and not rec.init_containers:
            started = self._now()
            try:
                await self._set_up(pod)
            finally:
                rec.timings.append(("volumes", started, self._now()))
        else:
            await self._set_up(pod)

    async def _set_up(self, pod: pod_pb2.Pod) -> None:
        try:
            await self.volumes.setup(pod)
        except ContainerConfigError as exc:
            self._volume_errors[pod.metadata.uid] = f"failed to set up volumes: {exc}"
        except OSError as exc:
            self._volume_errors[pod.metadata.uid] = f"failed to set up volumes: {exc}"
        else:
            self._volume_errors.pop(pod.metadata.uid, None)

    async def _prepare_pod(self, pod: pod_pb2.Pod, rec: PodRecord) -> bool:
        """Make the pod's sandbox ready (kube's computePodActions: create or recreate it);
        False while it cannot be, its containers then waiting. Processes need none."""
        return True

    def _backing_off(
        self, rec: PodRecord, container: pod_pb2.Container, crec: ContainerRecord
    ) -> bool:
        """A container waiting out a back-off: after a failed pull its reason turns from
        ErrImagePull to ImagePullBackOff, as the kubelet's image manager shows it. True if the
        record changed."""
        if crec.waiting_reason != "ErrImagePull":
            return False
        crec.waiting_reason = "ImagePullBackOff"
        crec.waiting_message = f'Back-off pulling image "{container.image}"'
        rec.events.append(("Normal", "BackOff", crec.waiting_message))
        return True

    async def sync_pod(self, pod: pod_pb2.Pod) -> PodRecord:
        self._before_sync()
        uid = pod.metadata.uid
        if uid not in self._specs:
            self._save_spec(pod)
        self._specs[uid] = pod
        rec = self._pods.get(uid)
        changed = False
        if rec is None:
            rec = PodRecord(uid, pod.metadata.namespace, pod.metadata.name, self._now())
            self._pods[uid] = rec
            changed = True
        if rec.final_phase:
            return rec
        changed |= await self._observe_exits(pod, rec, rec.init_containers, init=True)
        changed |= await self._observe_exits(pod, rec, rec.containers, init=False)
        changed |= await self._observe_exits(
            pod, rec, rec.ephemeral_containers, init=False, restarts=False
        )
        now = self._now()
        # The volumes are needed by the containers, not by the sandbox: both are made at once
        # (a sandbox takes the runtime a second or more on a busy node).
        if pod.metadata.HasField("deletionTimestamp"):
            ready = await self._prepare_pod(pod, rec)
        else:
            _, ready = await asyncio.gather(
                self._setup_volumes(pod, rec), self._prepare_pod(pod, rec)
            )
        if not ready:
            pass  # no sandbox yet: containers wait (the runtime recorded why)
        elif not initialized(pod, rec):
            # Init containers run one at a time, in order, each to success.
            for container in pod.spec.initContainers:
                crec = rec.init_containers.get(container.name)
                if crec is None:
                    crec = rec.init_containers[container.name] = ContainerRecord(container.name)
                    changed = True
                if crec.state == TERMINATED and crec.terminated and crec.terminated.exit_code == 0:
                    continue
                if crec.state == WAITING and now >= crec.next_start:
                    await self._start(pod, rec, container, crec)
                    changed = True
                break
        else:
            for container in pod.spec.containers:
                crec = rec.containers.get(container.name)
                if crec is None:
                    crec = rec.containers[container.name] = ContainerRecord(container.name)
                    changed = True
                if definition_changed(container, crec):
                    await self._kill_changed(pod, rec, crec)
                elif crec.state == WAITING and crec.image and crec.image != container.image:
                    # Kube's back-off is per container hash: a new image starts afresh, now.
                    crec.next_start, crec.backoff_exp = 0.0, 0
                if crec.state == WAITING and now < crec.next_start:
                    changed |= self._backing_off(rec, container, crec)
                if crec.state != WAITING or now < crec.next_start:
                    continue
                await self._start(pod, rec, container, crec)
                changed = True
            changed |= await self._start_ephemeral(pod, rec)
        phase = pod_phase(pod, rec)
        if phase in ("Succeeded", "Failed"):
            rec.final_phase = phase
            changed = True
        if changed:
            self._save(rec)
        return rec

    async def _start_ephemeral(self, pod: pod_pb2.Pod, rec: PodRecord) -> bool:
        """Start each ephemeral container once, in the running pod (kube's kubelet never
        restarts one, whatever the pod's restartPolicy)."""
        changed = False
        for ec in pod.spec.ephemeralContainers:
            if ec.name in rec.ephemeral_containers or pod.metadata.HasField("deletionTimestamp"):
                continue
            crec = rec.ephemeral_containers[ec.name] = ContainerRecord(ec.name)
            container = as_container(pod, ec)
            if not container.command and self.ephemeral_default_command:
                container.command.extend(self.ephemeral_default_command)
            await self._start(pod, rec, container, crec)
            if crec.state == WAITING:  # it could not start: never again
                message = crec.waiting_message or crec.waiting_reason
                now = self._now()
                crec.state = TERMINATED
                crec.terminated = Termination(
                    exit_code=128,
                    reason="StartError",
                    message=message,
                    started_at=now,
                    finished_at=now,
                )
            changed = True
        return changed

    def forget(self, uid: str) -> None:
        self._pods.pop(uid, None)
        self._envs.pop(uid, None)
        self._mounts.pop(uid, None)
        self._volume_errors.pop(uid, None)
        self._specs.pop(uid, None)
        for key in [k for k in self._hook_failures if k[0] == uid]:
            del self._hook_failures[key]
        self.volumes.teardown(uid)
        shutil.rmtree(self._pod_dir(uid), ignore_errors=True)

    # ---- what a runtime supplies ----

    def _adopted(self, crec: ContainerRecord) -> bool:
        """Whether a container recorded as running before a kubelet restart still runs."""
        raise NotImplementedError

    def _before_sync(self) -> None:
        """Housekeeping before each sync (reaping helper processes)."""

    async def _exit_status(self, uid: str, crec: ContainerRecord) -> Termination | None:
        """The running container's termination if it has exited, else None."""
        raise NotImplementedError

    def _exec_hook(
        self, pod: pod_pb2.Pod, container: pod_pb2.Container, crec: ContainerRecord
    ) -> ExecHook:
        """How an exec hook's command runs in this container."""
        raise NotImplementedError

    async def _launch(
        self,
        pod: pod_pb2.Pod,
        rec: PodRecord,
        container: pod_pb2.Container,
        crec: ContainerRecord,
        resolved: dict[str, str],
    ) -> None:
        """Start an instance of the container with its resolved environment: RUNNING, or
        WAITING with the reason and a back-off."""
        raise NotImplementedError

    async def _kill_changed(self, pod: pod_pb2.Pod, rec: PodRecord, crec: ContainerRecord) -> None:
        """Stop a container whose image changed and leave it WAITING to start at once."""
        raise NotImplementedError

    async def kill_pod(self, uid: str, grace_seconds: float) -> None:
        raise NotImplementedError

    async def kill_container(self, uid: str, name: str, grace_seconds: float, why: str) -> None:
        raise NotImplementedError
