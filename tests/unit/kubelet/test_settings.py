"""Kubelet flags: durations, labels, taints, capacity, defaults."""

from __future__ import annotations

import argparse

import pytest

from kubelet.settings import Settings, parse_labels, parse_taints
from tinykube.flags import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"), [("10s", 10.0), ("1m", 60.0), ("500ms", 0.5), ("2", 2.0), ("1.5s", 1.5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten", "-1s", "5d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


def test_labels_and_taints() -> None:
    assert parse_labels("zone=a, disk=ssd") == {"zone": "a", "disk": "ssd"}
    assert parse_taints("dedicated=gpu:NoSchedule,maint:NoExecute") == [
        ("dedicated", "gpu", "NoSchedule"),
        ("maint", "", "NoExecute"),
    ]
    with pytest.raises(argparse.ArgumentTypeError):
        parse_taints("k=v:Sometimes")
    with pytest.raises(argparse.ArgumentTypeError):
        parse_labels("novalue")


def test_kubelet_defaults_and_overrides() -> None:
    s = Settings.from_args(["--node-name", "n1"])
    # the node's address (default 127.0.0.1), not every interface
    assert s.bind_address == "127.0.0.1:10250"
    assert Settings.from_args(["--node-name", "n1", "--node-ip", "10.0.0.5"]).bind_address == (
        "10.0.0.5:10250"
    )
    assert s.capacity["pods"] == "110" and int(s.capacity["cpu"]) >= 1
    assert s.capacity["memory"].endswith("Ki")
    assert s.lease_renew_interval == 10.0
    assert s.root_dir.name == "n1"
    s = Settings.from_args(
        ["--node-name", "n1", "--bind-address", "127.0.0.1", "--port", "0",
         "--capacity", "cpu=2,memory=1Gi", "--node-lease-duration-seconds", "4"]
    )  # fmt: skip
    assert s.bind_address == "127.0.0.1:0"
    assert (s.capacity["cpu"], s.capacity["memory"], s.capacity["pods"]) == ("2", "1Gi", "110")
    assert s.lease_renew_interval == 1.0
    fake = Settings.from_args(["--runtime", "fake", "--fake-nodes", "3"])
    assert fake.node_names == ["hollow-0", "hollow-1", "hollow-2"]
    assert not fake.fake_pod_watch_per_node
    per_node = ["--runtime", "fake", "--fake-nodes", "3", "--fake-pod-watch-per-node"]
    assert Settings.from_args(per_node).fake_pod_watch_per_node


def test_bad_capacity_is_rejected() -> None:
    with pytest.raises(SystemExit):
        Settings.from_args(["--capacity", "cpu=lots"])
