"""The controller manager and the kubelet report an object their informer handlers refused
(the informer has logged it and kept its store): a counter by kind and a Warning Event on the
object, as the scheduler does, instead of only a log line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf.message import Message

from controller.app import ControllerManager
from controller.settings import Settings as ControllerSettings
from kubelet.app import Kubelet
from kubelet.settings import Settings as KubeletSettings
from tinykube.v1 import node_pb2, pod_pb2


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def emit(self, obj: Message, type: str, reason: str, message: str) -> None:
        self.events.append((obj.metadata.name, type, reason, message))  # type: ignore[attr-defined]


def controller_manager() -> tuple[Callable[[Any], Any], Any]:
    cm = ControllerManager(ControllerSettings.from_args([]))
    return cm._refused_by, cm.metrics


def kubelet() -> tuple[Callable[[Any], Any], Any]:
    kl = Kubelet(KubeletSettings.from_args(["--runtime", "fake"]))
    return kl._refused_by, kl.metrics


@pytest.mark.parametrize(
    ("make", "component"),
    [(controller_manager, "controller manager"), (kubelet, "kubelet")],
    ids=["controller-manager", "kubelet"],
)
async def test_refused_object_is_counted_and_reported(
    make: Callable[[], tuple[Callable[[Any], Any], Any]], component: str
) -> None:
    refused_by, metrics = make()
    recorder = Recorder()
    refused = refused_by(recorder)
    node = node_pb2.Node()
    node.metadata.name = "n1"
    refused(node, ValueError("capacity cpu: too large"))
    refused(node, ValueError("capacity cpu: too large"))
    pod = pod_pb2.Pod()
    pod.metadata.name = "web"
    refused(pod, KeyError("x"))
    counter = metrics.informer_handler_errors
    assert counter.labels("Node")._value.get() == 2
    assert counter.labels("Pod")._value.get() == 1
    assert recorder.events[0] == (
        "n1",
        "Warning",
        "FailedToCache",
        f"the {component} cannot use this Node: capacity cpu: too large",
    )
    assert len(recorder.events) == 3
