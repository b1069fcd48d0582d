"""The kubelet's gRPC service `tinykube.v1.Kubelet`: container logs.

`Logs` streams the log of one container instance, as Kubernetes' kubelet does: the current one
(the running or last-terminated instance; while a crashed container waits to restart, the
crashed one), or with `previous` the instance before it. The runtime's log files are CRI
records (kubelet/crilog.py): the text is printed with `timestamps` prefixes if asked, records
before `sinceSeconds`/`sinceTime` are skipped, reading starts `tailLines` records from the end,
and `limitBytes` cuts the output. With `follow`, new records are streamed until the
instance's log shim lets go of the file (the instance has ended and everything it wrote has
been read), the pod is gone from this kubelet, or the client cancels. Pods are found in the
kubelet's own pod informer (only its node's pods), so asking the wrong kubelet is NOT_FOUND,
as it would be for kubectl talking to the wrong node.

Concurrency: each call is a coroutine on the server's event loop; file reads are small and
non-blocking enough (local files) to be done inline.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc

from kubelet.crilog import LogOptions, LogWriter, tail_start, writer_active
from kubelet.runtime import Runtime
from kubelet.stats import StatsProvider, authorize_stats
from tinykube.clock import Clock
from tinykube.errors import (
    InvalidError,
    NotFoundError,
    TinykubeError,
    UnimplementedError,
    abort_with,
)
from tinykube.v1 import kubelet_pb2, kubelet_pb2_grpc, pod_pb2

CHUNK = 64 * 1024
# The most a follow reads from the file in one go.
FOLLOW_READ = 1024 * 1024
FOLLOW_POLL = 0.2


def _check_log_status(pod: pod_pb2.Pod, container: str, *, previous: bool) -> None:
    """Refuse, in the kubelet's words, a container that has no log to show yet."""
    statuses = [
        *pod.status.containerStatuses,
        *pod.status.initContainerStatuses,
        *pod.status.ephemeralContainerStatuses,
    ]
    status = next((s for s in statuses if s.name == container), None)
    where = f'container "{container}" in pod "{pod.metadata.name}"'
    if previous:
        if status is None or not status.lastState.HasField("terminated"):
            raise InvalidError(f"previous terminated {where} not found")
        return
    if status is None:
        raise InvalidError(f"{where} is waiting to start - no logs yet")
    state = status.state
    if state.HasField("running") or state.HasField("terminated"):
        return
    if status.lastState.HasField("terminated"):
        return
    if state.HasField("waiting"):
        raise InvalidError(f"{where} is waiting to start: {state.waiting.reason}")
    raise InvalidError(f"{where} is waiting to start - no logs yet")


def log_options(request: kubelet_pb2.LogsRequest, now_ns: int) -> LogOptions:
    """The request's options; `since` as the kubelet computes it (the later of the two)."""
    since = 0
    if request.HasField("sinceSeconds"):
        since = now_ns - request.sinceSeconds * 1_000_000_000
    if request.HasField("sinceTime"):
        since = max(since, request.sinceTime.seconds * 1_000_000_000 + request.sinceTime.nanos)
    return LogOptions(
        tail_lines=request.tailLines if request.HasField("tailLines") else None,
        limit_bytes=request.limitBytes if request.HasField("limitBytes") else None,
        timestamps=request.timestamps,
        since_ns=since,
    )


class KubeletService(kubelet_pb2_grpc.KubeletServicer):
    def __init__(
        self,
        get_pod: Callable[[str, str], pod_pb2.Pod | None],
        runtime: Runtime,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.get_pod = get_pod
        self.runtime = runtime
        self.clock = clock or Clock()
        # The summary API's source (kubelet/stats.py); the kubelet sets it.
        self.stats: StatsProvider | None = None

    async def Summary(
        self,
        request: kubelet_pb2.SummaryRequest,
        context: grpc.aio.ServicerContext[kubelet_pb2.SummaryRequest, kubelet_pb2.SummaryResponse],
    ) -> kubelet_pb2.SummaryResponse:
        """kube's /stats/summary, for callers allowed nodes/stats."""
        from kubelet.streaming import peer_identity  # streaming builds on this module

        try:
            if self.stats is None:
                raise UnimplementedError("this kubelet serves no stats")
            authorize_stats(peer_identity(context), self.stats.node_name)  # type: ignore[arg-type]
            summary = await self.stats.summary(request.onlyCpuAndMemory)
        except TinykubeError as exc:
            await abort_with(context, exc)  # type: ignore[arg-type]
        return kubelet_pb2.SummaryResponse(json=json.dumps(summary).encode())

    def _resolve(self, request: kubelet_pb2.LogsRequest) -> tuple[pod_pb2.Pod, Path]:
        namespace = request.namespace or "default"
        pod = self.get_pod(namespace, request.name)
        if pod is None:
            raise NotFoundError(f'pods "{request.name}" not found on this node')
        names = [c.name for c in pod.spec.containers]
        container = request.container
        if not container:
            if len(names) != 1:
                raise InvalidError(
                    f"a container name must be specified for pod {request.name}, "
                    f"choose one of: [{' '.join(names)}]"
                )
            container = names[0]
        elif (
            container not in names
            and container not in [c.name for c in pod.spec.initContainers]
            and container not in [c.name for c in pod.spec.ephemeralContainers]
        ):
            raise InvalidError(f"container {container} is not valid for pod {request.name}")
        _check_log_status(pod, container, previous=request.previous)
        path = self.runtime.log_path(pod.metadata.uid, container, previous=request.previous)
        if path is None:
            if request.previous:
                raise InvalidError(
                    f'previous terminated container "{container}" in pod '
                    f'"{pod.metadata.name}" not found'
                )
            raise UnimplementedError("this kubelet's runtime keeps no container logs")
        return pod, path

    async def Logs(
        self,
        request: kubelet_pb2.LogsRequest,
        context: grpc.aio.ServicerContext[kubelet_pb2.LogsRequest, kubelet_pb2.LogChunk],
    ) -> AsyncIterator[kubelet_pb2.LogChunk]:
        try:
            pod, path = self._resolve(request)
        except TinykubeError as exc:
            await abort_with(context, exc)  # type: ignore[arg-type]
        options = log_options(request, int(self.clock.now().timestamp() * 1e9))
        writer = LogWriter(options)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        start = tail_start(data, options.tail_lines) if options.tail_lines is not None else 0
        # A last record without its newline is still being written: a follow reads it later.
        out, used = writer.lines(data[start:] if start else data)
        offset = start + used
        for begin in range(0, len(out), CHUNK):
            yield kubelet_pb2.LogChunk(data=out[begin : begin + CHUNK])
        if not request.follow or writer.done:
            return
        namespace = request.namespace or "default"
        while True:
            await self.clock.sleep(FOLLOW_POLL)
            # Asked before reading: once the shim has let go, this read sees all it wrote.
            active = writer_active(path)
            try:
                with path.open("rb") as f:
                    f.seek(offset)
                    more = f.read(FOLLOW_READ)
            except FileNotFoundError:
                more = b""
            out, used = writer.lines(more)
            offset += used
            if out:
                yield kubelet_pb2.LogChunk(data=out)
            if writer.done:
                return
            if used:
                continue
            if not active:
                return  # the instance has ended and its log is complete
            current = self.get_pod(namespace, request.name)
            if current is None or current.metadata.uid != pod.metadata.uid:
                return
