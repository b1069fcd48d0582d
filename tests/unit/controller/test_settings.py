"""Controller-manager flags and their Kubernetes defaults."""

from __future__ import annotations

import pytest

from controller.settings import Settings as ControllerSettings


def test_controller_manager_flags() -> None:
    s = ControllerSettings.from_args([])
    assert (s.lease_duration, s.renew_deadline, s.retry_period) == (15.0, 10.0, 2.0)
    assert (s.lease_namespace, s.lease_name) == ("kube-system", "tinykube-controller-manager")
    assert s.node_monitor_grace_period == 40.0
    assert s.default_unreachable_toleration_seconds == 300.0
    assert s.bind_address == "127.0.0.1:10257"
    s = ControllerSettings.from_args(
        ["--node-monitor-grace-period", "5s", "--controllers", "replicaset",
         "--leader-elect", "false"]
    )  # fmt: skip
    assert (s.node_monitor_grace_period, s.controllers, s.leader_elect) == (
        5.0,
        ("replicaset",),
        False,
    )
    with pytest.raises(SystemExit):
        ControllerSettings.from_args(["--controllers", "replicaset,nope"])
