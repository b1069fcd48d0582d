"""Where a pod's start went, from the kubelet's own clocks (kube's pod startup latency tracker).

Each pod worker keeps a `StartupTrace`: when the kubelet first saw the pod (its informer's
event), when the worker's first sync began, the runtime's stage spans (`PodRecord.timings`: the
volumes; with a CRI runtime RunPodSandbox with its CNI ADD, PodSandboxStatus, and per container
the image check or pull, CreateContainer and StartContainer), and the status write that first
reported phase Running (sent, answered). When that write is answered the kubelet logs one line,

    Observed pod startup duration {"pod": "default/web", "seen": 1796520361.9, ...}

(kube's kubelet logs its "Observed pod startup duration" alike), its JSON for tools such as
bench/cri_startup.py, and feeds kubelet_pod_start_duration_seconds. Times are wall seconds
(epoch), so they line up with other processes' clocks on the node. A pod never reported
Running (or running before this kubelet started) logs nothing.

Concurrency: one event loop; a trace belongs to one pod worker.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

LINE_PREFIX = "Observed pod startup duration "
# The first spans a trace keeps: a pod that never runs (a sandbox or a pull failing again and
# again, with back-off) adds a few each try, for as long as its worker lives.
MAX_SPANS = 64


@dataclass
class StartupTrace:
    pod: str
    seen: float
    first_sync: float = 0.0
    spans: list[tuple[str, float, float]] = field(default_factory=list)
    done: bool = False

    def sync_began(self, at: float) -> None:
        if not self.first_sync:
            self.first_sync = at

    def add(self, spans: list[tuple[str, float, float]]) -> None:
        if not self.done:
            self.spans.extend(spans[: MAX_SPANS - len(self.spans)])

    def running(
        self, sent: float, written: float, observe: Callable[[float], None] | None = None
    ) -> None:
        """The status write that first reported the pod Running was sent at `sent` and
        answered at `written`: log the trace once, and give `observe` the seconds from the
        kubelet seeing the pod to that answer."""
        if self.done:
            return
        self.done = True
        if observe is not None:
            observe(max(0.0, written - self.seen))
        log.info("%s%s", LINE_PREFIX, json.dumps(self.as_dict(sent, written)))

    def as_dict(self, sent: float, written: float) -> dict[str, object]:
        return {
            "pod": self.pod,
            "seen": round(self.seen, 6),
            "first_sync": round(self.first_sync, 6),
            "spans": [[name, round(a, 6), round(b, 6)] for name, a, b in self.spans],
            "status_sent": round(sent, 6),
            "status_written": round(written, 6),
        }


def parse_line(line: str) -> dict[str, object] | None:
    """The trace a kubelet log line carries, or None if it carries none."""
    at = line.find(LINE_PREFIX)
    if at < 0:
        return None
    try:
        data = json.loads(line[at + len(LINE_PREFIX) :])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
