"""The kubelet's gRPC service `tinykube.v1.Kubelet`: container logs.

`Logs` streams a container's log file in chunks: everything (or the last `tail_lines` lines),
then, with `follow`, new output as it is written until the pod is gone from this kubelet, has
finished, or the client cancels. Pods are found in the kubelet's own pod informer (only its
node's pods), so asking the wrong kubelet is NOT_FOUND, as it would be for kubectl talking to
the wrong node.

Concurrency: each call is a coroutine on the server's event loop; file reads are small and
non-blocking enough (local files) to be done inline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc

from kubelet.runtime import Runtime
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
FOLLOW_POLL = 0.2


def _check_log_status(pod: pod_pb2.Pod, container: str, *, previous: bool) -> None:
    """Refuse, in the kubelet's words, a container that has no log to show yet."""
    statuses = [*pod.status.containerStatuses, *pod.status.initContainerStatuses]
    status = next((s for s in statuses if s.name == container), None)
    where = f'container "{container}" in pod "{pod.metadata.name}"'
    if previous:
        if status is None or not status.lastState.HasField("terminated"):
            raise InvalidError(f"previous terminated {where} not found")
        # Restarts append to one log file, so the previous instance cannot be told apart.
        raise InvalidError(
            f"previous terminated {where}: this kubelet's runtime keeps one log across restarts"
        )
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


def tail(data: bytes, lines: int) -> bytes:
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


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
        elif container not in names and container not in [c.name for c in pod.spec.initContainers]:
            raise InvalidError(f"container {container} is not valid for pod {request.name}")
        _check_log_status(pod, container, previous=request.previous)
        if request.timestamps or request.HasField("sinceSeconds") or request.HasField("sinceTime"):
            # The process runtime hands each container its log file directly, so no time is
            # known for any line.
            raise InvalidError(
                "this kubelet's runtime does not record when log lines were written: "
                "timestamps, sinceSeconds and sinceTime are not supported"
            )
        path = self.runtime.log_path(pod.metadata.uid, container)
        if path is None:
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
        offset = 0
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        offset = len(data)
        if request.HasField("tailLines"):
            data = tail(data, request.tailLines)
        left = request.limitBytes if request.HasField("limitBytes") else None
        if left is not None:
            data = data[:left]
            left -= len(data)
        for start in range(0, len(data), CHUNK):
            yield kubelet_pb2.LogChunk(data=data[start : start + CHUNK])
        if not request.follow or left == 0:
            return
        namespace = request.namespace or "default"
        while True:
            await self.clock.sleep(FOLLOW_POLL)
            try:
                with path.open("rb") as f:
                    f.seek(offset)
                    more = f.read(CHUNK)
            except FileNotFoundError:
                more = b""
            if more:
                offset += len(more)
                if left is not None:
                    more = more[:left]
                    left -= len(more)
                yield kubelet_pb2.LogChunk(data=more)
                if left == 0:
                    return
                continue
            current = self.get_pod(namespace, request.name)
            if current is None or current.metadata.uid != pod.metadata.uid:
                return
            if current.status.phase in ("Succeeded", "Failed"):
                return  # nothing more will be written, as `kubectl logs -f` of a finished pod
