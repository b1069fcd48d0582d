"""The `process` runtime: every container is a real local process.

Each container runs `command + args` (env from the spec plus PATH, HOME, HOSTNAME, and HOST_IP and
POD_IP, the node's IP: containers share the node's network; working directory `workingDir` or
the pod's own directory) in its own session, so its process group can
be signalled as a whole. The spec's env is resolved at every start (kubelet/envvars.py:
envFrom, valueFrom, $(VAR) expansion, also of command and args); a missing ConfigMap, Secret or
key keeps the container waiting with reason CreateContainerConfigError and a Warning Event
Failed "Error: <why>", tried again after the initial back-off. Exits are noticed by polling
(`Popen.poll` for our children, /proc for processes adopted after a kubelet restart) every
`poll_interval` seconds.

Volumes (kubelet/volumes.py) are prepared under `<root>/pods/<uid>/volumes/` before the
containers start, as for CRI; a process cannot have them mounted at their mountPath without a
mount namespace of its own, so each container with volumeMounts gets `$TINYKUBE_ROOT`, a
directory where `$TINYKUBE_ROOT<mountPath>` is a symlink to the volume (or its subPath).
readOnly cannot be enforced there (documented in docs/cri.md).

Logs are kept per container instance, as the kubelet's CRI logs are:
`<root>/pods/<uid>/logs/<container>/<restartCount>.log`, in the CRI format. Before each
instance starts, the runtime opens and flock()s its file and starts a log shim
(kubelet/logshim.py, its own session) that owns the read ends of the container's stdout and
stderr pipes and writes timestamped records; the container writes only to those pipes, so it
never depends on the kubelet process, and a restarted kubelet finds the instance's file again
from the restart count in state.json. The shim is no part of the container's process group:
signals go to the container's group, exactly as before. An exit is reported only once the
shim has written everything (its lock is free), or after LOG_DRAIN_WAIT seconds if something
the container started keeps the pipes open, so a finished container's log is complete when
its status says so. Only the current and the previous instance's logs are kept.

The lifecycle decisions (restartPolicy, the crash-loop back-off, init containers, a changed
image, state.json) are kubelet/kuberuntime.py's, shared with the CRI runtime; this module starts,
observes and stops processes. A command that cannot start is
waiting reason RunContainerError with the OS error, retried with the same back-off. A running
container whose image changed (kubelet/runtime.py `definition_changed`) is stopped as on
deletion and started again at once, whatever the restartPolicy: there are no images here, so
the same command runs, as a new instance with restart count + 1.

Every change is written to `<root>/pods/<uid>/state.json` (pids with their /proc start times,
restart counts, last terminations), so a restarted kubelet adopts the processes still running
instead of starting duplicates, and keeps restart counts. The exit code of an adopted process
that exits cannot be known (it is no longer our child): it is reported as Kubernetes does for a
container the runtime lost, reason ContainerStatusUnknown, exit code 137.
A container found gone when the kubelet starts (`load`: the node rebooted, or `tinykube up` was
stopped) is no crash: it starts again at once, restart count + 1, without back-off, as
Kubernetes' kubelet restarts a pod's containers after a reboot; back-off is for containers that
exit while a kubelet watches.

Concurrency: one event loop; process starts and signals are quick syscalls made inline.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubelet import logshim
from kubelet.attach import StdinPipes, open_terminal, terminal_argv
from kubelet.crilog import writer_active
from kubelet.envvars import (
    EnvSources,
    expand,
    static_environment,
)
from kubelet.kuberuntime import KubeRuntime
from kubelet.lifecycle import ExecHook, ExecResult
from kubelet.prober import MAX_OUTPUT
from kubelet.runtime import (
    RUNNING,
    TERMINATED,
    WAITING,
    ContainerRecord,
    PodRecord,
    Termination,
    definition_changed_message,
    start_events,
)
from kubelet.security import effective, verify_run_as_non_root
from kubelet.volumes import ContainerMount
from tinykube.clock import Clock
from tinykube.v1 import pod_pb2

log = logging.getLogger(__name__)

# The variable naming the directory under which a container finds its volumeMounts: each
# mountPath is `$TINYKUBE_ROOT<mountPath>`, a symlink to the volume on the node (a process has
# no mount namespace of its own; see docs/cri.md).
ROOT_ENV = "TINYKUBE_ROOT"
# How long an exited container's status waits for its log shim to finish writing.
LOG_DRAIN_WAIT = 2.0
SHIM = Path(logshim.__file__)


def proc_start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ")".
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def live_group_members(pgid: int) -> list[int]:
    """Pids of the processes of process group `pgid` that have not exited (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


# How long a stopped container's processes may take to die of SIGKILL: the signal is delivered
# when each is next scheduled, which on a loaded machine is not at once.
KILL_SETTLE_SECONDS = 5.0


class ProcessRuntime(KubeRuntime):
    # No images: `kubectl debug --image=...` without a command gets a shell, as debug images do.
    ephemeral_default_command = ("sh",)

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
        # Containers share the node's network: HOST_IP/POD_IP tell them the address to bind.
        super().__init__(
            root_dir,
            clock=clock,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            poll_interval=poll_interval,
            node_ip=node_ip,
            env_sources=env_sources,
        )
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        # Containers with `stdin: true` read a pipe whose write end attach uses.
        self.stdin_pipes = StdinPipes()
        # Our log shims, to be reaped once they exit (after a kubelet restart they are init's).
        self._shims: list[subprocess.Popen[bytes]] = []
        # Container pid -> wall time its exit was first seen, while its log drains.
        self._exited_at: dict[int, float] = {}

    def _adopted(self, crec: ContainerRecord) -> bool:
        return proc_start_time(crec.pid) == crec.proc_start

    def _before_sync(self) -> None:
        self._reap_shims()

    def exec_context(
        self, pod: pod_pb2.Pod, container: pod_pb2.Container
    ) -> tuple[dict[str, str], str]:
        """The environment and working directory of the container's processes (and of its exec
        probes)."""
        pod_dir = self._pod_dir(pod.metadata.uid)
        # A container sees only its own environment, as in Kubernetes, plus what a process
        # needs to find programs and a home.
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(pod_dir),
            "HOSTNAME": pod.metadata.name,
            "HOST_IP": self.node_ip,
            "POD_IP": self.node_ip,
        }
        if container.volumeMounts or container.terminationMessagePath:
            env[ROOT_ENV] = str(self._root_view(pod.metadata.uid, container.name))
        resolved = self._envs.get(pod.metadata.uid, {}).get(container.name)
        env.update(static_environment(container) if resolved is None else resolved)
        return env, container.workingDir or str(pod_dir)

    def _exec_hook(
        self, pod: pod_pb2.Pod, container: pod_pb2.Container, crec: ContainerRecord
    ) -> ExecHook:
        """An exec hook runs as the container's own processes do: its environment and working
        directory, its own session (killed with its group if the hook is abandoned)."""
        env, cwd = self.exec_context(pod, container)

        async def run(argv: list[str]) -> ExecResult:
            if not argv:
                return ExecResult(-1, "", "", "no command given")
            if "/" not in argv[0] and shutil.which(argv[0], path=env["PATH"]) is None:
                return ExecResult(-1, "", "", f'exec: "{argv[0]}": executable file not found')
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,
                    **self._credentials(pod, container),
                )
            except (OSError, ValueError) as exc:
                return ExecResult(-1, "", "", f"exec: {exc}")
            try:
                out, err = await proc.communicate()
            finally:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    await proc.wait()
            code = proc.returncode if proc.returncode is not None else -1
            text = out[:MAX_OUTPUT].decode(errors="replace")
            return ExecResult(code, text, err[:MAX_OUTPUT].decode(errors="replace"))

        return run

    def _credentials(self, pod: pod_pb2.Pod, container: pod_pb2.Container) -> dict[str, Any]:
        """Popen's user, group and extra_groups from the effective securityContext
        (kubelet/security.py) when the kubelet is root (setuid/setgid/setgroups in the child);
        nothing else of a securityContext applies to a process (docs/cri.md)."""
        eff = effective(pod, container)
        if eff.run_as_user is None and eff.run_as_group is None and not eff.groups:
            return {}
        if os.geteuid() != 0:
            return {}  # not root: the container runs as the kubelet's user (docs/cri.md)
        out: dict[str, Any] = {"extra_groups": eff.groups}
        if eff.run_as_user is not None:
            out["user"] = eff.run_as_user
        if eff.run_as_group is not None:
            out["group"] = eff.run_as_group
        return out

    def _root_view(self, uid: str, container: str) -> Path:
        return self._pod_dir(uid) / "roots" / container

    def _make_root_view(self, uid: str, container: str, mounts: list[ContainerMount]) -> None:
        """The container's view of its mounts: `<view>/<mountPath>` a symlink to the volume
        (or its subPath) on the node, made afresh at each start."""
        view = self._root_view(uid, container)
        shutil.rmtree(view, ignore_errors=True)
        view.mkdir(parents=True)
        for m in mounts:
            link = view / m.container_path.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                link.symlink_to(m.host_path)

    async def _exit_status(self, uid: str, crec: ContainerRecord) -> Termination | None:
        """The container's termination if its process has exited, else None."""
        child = self._children.get(crec.pid)
        if child is not None:
            code = child.poll()
            if code is None:
                return None
            seen = self._exited_at.setdefault(crec.pid, self._now())
            path = self.instance_log(uid, crec.name, crec.restart_count)
            if writer_active(path) and self._now() - seen < LOG_DRAIN_WAIT:
                return None
            del self._children[crec.pid]
            self._exited_at.pop(crec.pid, None)
            sig = -code if code < 0 else 0
            exit_code = 128 + sig if sig else code
            return Termination(
                exit_code=exit_code,
                signal=sig,
                reason="Completed" if exit_code == 0 else "Error",
                started_at=crec.started_at,
                finished_at=seen,
                container_id=f"process://{crec.pid}",
            )
        if proc_start_time(crec.pid) == crec.proc_start:
            return None
        return Termination(
            exit_code=137,
            reason="ContainerStatusUnknown",
            message="The container could not be located when the pod was terminated",
            started_at=crec.started_at,
            finished_at=self._now(),
            container_id=f"process://{crec.pid}",
        )

    async def _launch(
        self,
        pod: pod_pb2.Pod,
        rec: PodRecord,
        container: pod_pb2.Container,
        crec: ContainerRecord,
        resolved: dict[str, str],
    ) -> None:
        # Variables in command and args are the container's (kube's ExpandContainerCommandAndArgs).
        argv = [expand(a, resolved) for a in (*container.command, *container.args)]
        self._pod_dir(rec.uid).mkdir(parents=True, exist_ok=True)
        env, cwd = self.exec_context(pod, container)
        error = ""
        if not argv:
            error = "no command given: the process runtime runs spec.containers[].command"
        elif "/" not in argv[0] and shutil.which(argv[0], path=env["PATH"]) is None:
            error = f'exec: "{argv[0]}": executable file not found in $PATH'
        else:
            error = self._ports_taken(container)
        if not error:
            # The "image" user of a process is the kubelet's own.
            refused = verify_run_as_non_root(pod, container, os.geteuid(), "")
            if refused:
                self._config_error(rec, crec, refused)
                return
        # The instance this start makes: restart_count counts the starts after the first.
        instance = crec.restart_count + (1 if crec.last is not None else 0)
        mounts = self._mounts.get(rec.uid, {}).get(container.name, [])
        if not error and mounts:
            try:
                self._make_root_view(rec.uid, container.name, mounts)
            except OSError as exc:
                error = f"failed to prepare the container's mounts: {exc}"
        # A `tty: true` container's stdio is a pseudo-terminal (kubelet/attach.py): the shim
        # reads the terminal's output into the log, the kubelet keeps its master for attach's
        # input and resizes.
        master = slave = -1
        if not error:
            try:
                if container.tty:
                    master, slave = open_terminal()
                out_w, err_w = self._start_shim(rec.uid, container.name, instance, master)
            except OSError as exc:
                error = f"failed to start the container's log shim: {exc}"
                for fd in (master, slave):
                    if fd >= 0:
                        os.close(fd)
        if not error:
            if slave >= 0:
                stdin, out_w, err_w = os.dup(slave), slave, err_w
                self.stdin_pipes.adopt(rec.uid, container.name, master)
                argv, env = terminal_argv(argv), {"TERM": "xterm", **env}
            else:
                stdin = self.stdin_pipes.open(rec.uid, container.name) if container.stdin else -1
            try:
                # A fork/exec: quick, made inline as before the hook became async.
                child = subprocess.Popen(  # noqa: ASYNC220
                    argv,
                    stdin=stdin if stdin >= 0 else subprocess.DEVNULL,
                    stdout=out_w,
                    stderr=slave if slave >= 0 else err_w,
                    cwd=cwd,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                    **self._credentials(pod, container),
                )
            except (OSError, ValueError) as exc:
                # ValueError: a variable the OS cannot take (a NUL byte in a Secret's value).
                error = f"failed to start container process: {exc}"
            finally:
                # Only the container holds the write ends now: the shim sees EOF when it ends.
                os.close(out_w)
                os.close(err_w)
                if stdin >= 0:
                    os.close(stdin)
        now = self._now()
        if error:
            delay = self._backoff(crec)
            crec.state = WAITING
            crec.waiting_reason = "RunContainerError"
            crec.waiting_message = error
            crec.next_start = now + delay
            log.warning("pod %s/%s container %s: %s", rec.namespace, rec.name, crec.name, error)
            rec.events.append(("Warning", "Failed", f"Error: {error}"))
            return
        self._children[child.pid] = child
        if crec.last is not None:
            crec.restart_count += 1
        crec.pid = child.pid
        crec.proc_start = proc_start_time(child.pid) or ""
        crec.started_at = now
        crec.state = RUNNING
        crec.waiting_reason = crec.waiting_message = ""
        crec.terminated = None
        crec.image = container.image
        rec.events.extend(start_events(container))
        log.info(
            "pod %s/%s container %s started: pid %d", rec.namespace, rec.name, crec.name, child.pid
        )

    def _start_shim(
        self, uid: str, container: str, instance: int, terminal: int = -1
    ) -> tuple[int, int]:
        """Start the log shim of a container instance; the write ends of its stdout and stderr.
        With a `terminal` (a pty's master) the shim reads the container's output from it (a
        duplicate) instead: the stdout returned is then -1 and the stderr /dev/null (the
        container writes both to the terminal's slave).

        The log file is created and exclusively locked here, before the shim runs, so that the
        lock is held from before the container's first write until the shim's last.
        """
        path = self.instance_log(uid, container, instance)
        path.parent.mkdir(parents=True, exist_ok=True)
        for old in path.parent.glob("*.log"):
            # The kubelet keeps the current and the previous instance's logs only.
            if old.stem.isdigit() and int(old.stem) < instance - 1:
                old.unlink(missing_ok=True)
        fds: list[int] = []
        try:
            log_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            fds.append(log_fd)
            fcntl.flock(log_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if terminal >= 0:
                out_r, out_w = os.dup(terminal), -1
                fds.append(out_r)
            else:
                out_r, out_w = os.pipe()
                fds += [out_r, out_w]
            err_r, err_w = os.pipe()
            fds += [err_r, err_w]
            shim = subprocess.Popen(
                [sys.executable, "-I", "-S", str(SHIM), str(log_fd), str(out_r), str(err_r)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(log_fd, out_r, err_r),
                # Its own session: neither the container's group signals nor the kubelet's
                # terminal reach it; it ends when the container's output does.
                start_new_session=True,
            )
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        self._shims.append(shim)
        for fd in (log_fd, out_r, err_r):
            os.close(fd)
        if terminal >= 0:
            # The container writes only to its terminal: the shim's stderr ends now.
            os.close(err_w)
            err_w = os.open(os.devnull, os.O_WRONLY)
        return out_w, err_w

    def _reap_shims(self) -> None:
        self._shims = [s for s in self._shims if s.poll() is None]

    def _ports_taken(self, container: pod_pb2.Container) -> str:
        """Pods share the node's network, so a declared port must be free on the node's IP."""
        for port in container.ports:
            if (port.protocol or "TCP") != "TCP":
                continue
            number = port.hostPort or port.containerPort
            host = port.hostIP if port.hostIP not in ("", "0.0.0.0") else self.node_ip
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                # SO_REUSEADDR: a port whose last user is in TIME_WAIT is free to listen on.
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((host, number))
                except OSError as exc:
                    if exc.errno != errno.EADDRINUSE:
                        continue  # e.g. an address not on this machine: not ours to judge
                    return (
                        f"port {number}/TCP on the node ({host}) is already in use: {exc.strerror}"
                        " (pods share their node's network in the process runtime)"
                    )
        return ""

    def _signal(self, crec: ContainerRecord, sig: signal.Signals) -> None:
        if crec.pid <= 0:
            return
        if crec.pid not in self._children and proc_start_time(crec.pid) != crec.proc_start:
            return  # an adopted process that is gone; its pid may belong to someone else now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(crec.pid, sig)

    def _alive(self, crec: ContainerRecord) -> bool:
        child = self._children.get(crec.pid)
        if child is not None:
            return child.poll() is None
        return proc_start_time(crec.pid) == crec.proc_start

    async def kill_pod(self, uid: str, grace_seconds: float) -> None:
        rec = self._pods.get(uid)
        if rec is None:
            return
        running = [
            c
            for c in (
                *rec.init_containers.values(),
                *rec.containers.values(),
                *rec.ephemeral_containers.values(),
            )
            if c.state == RUNNING and c.pid > 0
        ]
        for crec in running:
            rec.events.append(("Normal", "Killing", f"Stopping container {crec.name}"))
        # Each container as kube's killContainer, all at once: its preStop hook, then SIGTERM
        # and SIGKILL after the grace the hook left.
        await asyncio.gather(*(self._kill_one(uid, c, grace_seconds) for c in running))
        if running:
            self._save(rec)

    async def _kill_one(self, uid: str, crec: ContainerRecord, grace_seconds: float) -> None:
        grace = await self._pre_stop(uid, crec, grace_seconds)
        self._signal(crec, signal.SIGTERM)
        deadline = self.clock.monotonic() + max(0.0, grace)
        while self._alive(crec) and self.clock.monotonic() < deadline:
            await self.clock.sleep(0.1)
        # The whole group: children the container started die with it.
        self._signal(crec, signal.SIGKILL)
        child = self._children.pop(crec.pid, None)
        self._exited_at.pop(crec.pid, None)
        code = None
        if child is not None:
            code = await asyncio.to_thread(child.wait)
        # Stopped means every process of the container is gone, as a CRI StopContainer
        # returns once its cgroup is empty: SIGKILL reaches the group's members when each
        # is next scheduled, not when killpg returns.
        for _ in range(int(KILL_SETTLE_SECONDS / 0.01)):  # real processes, real time
            if not live_group_members(crec.pid):
                break
            await asyncio.sleep(0.01)
        if code is not None and code >= 0:
            exit_code = code  # it exited by itself within the grace period
        else:
            exit_code = 137 if grace_seconds <= 0 or code == -signal.SIGKILL else 143
        crec.state = TERMINATED
        crec.terminated = self._with_message(
            uid,
            crec,
            Termination(
                exit_code=exit_code,
                reason="Completed" if exit_code == 0 else "Error",
                started_at=crec.started_at,
                finished_at=self._now(),
            ),
        )

    async def kill_container(self, uid: str, name: str, grace_seconds: float, why: str) -> None:
        rec = self._pods.get(uid)
        crec = rec.containers.get(name) if rec is not None else None
        if rec is None or crec is None or crec.state != RUNNING or crec.pid <= 0:
            return
        rec.events.append(("Normal", "Killing", why))
        log.info("pod %s/%s container %s: %s", rec.namespace, rec.name, name, why)
        grace_seconds = await self._pre_stop(uid, crec, grace_seconds)
        self._signal(crec, signal.SIGTERM)
        deadline = self.clock.monotonic() + max(0.0, grace_seconds)
        while self._alive(crec) and self.clock.monotonic() < deadline:
            await self.clock.sleep(0.1)
        if self._alive(crec):
            self._signal(crec, signal.SIGKILL)
        # The exit is observed by the next sync_pod, as a crash is: restartPolicy decides.

    async def _kill_changed(self, pod: pod_pb2.Pod, rec: PodRecord, crec: ContainerRecord) -> None:
        """Stop a container whose image changed (SIGTERM, SIGKILL after the pod's grace
        period) and have it start again from the new spec at once: no back-off, whatever the
        restartPolicy; the restart count grows as for any restart."""
        why = definition_changed_message(crec.name)
        rec.events.append(("Normal", "Killing", why))
        log.info("pod %s/%s container %s: %s", rec.namespace, rec.name, crec.name, why)
        spec = pod.spec
        grace = await self._pre_stop(
            rec.uid,
            crec,
            float(
                spec.terminationGracePeriodSeconds
                if spec.HasField("terminationGracePeriodSeconds")
                else 30
            ),
        )
        self._signal(crec, signal.SIGTERM)
        deadline = self.clock.monotonic() + max(0.0, grace)
        while self._alive(crec) and self.clock.monotonic() < deadline:
            await self.clock.sleep(0.1)
        self._signal(crec, signal.SIGKILL)
        child = self._children.pop(crec.pid, None)
        self._exited_at.pop(crec.pid, None)
        code = -signal.SIGKILL if child is None else await asyncio.to_thread(child.wait)
        sig = -code if code < 0 else 0
        exit_code = 128 + sig if sig else code
        crec.last = self._with_message(
            rec.uid,
            crec,
            Termination(
                exit_code=exit_code,
                signal=sig,
                reason="Completed" if exit_code == 0 else "Error",
                started_at=crec.started_at,
                finished_at=self._now(),
                container_id=f"process://{crec.pid}",
            ),
        )
        crec.terminated = None
        crec.state = WAITING
        crec.waiting_reason, crec.waiting_message = "ContainerCreating", ""
        crec.next_start = 0.0

    def forget(self, uid: str) -> None:
        super().forget(uid)
        self.stdin_pipes.forget(uid)
